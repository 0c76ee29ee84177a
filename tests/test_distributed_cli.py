"""`python -m looprl.train --trainer-processes 2`: two trainer processes (one gloo group) behind the loop's trainer
handle. Resume with the same count is exact (compare EQUAL), a rank whose shard is not restored is seen (DIFFERENT),
and another count is refused. (Two processes train as one does within FP32 rounding: tests/test_distributed.py.)"""
import json, shutil
import pytest, torch
from conftest import run_cli, assert_changing, updates

ARGS = ["--algorithm", "ppo", "--optimizer", "adamw", "--lr", "1e-4", "--rollout-batch-size", "8", "--minibatches", "1",
        "--micro-batch-size", "4", "--updates", "3", "--max-response-tokens", "6", "--no-eval", "--no-progress"]

@pytest.fixture(scope="module")
def runs(shipped, arithmetic, tmp_path_factory):
    "A 3-update run with two trainer processes, and the same stopped after 2 (copied before each resume)."
    root, out = tmp_path_factory.mktemp("dist-cli"), {}
    for name, extra in (("straight", ["--trainer-processes", "2"]), ("stopped", ["--trainer-processes", "2", "--stop-after", "2"])):
        r = run_cli("looprl.train", "--model", shipped["huginn_raven"], "--data", arithmetic, "--output", root / name, *ARGS, *extra)
        assert r.returncode == 0, r.stderr
        out[name] = root / name
    assert_changing(out["straight"])
    return out

def resumed(runs, tmp_path, *extra, env=None):
    c = tmp_path / "resumed"; shutil.copytree(runs["stopped"], c)
    return c, run_cli("looprl.train", "--output", c, "--resume", "--no-progress", *extra, env=env)

def test_two_process_resume_is_equal(runs, tmp_path):
    ck = runs["stopped"] / "checkpoints" / "update-000002"
    assert sorted(p.name for p in ck.glob("trainer*.pt")) == ["trainer-rank0.pt", "trainer-rank1.pt", "trainer.pt"]
    assert json.loads((runs["straight"] / "run.json").read_text())["contract"]["trainer_processes"] == 2
    c, r = resumed(runs, tmp_path)
    assert r.returncode == 0, r.stderr
    rep = run_cli("looprl.compare", runs["straight"], c)
    assert rep.returncode == 0 and "EQUAL" in rep.stdout, rep.stdout

def test_a_shard_not_restored_is_different(runs, tmp_path):
    c, r = resumed(runs, tmp_path, env={"LOOPRL_SKIP_RESTORE": "shard.1"})        # rank 1 keeps its fresh shards
    assert r.returncode == 0, r.stderr
    rep = run_cli("looprl.compare", runs["straight"], c, "--json")
    fields = {f["field"]: f["status"] for f in json.loads(rep.stdout)["fields"]}
    assert rep.returncode == 1 and fields["actor"] == "different", fields

def test_another_process_count_is_refused(runs, tmp_path):
    c, r = resumed(runs, tmp_path, "--trainer-processes", "1")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == ("looprl.train: --trainer-processes: the run was trained with 2 and "
        "cannot resume with 1 (each trainer process's shards resume exactly only on as many processes)"), r.stderr
    assert not (c / "summary.json").exists() or json.loads((c / "summary.json").read_text())["stopped_after"] == 2

@pytest.mark.parametrize("extra,message", [
    (["--trainer-processes", "0"], "--trainer-processes: must be an int ≥ 1, got 0"),
    (["--trainer-processes", "2", "--tensor-parallel", "3"], "--tensor-parallel: must be 1 or --trainer-processes (2)"),
    (["--trainer-processes", "2", "--micro-batch-size", "3"], "--trainer-processes: one optimizer step of 8 completions makes 3 micro-batches"),
    (["--trainer-processes", "3", "--tensor-parallel", "3"], "--tensor-parallel: the model's 4 attention heads do not split over 3 processes"),
])
def test_bad_process_counts(shipped, arithmetic, tmp_path, extra, message):
    r = run_cli("looprl.train", "--model", shipped["huginn_raven"], "--data", arithmetic, "--output", tmp_path / "x", *ARGS, *extra)
    assert r.returncode == 2 and message in r.stderr and r.stderr.startswith("looprl.train: "), r.stderr
    assert not (tmp_path / "x").exists()
