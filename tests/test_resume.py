"""Resume equality in fresh processes, on runs whose state changes at every update: 3 uninterrupted updates vs
--stop-after 2 then --resume, for the four algorithms on Huginn (FP16 and FP32) and GRPO/PPO on Ouro and Nanbeige."""
import json
import pytest
from conftest import run_cli, assert_changing, updates

FAST = ["--max-response-tokens", "6", "--no-eval", "--no-progress"]

def train(model, data, out, *extra, env=None):
    return run_cli("looprl.train", "--model", model, "--data", data, "--output", out, *FAST, *extra, env=env)

def resume(out, *extra, env=None):
    return run_cli("looprl.train", "--output", out, "--resume", "--no-progress", *extra, env=env)

def common(algorithm, precision, optimizer):
    batch = ["--rollout-batch-size", "4"] if algorithm == "grpo" else ["--rollout-batch-size", "8"]
    lr = ["--lr", "1e-4"] if optimizer == "adamw" else ["--lr", "1e-2"]
    return ["--algorithm", algorithm, "--precision", precision, "--optimizer", optimizer, *lr, *batch, "--updates", "3"]

CASES = [("huginn_raven", a, p, "adamw" if (a in ("ppo", "flow-dppo")) == (p == "fp32") else "sgd")
         for a in ("ppo", "grpo", "dppo", "flow-dppo") for p in ("fp16", "fp32")] + \
        [(f, a, "fp32", "adamw" if a == "ppo" else "sgd") for f in ("ouro", "nanbeige") for a in ("grpo", "ppo")]

@pytest.mark.parametrize("family,algorithm,precision,optimizer", CASES)
def test_stop_resume_equals_uninterrupted(shipped, arithmetic, tmp_path, family, algorithm, precision, optimizer):
    m, args = shipped[family], common(algorithm, precision, optimizer)
    a, b = tmp_path / "a", tmp_path / "b"
    r = train(m, arithmetic, a, *args); assert r.returncode == 0, r.stderr
    r = train(m, arithmetic, b, *args, "--stop-after", "2"); assert r.returncode == 0, r.stderr
    assert len(updates(b)) == 2
    r = resume(b); assert r.returncode == 0, r.stderr
    assert_changing(a)
    c = run_cli("looprl.compare", a, b)
    assert c.returncode == 0, c.stdout + c.stderr
    ua = updates(a)
    assert [x["digest"] for x in ua] == [x["digest"] for x in updates(b)]
    if precision == "fp32": assert all(x["parity_max"] <= 3e-6 for x in ua), [x["parity_max"] for x in ua]
    assert all(x["skipped_steps"] == 0 for x in ua)

def test_ray_placement_equals_local(shipped, arithmetic, tmp_path):
    "The same run placed by Ray (two actors, trainer env vars set) and in-process gives identical results, and resumes under Ray."
    m, args = shipped["huginn_raven"], common("ppo", "fp32", "adamw")
    a, b = tmp_path / "local", tmp_path / "ray"
    assert train(m, arithmetic, a, *args).returncode == 0
    r = train(m, arithmetic, b, *args, "--workers", "ray", "--stop-after", "2", "--train-env-vars", '{"LOOPRL_TRAINER_PROBE": "1"}')
    assert r.returncode == 0, r.stderr
    r = resume(b, "--workers", "ray"); assert r.returncode == 0, r.stderr
    assert_changing(a)
    c = run_cli("looprl.compare", a, b); assert c.returncode == 0, c.stdout + c.stderr

def test_disk_transport_equals_memory(shipped, arithmetic, tmp_path):
    "Publications through a directory of safetensors shards (with a manifest) give the same run as in memory."
    m, args = shipped["nanbeige"], common("grpo", "fp32", "adamw")
    a, b = tmp_path / "memory", tmp_path / "disk"
    assert train(m, arithmetic, a, *args).returncode == 0
    r = train(m, arithmetic, b, *args, "--transport", "disk"); assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (b / "publications").iterdir()) == ["v000001", "v000002", "v000003"]
    assert (b / "publications" / "v000001" / "model.safetensors.index.json").exists()
    assert_changing(a)
    c = run_cli("looprl.compare", a, b); assert c.returncode == 0, c.stdout + c.stderr

