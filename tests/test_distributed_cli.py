"""`python -m looprl.train --trainer-processes 2`: two trainer processes (one gloo group) behind the loop's trainer
handle, spawned on this host (`--workers local`) or as Ray actors (`--workers ray`). Resume with the same count is
exact (compare EQUAL), a rank whose shard is not restored or whose file was changed is seen (DIFFERENT), Ray ranks
give the local ranks' results, and another count is refused. (Two processes train as one does within FP32 rounding:
tests/test_distributed.py.)"""
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

def resumed(runs, tmp_path, *extra, env=None, stopped="stopped", change=None):
    "Resume a copy of `runs[stopped]`, after `change(checkpoint directory)` if given."
    c = tmp_path / "resumed"; shutil.copytree(runs[stopped], c)
    if change: change(c / "checkpoints" / "update-000002")
    return c, run_cli("looprl.train", "--output", c, "--resume", "--no-progress", *extra, env=env)

def flip_rank_file(rank: int, *keys):
    "A change to one trainer rank's own file: one bit of the first element of the tensor at `keys`."
    def change(ck):
        f = ck / f"trainer-rank{rank}.pt"
        st = torch.load(f, weights_only=True)
        t = st
        for k in keys: t = t[k]
        t.view(-1).view(torch.int32)[0] ^= 1
        torch.save(st, f)
    return change

def compare(a, b):
    rep = run_cli("looprl.compare", a, b, "--json")
    return rep.returncode, {f["field"]: f for f in json.loads(rep.stdout)["fields"]}

def test_two_process_resume_is_equal(runs, tmp_path):
    ck = runs["stopped"] / "checkpoints" / "update-000002"
    assert sorted(p.name for p in ck.glob("trainer*.pt")) == ["trainer-rank0.pt", "trainer-rank1.pt", "trainer.pt"]
    assert json.loads((runs["straight"] / "run.json").read_text())["contract"]["trainer_processes"] == 2
    c, r = resumed(runs, tmp_path)
    assert r.returncode == 0, r.stderr
    rep = run_cli("looprl.compare", runs["straight"], c)
    assert rep.returncode == 0 and "EQUAL" in rep.stdout, rep.stdout

def test_the_optimizer_state_is_written_once(runs):
    "The rank files hold the AdamW moments; the gathered trainer.pt beside them holds weights and masters, not the moments."
    ck = runs["straight"] / "checkpoints" / "update-000003"
    gathered = torch.load(ck / "trainer.pt", weights_only=True)
    ranks = [torch.load(ck / f"trainer-rank{r}.pt", weights_only=True) for r in (0, 1)]
    for role in ("actor", "critic"):
        assert "optimizer" not in gathered[role] and gathered[role]["model"], sorted(gathered[role])
        assert all(st[role]["optimizer"]["state"] for st in ranks)          # each rank's moments of its shard

def test_a_shard_not_restored_is_different(runs, tmp_path):
    c, r = resumed(runs, tmp_path, env={"LOOPRL_SKIP_RESTORE": "shard.1"})        # rank 1 keeps its fresh shards
    assert r.returncode == 0, r.stderr
    rep = run_cli("looprl.compare", runs["straight"], c, "--json")
    fields = {f["field"]: f["status"] for f in json.loads(rep.stdout)["fields"]}
    assert rep.returncode == 1 and fields["actor"] == "different", fields

def test_every_rank_file_is_compared(runs, tmp_path):
    "compare reads every rank's file: a bit of rank 1's AdamW moment changed (and nothing else) is reported, naming the file."
    c = tmp_path / "changed"; shutil.copytree(runs["straight"], c)
    code, fields = compare(runs["straight"], c)
    assert code == 0, fields
    flip_rank_file(1, "actor", "optimizer", "state", 0, "exp_avg")(c / "checkpoints" / "update-000003")
    code, fields = compare(runs["straight"], c)
    bad = {k: f for k, f in fields.items() if f["status"] not in ("equal", "n/a")}
    assert code == 1 and list(bad) == ["optimizer"] and bad["optimizer"]["status"] == "different", bad
    assert bad["optimizer"]["first_difference"].startswith("trainer-rank1.pt actor optimizer['state'][0]['exp_avg'] at index"), bad

@pytest.fixture(scope="module")
def ray_stopped(shipped, arithmetic, runs, tmp_path_factory):
    "The two-process run stopped after 2 updates, its ranks Ray actors."
    out = tmp_path_factory.mktemp("dist-ray") / "stopped"
    r = run_cli("looprl.train", "--model", shipped["huginn_raven"], "--data", arithmetic, "--output", out, *ARGS,
                "--trainer-processes", "2", "--stop-after", "2", "--workers", "ray")
    assert r.returncode == 0, r.stderr
    return {**runs, "ray_stopped": out}

def test_ray_ranks_resume_equal_to_local_ranks(ray_stopped, tmp_path):
    """Ray-actor ranks stopped after 2 updates and resumed as Ray actors equal the uninterrupted run of spawned ranks,
    every field (the same publication digests); its twin, a resume from a changed rank-1 file, is different."""
    assert [u["digest"] for u in updates(ray_stopped["ray_stopped"])] == [u["digest"] for u in updates(ray_stopped["straight"])][:2]
    c, r = resumed(ray_stopped, tmp_path, "--workers", "ray", stopped="ray_stopped")
    assert r.returncode == 0, r.stderr
    code, fields = compare(ray_stopped["straight"], c)
    assert code == 0 and all(f["status"] in ("equal", "n/a") for f in fields.values()), fields
    shutil.rmtree(c)
    c, r = resumed(ray_stopped, tmp_path, "--workers", "ray", stopped="ray_stopped",
                   change=flip_rank_file(1, "actor", "model", "transformer.core_block.0.attn.proj.weight"))
    assert r.returncode == 0, r.stderr
    code, fields = compare(ray_stopped["straight"], c)
    assert code == 1 and fields["actor"]["status"] == "different" and fields["publication_digests"]["status"] == "different", fields

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
    (["--trainer-processes", "2", "--device", "cuda", "--workers", "local"], "--trainer-processes: several trainer processes run as spawned "
     "CPU processes (--device cpu --workers local) or as Ray actors (--workers ray; one GPU each with --device cuda), and publish through "
     "--transport memory or disk; got --device cuda --workers local --transport memory"),
    (["--trainer-processes", "2", "--device", "cuda", "--workers", "ray", "--transport", "nccl"], "--transport nccl"),
])
def test_bad_process_counts(shipped, arithmetic, tmp_path, extra, message):
    r = run_cli("looprl.train", "--model", shipped["huginn_raven"], "--data", arithmetic, "--output", tmp_path / "x", *ARGS, *extra)
    assert r.returncode == 2 and message in r.stderr and r.stderr.startswith("looprl.train: "), r.stderr
    assert not (tmp_path / "x").exists()
