"""Resume equality in fresh processes: 3 uninterrupted updates vs --stop-after 2 then --resume."""
import json
import pytest
from conftest import run_cli

FAST = ["--max-response-tokens", "12", "--no-progress"]

def train(model, data, out, *extra, ray="local", env=None):
    r = run_cli("looprl.train", "--model", model, "--data", data, "--output", out, "--ray-address", ray, *FAST, *extra, env=env)
    return r

def metrics(run):
    return [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]

CASES = [("huginn_raven", a, p) for a in ("ppo", "grpo", "dppo", "flow-dppo") for p in ("fp16", "fp32")] + \
        [(f, a, "fp32") for f in ("ouro", "nanbeige") for a in ("grpo", "ppo")]

@pytest.mark.parametrize("family,algorithm,precision", CASES)
def test_stop_resume_equals_uninterrupted(tiny_models, arithmetic, tmp_path, family, algorithm, precision):
    m, common = tiny_models[family], ["--algorithm", algorithm, "--precision", precision, "--updates", "3"]
    a, b = tmp_path / "a", tmp_path / "b"
    r = train(m, arithmetic, a, *common); assert r.returncode == 0, r.stderr
    r = train(m, arithmetic, b, *common, "--stop-after", "2"); assert r.returncode == 0, r.stderr
    assert len(metrics(b)) == 2
    r = run_cli("looprl.train", "--output", b, "--resume", "--ray-address", "local", "--no-progress"); assert r.returncode == 0, r.stderr
    c = run_cli("looprl.compare", a, b)
    assert c.returncode == 0, c.stdout + c.stderr
    assert "DIFFERENT" not in c.stdout
    ma = metrics(a)
    assert [x["digest"] for x in ma] == [x["digest"] for x in metrics(b)]
    if precision == "fp32":
        assert all(x["parity_max"] <= 3e-6 for x in ma), [x["parity_max"] for x in ma]
    assert all(x["skipped_steps"] == 0 for x in ma) or precision == "fp16"

def test_compare_detects_a_difference(tiny_models, arithmetic, tmp_path):
    m = tiny_models["ouro"]
    a, b = tmp_path / "a", tmp_path / "b"
    assert train(m, arithmetic, a, "--algorithm", "grpo", "--updates", "1").returncode == 0
    assert train(m, arithmetic, b, "--algorithm", "grpo", "--updates", "1", "--seed", "43").returncode == 0
    c = run_cli("looprl.compare", a, b, "--json")
    assert c.returncode == 1
    rows = {r["field"]: r for r in json.loads(c.stdout)["fields"]}
    assert not rows["tokens"]["equal"] and not rows["latent_traces"]["equal"]

def test_ray_placement_equals_local(tiny_models, arithmetic, tmp_path):
    "The same run placed by Ray (two actors, trainer env vars set) and in-process gives identical results, and resumes under Ray."
    m, common = tiny_models["huginn_raven"], ["--algorithm", "ppo", "--precision", "fp32", "--updates", "3"]
    a, b = tmp_path / "local", tmp_path / "ray"
    assert train(m, arithmetic, a, *common).returncode == 0
    r = run_cli("looprl.train", "--model", m, "--data", arithmetic, "--output", b, *FAST, *common, "--stop-after", "2",
                "--train-env-vars", '{"LOOPRL_TRAINER_PROBE": "1"}')
    assert r.returncode == 0, r.stderr
    r = run_cli("looprl.train", "--output", b, "--resume", "--no-progress"); assert r.returncode == 0, r.stderr
    c = run_cli("looprl.compare", a, b); assert c.returncode == 0, c.stdout + c.stderr

def test_disk_transport_equals_memory(tiny_models, arithmetic, tmp_path):
    "Publications through a directory of safetensors shards (with a manifest) give the same run as in memory."
    m, common = tiny_models["nanbeige"], ["--algorithm", "grpo", "--updates", "2"]
    a, b = tmp_path / "memory", tmp_path / "disk"
    assert train(m, arithmetic, a, *common).returncode == 0
    r = train(m, arithmetic, b, *common, "--transport", "disk"); assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (b / "publications").iterdir()) == ["v000001", "v000002"]
    assert (b / "publications" / "v000001" / "model.safetensors.index.json").exists()
    c = run_cli("looprl.compare", a, b); assert c.returncode == 0, c.stdout + c.stderr

def test_sparse_checkpoints_resume_equal(tiny_models, arithmetic, tmp_path):
    "--checkpoint-every: only the last update of each process and every N-th are checkpointed; resuming from them is still exact."
    m, common = tiny_models["huginn_raven"], ["--algorithm", "grpo", "--precision", "fp32", "--updates", "3"]
    a, b = tmp_path / "a", tmp_path / "b"
    assert train(m, arithmetic, a, *common, "--checkpoint-every", "5").returncode == 0
    assert sorted(p.name for p in (a / "checkpoints").glob("update-*")) == ["update-000003"]
    assert train(m, arithmetic, b, *common, "--stop-after", "2", "--checkpoint-every", "5").returncode == 0
    assert sorted(p.name for p in (b / "checkpoints").glob("update-*")) == ["update-000002"]
    r = run_cli("looprl.train", "--output", b, "--resume", "--ray-address", "local", "--no-progress"); assert r.returncode == 0, r.stderr
    assert run_cli("looprl.compare", a, b).returncode == 0
    assert json.loads((b / "summary.json").read_text())["start"] == 2
