"""The actor's training step at Huginn-0125 shapes (batch 16 × 176 tokens, FP16, recompute) with parts of it changed in
this process, one variant after another, to see what each part costs: `python -m looprl.bench train` runs each variant.
  PYTHONPATH=. python benchmarks/gpu/train_variants.py OUT.json [VARIANT ...]
Variants (a '+' joins several): base; no_replay (the replay forward skipped: what sharing it with the training forward
could save); compile_norm (RMSNorm's forward through torch.compile); compile_rope (RoPE); compile_mlp (the MLP);
compile_block (each sandwich block's forward); half_recompute (activations kept for every other block instead of
recomputed for all)."""
import gc, json, sys, time, traceback
import os
import torch
from looprl.bench import environment
from looprl.bench.train import bench_train
from looprl.model import models
from looprl.model.families import huginn
from looprl.training.trainer import Trainer

PRESET, DEVICE = os.environ.get("PRESET", "huginn-0125"), os.environ.get("DEVICE", "cuda")   # PRESET=tiny DEVICE=cpu: a check

def patches(name: str):
    "(object, attribute, new value) for one variant part."
    c = lambda f: torch.compile(f, dynamic=False)
    if name == "base": return []
    if name == "no_replay": return [(Trainer, "_selected_logprobs", lambda self, b, rows=None: torch.zeros_like(b.mask))]
    if name == "compile_norm": return [(models.RMSNorm, "forward", c(models.RMSNorm.forward))]
    if name == "compile_rope": return [(huginn.HuginnAttention, "rope", staticmethod(c(models.rope_interleaved)))]
    if name == "compile_mlp": return [(huginn.FusedGatedMLP, "forward", c(huginn.FusedGatedMLP.forward))]
    if name == "compile_block": return [(huginn.SandwichBlock, "forward", c(huginn.SandwichBlock.forward))]
    if name == "half_recompute":
        run = models.LoopedLM._run
        def _run(self, block, x, ctx, plane):
            if plane % 2 == 0 and ctx.cache is None and torch.is_grad_enabled(): return block(x, ctx, plane)
            return run(self, block, x, ctx, plane)
        return [(models.LoopedLM, "_run", _run)]
    raise SystemExit(f"unknown variant part {name!r}")

def measure(variant: str, batch: int) -> dict:
    changes = [p for part in variant.split("+") for p in patches(part)]
    old = [(o, a, o.__dict__[a]) for o, a, _ in changes]
    for o, a, v in changes: setattr(o, a, v)
    t = time.perf_counter()
    try: return dict(variant=variant, **bench_train(PRESET, DEVICE, "fp16" if DEVICE == "cuda" else "fp32", batch=batch, prompt_len=128,
                                                     response_len=48, steps=3), wall_s=time.perf_counter() - t)
    except Exception as e: return dict(variant=variant, error=f"{type(e).__name__}: {e}"[:600], trace=traceback.format_exc()[-1500:])
    finally:
        for o, a, v in old: setattr(o, a, v)
        torch._dynamo.reset(); gc.collect()
        if torch.cuda.is_available(): torch.cuda.empty_cache()

if __name__ == "__main__":
    out, variants = sys.argv[1], sys.argv[2:] or ["base", "no_replay", "compile_norm", "compile_norm+compile_rope+compile_mlp",
                                                  "compile_block", "half_recompute"]
    batch = int(os.environ.get("BATCH", 16))
    doc = dict(command="PYTHONPATH=. python " + " ".join(sys.argv), environment=environment(), batch=batch, rows=[])
    for v in variants:
        row = measure(v, batch); doc["rows"].append(row)
        print(json.dumps({k: row.get(k) for k in ("variant", "step_s", "mfu", "peak_memory_gib", "error")}), flush=True)
        json.dump(doc, open(out, "w"), indent=1)
