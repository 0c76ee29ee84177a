"""Ouro's adaptive exit (looprl.rollout.exits): engine vs replay parity with tokens exiting at several depths, full depth equal
to a run stored before adaptive exit existed, resume equality of GRPO and PPO runs that exit early in either mode, the
FSDP2 trainer's replay of the depths, and the paths that run every loop refusing it; with twins."""
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

def fixture_differences(run, tolerance: float = 1e-5) -> list:
    """Where `run`'s first two updates differ from the stored run: tokens and depths anywhere; the first update's
    digest, log-probs and replayed log-probs bit for bit (the engine's FP64-accumulated forwards of the initial
    weights); later updates' log-probs within `tolerance`. The weights after an FP32 training step round differently
    on different CPUs (AVX2 and AVX-512 kernels sum in other orders: grad norms differ in the 7th digit), so later
    digests are not compared; a changed default path moves tokens, depths or log-probs far more than that."""
    fx, out = json.loads(FIXTURE.read_text()), []
    close = lambda a, b: len(a) == len(b) and all(abs(x - y) <= tolerance for x, y in zip(a, b))
    for u, f in zip(updates(run), fx["updates"]):
        first = u["update"] == 0
        if first and u["digest"] != f["digest"]: out.append((u["update"], "digest"))
        for i, (c, g) in enumerate(zip(completions(run, u["update"]), f["completions"])):
            if c["tokens"] != g["tokens"]: out.append((u["update"], i, "tokens"))
            for k in ("logprobs", "replay_logprobs"):
                if (c[k] != g[k]) if first else not close(c[k], g[k]): out.append((u["update"], i, k))
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

def exits(algorithm, q, mode, *extra):
    "A run's arguments, and the exit rule its contract must record."
    return ["--algorithm", algorithm, "--exit-threshold", str(q), "--exit-mode", mode, *extra], (q, mode)

NOISY = ["--reward", REWARD]          # where every exact reward of the first updates would be equal
RUNS = {"grpo-threshold": exits("grpo", 0.8, "threshold"),          # each algorithm in each exit mode
        "grpo-sample": exits("grpo", 0.9, "sample", *NOISY),
        "ppo-threshold": exits("ppo", 0.8, "threshold", "--rollout-batch-size", "8", *NOISY),
        "ppo-sample": exits("ppo", 0.9, "sample", "--rollout-batch-size", "8", *NOISY)}

@pytest.fixture(scope="module")
def runs(shipped, arithmetic, tmp_path_factory):
    "Every run of RUNS: 2 updates straight, and 1 then (in the tests) --resume."
    root, out = tmp_path_factory.mktemp("exits"), {}
    for name, (extra, _) in RUNS.items():
        a, b = root / f"{name}-a", root / f"{name}-b"
        r = train(shipped, arithmetic, a, *extra, "--updates", "2"); assert r.returncode == 0, r.stderr
        r = train(shipped, arithmetic, b, *extra, "--updates", "2", "--stop-after", "1")
        assert r.returncode == 0, r.stderr
        out[name] = (a, b)
    return out

def train_here(shipped, data, out, *extra):
    "A run in this process (no interpreter start-up): its summary, or the RunFailed it raised."
    from looprl.train import parser, options_from_args
    from looprl.run.loop import run
    argv = ["--model", str(shipped["ouro"]), "--data", str(data), "--output", str(out), *BASE, *extra]
    return run(options_from_args(parser().parse_args(argv)), progress=False)

def test_full_depth_equals_the_stored_run(shipped, arithmetic, runs, tmp_path):
    """q = 1 (the default): every token, depth, log-prob and replayed log-prob as before adaptive exit existed (the first
    update's and its digest bit for bit, the second's log-probs within FP32 training's rounding across CPUs)."""
    train_here(shipped, arithmetic, tmp_path / "full", "--algorithm", "grpo", "--updates", "2")
    ups = updates(tmp_path / "full")
    assert len(ups) == 2 and fixture_differences(tmp_path / "full") == []
    assert ups[1]["digest"] != ups[0]["digest"]                                 # the first update moved the weights
    assert "exit_threshold" not in json.loads((tmp_path / "full" / "run.json").read_text())["contract"]["rollout"]
    # twin: the same command with --exit-threshold 0.8 is seen to differ
    assert any(d[-1] in ("tokens", "depths") for d in fixture_differences(runs["grpo-threshold"][0]))

def resumed(runs, tmp_path, name, env=ONE):
    "A copy of `name`'s stopped run, resumed to its 2 updates."
    b = tmp_path / "b"; shutil.copytree(runs[name][1], b)
    r = run_cli("looprl.train", "--output", b, "--resume", "--no-progress", env=env); assert r.returncode == 0, r.stderr
    return b

@pytest.mark.parametrize("name", list(RUNS))
def test_resume_with_exits_equals_uninterrupted(runs, tmp_path, name):
    a, b = runs[name][0], resumed(runs, tmp_path, name)
    assert_changing(a)
    ua = updates(a)
    depths = [d for u in range(2) for c in completions(a, u) for d in c["trace"]["depths"]]
    assert len(set(depths)) > 1 and min(depths) < 4, sorted(set(depths))              # tokens do exit early, at several depths
    assert all(x["exit_depth_mean"] < 4 and x["parity_max"] <= 3e-6 for x in ua), ua
    c = run_cli("looprl.compare", a, b); assert c.returncode == 0, c.stdout + c.stderr
    assert [x["digest"] for x in ua] == [x["digest"] for x in updates(b)]
    contract = json.loads((a / "run.json").read_text())["contract"]["rollout"]
    assert (contract["exit_threshold"], contract["exit_mode"]) == RUNS[name][1]

