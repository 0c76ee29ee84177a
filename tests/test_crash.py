"""A process killed with SIGKILL during a checkpoint save, or during a publication, then resumed,
ends equal to the uninterrupted run."""
import pytest
from conftest import run_cli

ARGS = ["--algorithm", "ppo", "--precision", "fp32", "--updates", "3", "--max-response-tokens", "12", "--ray-address", "local", "--no-progress"]

@pytest.mark.parametrize("fault", ["checkpoint@2", "publication@2"])
def test_sigkill_then_resume_equals_uninterrupted(tiny_models, arithmetic, tmp_path, fault):
    m = tiny_models["huginn_raven"]
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli("looprl.train", "--model", m, "--data", arithmetic, "--output", a, *ARGS).returncode == 0
    r = run_cli("looprl.train", "--model", m, "--data", arithmetic, "--output", b, *ARGS, env={"LOOPRL_FAULT": fault})
    assert r.returncode == -9, (r.returncode, r.stderr[-2000:])
    assert (b / "checkpoints" / "latest").read_text().strip() == "update-000001"   # the interrupted save/update left no trace
    r = run_cli("looprl.train", "--output", b, "--resume", "--ray-address", "local", "--no-progress")
    assert r.returncode == 0, r.stderr
    c = run_cli("looprl.compare", a, b); assert c.returncode == 0, c.stdout + c.stderr
