"""Whether the replay taken from the first step's training forward (`Trainer.shares_replay`) equals the replay of a
forward of its own, bit for bit, on the GPU: a mid-size FP16 Huginn (n_embd 1024, 8 heads of 128, 8 recurrences),
random weights, a batch of 8 completions of 96 + 48 tokens, two optimizer steps a rollout (the default), GRPO and
DPPO, blocks eager and compiled. Each case compares the records (replay, advantages), every metric and the weights
after both steps; a twin replays under other seeds and must compare different.
  PYTHONPATH=. python benchmarks/gpu/shared_replay.py OUT.json"""
import dataclasses, json, sys, time
import torch
from looprl.bench import environment
from looprl.bench.train import _synthetic_rollout
from looprl.model.config import tiny_config
from looprl.model.models import build_model, init_weights
from looprl.model.hf import export_tensors
from looprl.training.settings import TrainSettings
from looprl.training.trainer import Trainer

CFG = tiny_config("huginn_raven", n_embd=1024, n_heads=8, head_dim=128, num_key_value_heads=8, intermediate_size=2816,
                  vocab_size=32768, padded_vocab_size=32768, block_size=1024, mean_recurrence=8)

def trained(algorithm: str, compiled: bool, shares: bool, seed_shift: int = 0) -> tuple:
    critic = None if algorithm == "grpo" else init_weights(build_model(CFG, "critic", device="cuda"), seed=2)
    s = TrainSettings(algorithm=algorithm, precision="fp16", recompute=True, micro_batch_size=4, optimizer="sgd",
                      lr=1e-3, warmup_steps=0, compile_blocks=compiled)
    t = Trainer(init_weights(build_model(CFG, device="cuda"), seed=1), critic, s, "cuda")
    t.shares_replay = lambda: shares
    r = _synthetic_rollout(CFG.vocab_size, 8, 96, 48)
    r = dataclasses.replace(r, seeds=[x + seed_shift for x in r.seeds])
    out = t.train(r, group_size=2)
    torch.cuda.synchronize()
    return out["records"], out["metrics"], {k: v.cpu() for k, v in export_tensors(t.actor.model).items()}

def case(algorithm: str, compiled: bool) -> dict:
    t0 = time.perf_counter()
    rec, met, w = trained(algorithm, compiled, True)
    rec1, met1, w1 = trained(algorithm, compiled, False)
    twin = trained(algorithm, compiled, False, seed_shift=1000)[0]
    diff = max(abs(a - b) for ra, rb in zip(rec["replay_logprobs"], rec1["replay_logprobs"]) for a, b in zip(ra, rb))
    return dict(algorithm=algorithm, compiled=compiled, replay_equal=rec["replay_logprobs"] == rec1["replay_logprobs"],
                replay_max_abs_diff=diff, records_equal=rec == rec1, metrics_equal=met == met1,
                weights_equal=all(torch.equal(w[k], w1[k]) for k in w), parity_max=[met["parity_max"], met1["parity_max"]],
                twin_replay_different=twin["replay_logprobs"] != rec1["replay_logprobs"], seconds=time.perf_counter() - t0)

if __name__ == "__main__":
    doc = dict(command="PYTHONPATH=. python " + " ".join(sys.argv), environment=environment(), purpose=__doc__, rows=[])
    for algorithm in ("grpo", "dppo"):
        for compiled in (False, True):
            try: row = case(algorithm, compiled)
            except Exception as e: row = dict(algorithm=algorithm, compiled=compiled, error=f"{type(e).__name__}: {e}"[:600])
            doc["rows"].append(row); print(json.dumps(row), flush=True)
            json.dump(doc, open(sys.argv[1], "w"), indent=1)
