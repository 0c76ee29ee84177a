"""Negative tests of resume equality: a resume that skips restoring one piece of state (LOOPRL_SKIP_RESTORE, read in
the gate looprl.core.state.restore) must be reported DIFFERENT by `looprl.compare`, on the field that depends on that piece.
The runs learn (AdamW, a learning-rate warm-up, PPO with a critic) and their reward draws from every global generator,
so every piece of state influences what follows."""
import json, shutil
import pytest
from conftest import run_cli, assert_changing, PLUGINS

REWARD = f"{PLUGINS / 'rng_reward.py'}:noisy_math_reward"

def args(precision):
    return ["--algorithm", "ppo", "--precision", precision, "--optimizer", "adamw", "--lr", "1e-4", "--warmup-steps", "4",
            "--rollout-batch-size", "8", "--updates", "3", "--max-response-tokens", "6", "--reward", REWARD, "--no-eval", "--no-progress"]

@pytest.fixture(scope="module")
def runs(shipped, arithmetic, tmp_path_factory):
    "Per precision: an uninterrupted 3-update run and a run stopped after 2 (copied before each resume)."
    root, out = tmp_path_factory.mktemp("sabotage"), {}
    for p in ("fp32", "fp16"):
        a, b = root / f"{p}-straight", root / f"{p}-stopped"
        for d, extra in ((a, []), (b, ["--stop-after", "2"])):
            r = run_cli("looprl.train", "--model", shipped["huginn_raven"], "--data", arithmetic, "--output", d, *args(p), *extra)
            assert r.returncode == 0, r.stderr
        assert_changing(a)
        out[p] = (a, b)
    return out

def resumed(runs, tmp_path, precision, skip):
    a, b = runs[precision]
    c = tmp_path / "resumed"; shutil.copytree(b, c)
    r = run_cli("looprl.train", "--output", c, "--resume", "--no-progress", env={"LOOPRL_SKIP_RESTORE": skip} if skip else None)
    assert r.returncode == 0, r.stderr
    rep = run_cli("looprl.compare", a, c, "--json")
    return rep.returncode, {f["field"]: f for f in json.loads(rep.stdout)["fields"]}

@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_complete_restore_is_equal(runs, tmp_path, precision):
    code, fields = resumed(runs, tmp_path, precision, None)
    assert code == 0, {k: v for k, v in fields.items() if v["status"] not in ("equal", "n/a")}

# what was not restored → the field compare must report different (and the run it is seen on)
TABLE = [("actor", "fp32", "actor"), ("critic", "fp32", "critic"), ("master", "fp16", "master"), ("optimizer", "fp32", "optimizer"),
         ("scheduler", "fp32", "scheduler"), ("scaler", "fp32", "loss_scaler"), ("rng.python", "fp32", "rng.python"),
         ("rng.numpy", "fp32", "rng.numpy"), ("rng.torch_cpu", "fp32", "rng.torch_cpu"), ("sampler", "fp32", "seeds"),
         ("cursor", "fp32", "loop"), ("version", "fp32", "policy_versions")]

@pytest.mark.parametrize("part,precision,field", TABLE, ids=[t[0] for t in TABLE])
def test_skipped_restore_is_reported_on_its_field(runs, tmp_path, part, precision, field):
    code, fields = resumed(runs, tmp_path, precision, part)
    assert code == 1
    assert fields[field]["status"] == "different", (part, fields[field])
    print(part, "→", sorted(k for k, v in fields.items() if v["status"] == "different"))

def test_cuda_generators_are_restorable_state():
    "On a GPU host the CUDA generators are captured and restored like the others (the GPU resume runs cover them)."
    from looprl.core.state import RESTORABLE, capture_rng
    assert "rng.torch_cuda" in RESTORABLE and "torch_cuda" in capture_rng()