def test_sparse_checkpoints_resume_equal(shipped, arithmetic, tmp_path):
    "--checkpoint-every: only the last update of each process and every N-th are checkpointed; resuming from them is still exact."
    m, args = shipped["huginn_raven"], common("grpo", "fp32", "adamw")
    a, b = tmp_path / "a", tmp_path / "b"
    assert train(m, arithmetic, a, *args, "--checkpoint-every", "5").returncode == 0
    assert sorted(p.name for p in (a / "checkpoints").glob("update-*")) == ["update-000003"]
    assert train(m, arithmetic, b, *args, "--stop-after", "2", "--checkpoint-every", "5").returncode == 0
    assert sorted(p.name for p in (b / "checkpoints").glob("update-*")) == ["update-000002"]
    r = resume(b); assert r.returncode == 0, r.stderr
    assert_changing(a)
    assert run_cli("looprl.compare", a, b).returncode == 0
    assert json.loads((b / "summary.json").read_text())["start"] == 2

def test_extended_run_equals_longer_run(shipped, arithmetic, tmp_path):
    "A finished 3-update run extended with --resume --updates 5 equals a run started with 5 updates, field for field."
    m, args = shipped["huginn_raven"], common("ppo", "fp32", "adamw")[:-2]
    a, b = tmp_path / "five", tmp_path / "three"
    assert train(m, arithmetic, a, *args, "--updates", "5", "--warmup-steps", "4").returncode == 0
    assert train(m, arithmetic, b, *args, "--updates", "3", "--warmup-steps", "4").returncode == 0
    assert sorted(p.name for p in (b / "policies").glob("update-*")) == ["update-000003"]
    r = resume(b, "--updates", "5"); assert r.returncode == 0, r.stderr
    assert json.loads((b / "run.json").read_text())["contract"]["updates"] == 5
    assert_changing(a)
    c = run_cli("looprl.compare", a, b); assert c.returncode == 0, c.stdout + c.stderr
    assert sorted(p.name for p in (b / "policies").glob("update-*")) == ["update-000003", "update-000005"]

def test_evaluation_does_not_perturb_training(shipped, arithmetic, tmp_path):
    "A run evaluated on held-out questions every update ends in the same training state as one never evaluated."
    from looprl.tasks.data import HELDOUT_DATA
    m, args = shipped["huginn_raven"], common("grpo", "fp32", "adamw")
    a, b = tmp_path / "plain", tmp_path / "evaluated"
    assert train(m, arithmetic, a, *args).returncode == 0
    r = run_cli("looprl.train", "--model", m, "--data", arithmetic, "--output", b, "--max-response-tokens", "6", "--no-progress", *args,
                "--eval-data", HELDOUT_DATA, "--eval-every", "1", "--eval-limit", "24")
    assert r.returncode == 0, r.stderr
    from looprl.core.state import read_metrics
    assert [l["update"] for l in read_metrics(b) if l["kind"] == "heldout"] == [0, 1, 2, 3]
    assert_changing(a)
    c = run_cli("looprl.compare", a, b, "--ignore", "heldout"); assert c.returncode == 0, c.stdout + c.stderr
    c = run_cli("looprl.compare", a, b); assert c.returncode == 1 and "heldout" in c.stdout

def test_resume_keeps_the_default_evaluation(tmp_path):
    "A run on the embedded data evaluates on the embedded held-out split by default; its resume does too, at the same updates."
    from looprl.core.state import read_metrics
    args = ["--algorithm", "ppo", "--updates", "2", "--rollout-batch-size", "8", "--max-response-tokens", "6", "--eval-limit", "16", "--no-progress"]
    a, b = tmp_path / "straight", tmp_path / "stopped"
    assert run_cli("looprl.train", "--output", a, *args).returncode == 0
    r = run_cli("looprl.train", "--output", b, *args, "--stop-after", "1"); assert r.returncode == 0, r.stderr
    r = resume(b); assert r.returncode == 0, r.stderr
    for run in (a, b): assert [l["update"] for l in read_metrics(run) if l["kind"] == "heldout"] == [0, 2]
    c = run_cli("looprl.compare", a, b); assert c.returncode == 0, c.stdout + c.stderr
