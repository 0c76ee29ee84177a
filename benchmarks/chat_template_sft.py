"""A tiny Huginn that speaks Huginn-0125's chat template, for a GRPO run with message rows.

The shipped (warm-started) tiny Huginn is given the template's tokenizer files (`make_tiny --chat huginn-0125` writes
the same for a fresh model: the template's special tokens, `tokenizer_config.json`, `generation_config.json`) and
fine-tuned on the warm-start split rendered by the template, every answer ending in `<|end_turn|>`, the turn's end the
generation config lists. It then sees prompts in the format a chat checkpoint was trained on, and stops where one stops.

    PYTHONPATH=. python benchmarks/chat_template_sft.py OUT [STEPS]
"""
import json, shutil, sys, time
from pathlib import Path
import torch
from tokenizers import Tokenizer
from looprl.model.config import load_config
from looprl.model.hf import load_checkpoint, save_checkpoint
from looprl.model.registry import default_family
from looprl.run.task_model import answer_loss, supervised_batch
from looprl.tasks.data import WARMSTART_DATA, PromptCursor, load_prompts
from looprl.tasks.prompting import PromptSettings, load_prompter, write_chat_files

def main(out, steps=300, batch=64, lr=3e-4, seed=0):
    out = Path(out)
    shutil.copytree(default_family().embedded, out)
    gen = write_chat_files(out, "huginn-0125")
    end_turn = gen["eos_token_id"][-1]
    tok, cfg = Tokenizer.from_file(str(out / "tokenizer.json")), load_config(out)
    prompter = load_prompter(out, PromptSettings())
    examples = []
    for r in load_prompts(WARMSTART_DATA):
        p = prompter.encode(tok, cfg, r)
        examples.append((p + tok.encode(r["label"], add_special_tokens=False).ids + [end_turn], len(p)))
    torch.manual_seed(seed); torch.set_num_threads(1)
    model = load_checkpoint(out, dtype=torch.float32).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    cursor, t0, losses = PromptCursor(len(examples), seed), time.perf_counter(), []
    for step in range(steps):
        idx = cursor.take(batch)
        seeds = [step * batch + i for i in range(batch)]
        ids, tgt, lat = supervised_batch([examples[i] for i in idx], seeds, model, "cpu")
        loss = answer_loss(model, ids, tgt, lat)
        opt.zero_grad(set_to_none=True); loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step()
        losses.append(loss.item())
        if (step + 1) % 50 == 0:
            print(f"step {step + 1}: loss {sum(losses[-50:]) / 50:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    save_checkpoint(model.eval(), out, dtype=torch.float16, tokenizer=tok)
    write_chat_files(out, "huginn-0125")         # the save replaced the directory: its chat files again (same ids)
    print(json.dumps(dict(out=str(out), steps=steps, batch=batch, lr=lr, first_loss=losses[0], final_loss=losses[-1],
                          generation_config=gen, train_s=round(time.perf_counter() - t0, 1))))

if __name__ == "__main__": main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
