"""Ouro's adaptive exit (looprl.rollout.exits): engine vs replay parity with tokens exiting at several depths, full depth equal
to a run stored before adaptive exit existed, and resume equality of GRPO and PPO runs that exit early, with twins."""
import json, shutil
from pathlib import Path
import pytest
from conftest import run_cli, assert_changing, updates

FIXTURE = Path(__file__).parent / "fixtures" / "ouro-grpo-q1.json"
BASE = ["--max-response-tokens", "6", "--no-eval", "--no-progress", "--precision", "fp32", "--optimizer", "sgd", "--lr", "1e-2",
        "--rollout-batch-size", "4"]
ONE = {"OMP_NUM_THREADS": "1"}

def train(shipped, data, out, *extra, env=ONE):
    return run_cli("looprl.train", "--model", shipped["ouro"], "--data", data, "--output", out, *BASE, *extra, env=env)

def completions(run, update):
    return json.loads((Path(run) / "rollouts" / f"update-{update:06d}.json").read_text())["completions"]

def fixture_differences(run) -> list:
    "Where `run`'s first two updates differ from the stored run: digests, tokens, log-probs, replayed log-probs, depths."
    fx, out = json.loads(FIXTURE.read_text()), []
    for u, f in zip(updates(run), fx["updates"]):
        if u["digest"] != f["digest"]: out.append((u["update"], "digest"))
        for i, (c, g) in enumerate(zip(completions(run, u["update"]), f["completions"])):
            for k in ("tokens", "logprobs", "replay_logprobs"):
                if c[k] != g[k]: out.append((u["update"], i, k))
            if c["trace"]["depths"] != g["depths"] or c["trace"]["prefill_depth"] != g["prefill_depth"]: out.append((u["update"], i, "depths"))
    return out

def test_verify_cli_exits_at_several_depths():
    r = run_cli("looprl.verify", "looprl/assets/tiny-ouro", "--exit-threshold", "0.7", "--samples", "64", "--temperature", "0.8", env=ONE)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["max_abs_logprob_diff"] <= 3e-6 and rep["distinct_exit_depths"] > 1 and rep["mean_exit_depth"] < rep["depth"], rep
    assert (rep["exit_threshold"], rep["exit_mode"]) == (0.7, "threshold")

def test_verify_sample_mode_exits_at_several_depths():
    import torch
    from looprl.verify import verify_checkpoint
    n = torch.get_num_threads(); torch.set_num_threads(1)          # as the CLI runs under OMP_NUM_THREADS=1 (a loaded machine)
    try: rep = verify_checkpoint("looprl/assets/tiny-ouro", samples=64, temperature=0.8, exit_threshold=0.7, exit_mode="sample")
    finally: torch.set_num_threads(n)
    assert rep["ok"] and rep["max_abs_logprob_diff"] <= 3e-6 and rep["distinct_exit_depths"] > 1, rep

REWARD = f"{Path(__file__).parent / 'plugins' / 'rng_reward.py'}:noisy_math_reward"   # rewards that differ within a batch

@pytest.fixture(scope="module")
def runs(shipped, arithmetic, tmp_path_factory):
    "GRPO with threshold exits and PPO with sampled exits: 2 updates straight, and 1 then (in the test) --resume."
    root, out = tmp_path_factory.mktemp("exits"), {}
    for name, extra in (("grpo-threshold", ["--algorithm", "grpo", "--exit-threshold", "0.8"]),
                        ("ppo-sample", ["--algorithm", "ppo", "--rollout-batch-size", "8", "--exit-threshold", "0.9", "--exit-mode", "sample",
                                        "--reward", REWARD])):
        a, b = root / f"{name}-a", root / f"{name}-b"
        r = train(shipped, arithmetic, a, *extra, "--updates", "2"); assert r.returncode == 0, r.stderr
        r = train(shipped, arithmetic, b, *extra, "--updates", "2", "--stop-after", "1"); assert r.returncode == 0, r.stderr
        out[name] = (a, b)
    return out