def test_resume_with_another_exit_rule_is_refused(runs, tmp_path):
    b = tmp_path / "b"; shutil.copytree(runs["grpo-threshold"][1], b)
    r = run_cli("looprl.train", "--output", b, "--resume", "--exit-threshold", "0.7", "--no-progress", env=ONE)
    assert r.returncode == 2 and "exit_threshold" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr

@pytest.mark.parametrize("name", ["grpo-sample", "ppo-threshold"])
def test_resume_with_the_seeds_left_fresh_is_different(runs, tmp_path, name):
    """Twin of resume equality: a resume that leaves the sampler fresh (LOOPRL_SKIP_RESTORE=sampler) draws the second
    update from other seeds, so other tokens and other exit depths (in sample mode the exits are drawn from the seeds
    too); compare reports the seeds, and the traces that hold the depths, different."""
    a, b = runs[name][0], resumed(runs, tmp_path, name, env={**ONE, "LOOPRL_SKIP_RESTORE": "sampler"})
    rep = run_cli("looprl.compare", a, b, "--json")
    fields = {f["field"]: f["status"] for f in json.loads(rep.stdout)["fields"]}
    assert rep.returncode == 1 and fields["seeds"] == fields["latent_traces"] == "different", fields
    assert [c["trace"]["depths"] for c in completions(a, 1)] != [c["trace"]["depths"] for c in completions(b, 1)]

TWO = ["--trainer-processes", "2", "--micro-batch-size", "4"]         # FSDP2: two gloo processes on the CPU

def test_two_trainer_processes_replay_the_depths(shipped, arithmetic, runs, tmp_path):
    """The FSDP2 trainer replays the recorded depths: parity ≤ 3e-6 with tokens exiting at several depths, and the
    one-process run's gradient norms (within FP32 rounding), exit depths, and second-update tokens and depths (drawn
    from the weights the two processes trained)."""
    one, two = runs["grpo-threshold"][0], tmp_path / "two"
    r = train(shipped, arithmetic, two, *RUNS["grpo-threshold"][0], "--updates", "2", *TWO)
    assert r.returncode == 0, r.stderr
    assert json.loads((two / "run.json").read_text())["contract"]["trainer_processes"] == 2
    depths = [d for u in range(2) for c in completions(two, u) for d in c["trace"]["depths"]]
    assert len(set(depths)) > 1 and min(depths) < 4, sorted(set(depths))
    u1, u2 = updates(one), updates(two)
    assert len(u2) == 2 and all(x["parity_max"] <= 3e-6 for x in u2), u2
    assert all(abs(x["grad_norm"] - y["grad_norm"]) <= 1e-5 * x["grad_norm"] for x, y in zip(u1, u2)), (u1, u2)
    assert [x["exit_depth_mean"] for x in u1] == [x["exit_depth_mean"] for x in u2]
    trace = lambda run: [(c["tokens"], c["trace"]["depths"]) for c in completions(run, 1)]
    assert trace(one) == trace(two)

@pytest.mark.parametrize("processes", [1, 2])
def test_depths_recorded_wrong_are_refused(shipped, arithmetic, tmp_path, monkeypatch, processes):
    """Twin of the replay: an engine that records one token's depth one loop off is refused by the trainer, naming that
    token, whether one process trains or two (FSDP2: the ranks refuse it and the run says so in the same line)."""
    import looprl.rollout.exits as X
    from looprl.run.loop import RunFailed
    took = X.ExitRun.took
    def off_by_one(self, lp, rows, cols):
        out = took(self, lp, rows, cols)
        if len(self.depths) == 3: self.depths[-1][1] = self.depths[-1][1] % 4 + 1     # completion 1, token 2
        return out
    monkeypatch.setattr(X.ExitRun, "took", off_by_one)        # the engine runs in this process; the trainer ranks do not
    refused = "update 0: the trainer refused the rollout: completion 1: token 2: recorded exit depth"
    with pytest.raises(RunFailed, match=refused):
        train_here(shipped, arithmetic, tmp_path / "bad", "--algorithm", "grpo", "--updates", "1", "--exit-threshold", "0.8",
                   *(TWO if processes == 2 else []))

@pytest.mark.parametrize("command,extra,message", [
    ("train", ["--engine", "vllm"], "the vllm engine runs every loop; use --engine native"),
    ("train", ["--backend", "megatron"], "the megatron backend replays full depth only; use --backend torch"),
    ("verify", ["--engine", "vllm"], "the vllm engine runs every loop; use --engine native")],
    ids=["train-vllm", "train-megatron", "verify-vllm"])
def test_paths_without_adaptive_exit_refuse_it(shipped, arithmetic, tmp_path, capsys, command, extra, message):
    "The vLLM engine and the Megatron backend run every loop: --exit-threshold < 1 is refused in one line, exit 2."
    import importlib
    main = importlib.import_module(f"looprl.{command}").main
    where = ([shipped["ouro"]] if command == "verify"
             else ["--model", shipped["ouro"], "--data", arithmetic, "--output", tmp_path / "x"])
    with pytest.raises(SystemExit) as e: main([*map(str, where), *extra, "--exit-threshold", "0.7"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.strip() == f"looprl.{command}: --exit-threshold/--exit-mode: {message}", err
    assert not (tmp_path / "x").exists()
