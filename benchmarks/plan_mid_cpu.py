"""The plan's trainer figures against the measured peak resident memory of one GRPO training step on the CPU, at the
mid size of benchmarks/gpu/make_checkpoints.py (random weights), FP32, SGD, one optimizer step of one micro-batch of ROWS sequences of
PROMPT + RESPONSE tokens, recompute off and on. Each case runs in a fresh process: the peak RSS after the step minus the
RSS once the trainer is built is compared with the plan's gradients + optimizer + activations + the gradient sums of
the reused (looped and tied) weights.
usage: python benchmarks/plan_mid_cpu.py OUT.json"""
import json, resource, subprocess, sys, tempfile
from pathlib import Path

ROWS, PROMPT, RESPONSE = 4, 16, 48

def case(model_dir: str, recompute: bool) -> dict:
    import torch
    from looprl.model.config import load_config
    from looprl.rollout.records import Rollout
    from looprl.training.trainer import build_trainer
    from looprl.training.settings import TrainSettings
    from looprl.run.plan import learner_bytes, activation_bytes, model_counts
    torch.set_num_threads(2)
    cfg = load_config(model_dir)
    s = TrainSettings(algorithm="grpo", precision="fp32", optimizer="sgd", micro_batch_size=ROWS, minibatches=1, recompute=recompute)
    t = build_trainer(model_dir, s)
    rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with open("/proc/self/status") as f: now = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS"))
    before_peak = rss()
    g = torch.Generator().manual_seed(0)
    r = Rollout(prompt_ids=[torch.randint(0, 200, (PROMPT,), generator=g).tolist() for _ in range(ROWS)],
                response_ids=[torch.randint(0, 200, (RESPONSE,), generator=g).tolist() for _ in range(ROWS)],
                logprobs=[[-5.0] * RESPONSE for _ in range(ROWS)], seeds=list(range(ROWS)), rewards=[0.0, 1.0] * (ROWS // 2), temperature=1.0)
    t.train(r, 2)
    counts = model_counts(cfg)["actor"]
    n = counts["params"]
    lb = learner_bytes(n, "fp32", "sgd")
    planned = lb["gradients"] + lb["optimizer"] + activation_bytes(cfg, ROWS, PROMPT + RESPONSE, "fp32", recompute) + 4 * counts["reused"]
    measured = rss() - max(now, 0)
    return dict(recompute=recompute, params=n, rss_after_build=now, peak_before_step=before_peak, peak_after_step=rss(),
                measured_step_bytes=measured, planned_step_bytes=planned, measured_over_planned=measured / planned,
                plan_activations=activation_bytes(cfg, ROWS, PROMPT + RESPONSE, "fp32", recompute), plan_gradients=lb["gradients"])

if __name__ == "__main__":
    if sys.argv[1] == "--case": print(json.dumps(case(sys.argv[2], sys.argv[3] == "1"))); sys.exit()
    import torch
    from looprl.model.config import tiny_config
    from looprl.model.models import build_model, init_weights
    from looprl.model.hf import save_checkpoint
    from looprl.tasks.data import build_char_tokenizer, TINY_ALPHABET
    from looprl.bench import environment
    d = Path(tempfile.mkdtemp()) / "hmid"
    mid = tiny_config("huginn_raven", n_embd=1024, n_heads=8, head_dim=128, num_key_value_heads=8, intermediate_size=2816,
                      vocab_size=32768, padded_vocab_size=32768, block_size=1024, mean_recurrence=8)
    save_checkpoint(init_weights(build_model(mid), seed=1, perturb_norms=True), d, tokenizer=build_char_tokenizer(TINY_ALPHABET))
    cases = [json.loads(subprocess.run([sys.executable, __file__, "--case", str(d), r], capture_output=True, text=True, check=True).stdout)
             for r in ("0", "1")]
    Path(sys.argv[1]).write_text(json.dumps(dict(command=f"python benchmarks/plan_mid_cpu.py {sys.argv[1]}", environment=environment(),
                                                 rows=ROWS, prompt_tokens=PROMPT, response_tokens=RESPONSE, cases=cases), indent=1))
    for c in cases: print(f"recompute {c['recompute']}: measured {c['measured_step_bytes'] / 2**30:.2f} GiB, planned {c['planned_step_bytes'] / 2**30:.2f} GiB")