def train_here(shipped, data, out, *extra):
    "A run in this process (no interpreter start-up): its summary, or the RunFailed it raised."
    from looprl.train import parser, options_from_args
    from looprl.run.loop import run
    argv = ["--model", str(shipped["ouro"]), "--data", str(data), "--output", str(out), *BASE, *extra]
    return run(options_from_args(parser().parse_args(argv)), progress=False)

def test_full_depth_equals_the_stored_run(shipped, arithmetic, runs, tmp_path):
    "q = 1 (the default): every digest, token, log-prob, replayed log-prob and depth as before adaptive exit existed."
    train_here(shipped, arithmetic, tmp_path / "full", "--algorithm", "grpo", "--updates", "2")
    assert len(updates(tmp_path / "full")) == 2 and fixture_differences(tmp_path / "full") == []
    assert "exit_threshold" not in json.loads((tmp_path / "full" / "run.json").read_text())["contract"]["rollout"]
    from looprl.model.hf import read_tensors, state_digest
    from looprl.core.state import latest_policy
    assert state_digest(read_tensors(latest_policy(tmp_path / "full"))) == json.loads(FIXTURE.read_text())["final_policy_digest"]
    # twin: the same command with --exit-threshold 0.8 is seen to differ
    assert any(d[-1] in ("tokens", "depths") for d in fixture_differences(runs["grpo-threshold"][0]))

@pytest.mark.parametrize("name", ["grpo-threshold", "ppo-sample"])
def test_resume_with_exits_equals_uninterrupted(runs, tmp_path, name):
    a, stopped = runs[name]
    b = tmp_path / "b"; shutil.copytree(stopped, b)
    r = run_cli("looprl.train", "--output", b, "--resume", "--no-progress", env=ONE); assert r.returncode == 0, r.stderr
    assert_changing(a)
    ua = updates(a)
    depths = [d for u in range(2) for c in completions(a, u) for d in c["trace"]["depths"]]
    assert len(set(depths)) > 1 and min(depths) < 4, sorted(set(depths))              # tokens do exit early, at several depths
    assert all(x["exit_depth_mean"] < 4 and x["parity_max"] <= 3e-6 for x in ua), ua
    c = run_cli("looprl.compare", a, b); assert c.returncode == 0, c.stdout + c.stderr
    assert [x["digest"] for x in ua] == [x["digest"] for x in updates(b)]
    contract = json.loads((a / "run.json").read_text())["contract"]["rollout"]
    assert (contract["exit_threshold"], contract["exit_mode"]) == ((0.8, "threshold") if name == "grpo-threshold" else (0.9, "sample"))

def test_resume_with_another_exit_rule_is_refused(runs, tmp_path):
    b = tmp_path / "b"; shutil.copytree(runs["grpo-threshold"][1], b)
    r = run_cli("looprl.train", "--output", b, "--resume", "--exit-threshold", "0.7", "--no-progress", env=ONE)
    assert r.returncode == 2 and "exit_threshold" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr

def test_depths_recorded_wrong_are_refused(shipped, arithmetic, tmp_path, monkeypatch):
    "Twin of the replay: an engine that records one token's depth one loop off is refused by the trainer, naming that token."
    import looprl.rollout.exits as X
    from looprl.run.loop import RunFailed
    took = X.ExitRun.took
    def off_by_one(self, lp, rows, cols):
        out = took(self, lp, rows, cols)
        if len(self.depths) == 3: self.depths[-1][1] = self.depths[-1][1] % 4 + 1     # completion 1, token 2
        return out
    monkeypatch.setattr(X.ExitRun, "took", off_by_one)
    with pytest.raises(RunFailed, match="update 0: the trainer refused the rollout: completion 1: token 2: recorded exit depth"):
        train_here(shipped, arithmetic, tmp_path / "bad", "--algorithm", "grpo", "--updates", "1", "--exit-threshold", "0.8")
