"""A process killed with SIGKILL during a checkpoint save, or during a publication, then resumed, ends equal to the
uninterrupted run; Ctrl-C and SIGTERM end a run with one line and a resume hint, and resuming it is exact too."""
import json, os, re, signal, subprocess, sys, time
import pytest
from conftest import run_cli, assert_changing, updates, said_lines, ROOT

ARGS = ["--algorithm", "ppo", "--precision", "fp32", "--optimizer", "adamw", "--lr", "1e-4", "--rollout-batch-size", "8",
        "--max-response-tokens", "6", "--no-eval", "--no-progress"]

@pytest.fixture(scope="module")
def straight(shipped, arithmetic, tmp_path_factory):
    a = tmp_path_factory.mktemp("straight") / "a"
    r = run_cli("looprl.train", "--model", shipped["huginn_raven"], "--data", arithmetic, "--output", a, *ARGS, "--updates", "3")
    assert r.returncode == 0, r.stderr
    assert_changing(a)
    return a

@pytest.mark.parametrize("fault", ["checkpoint@2", "publication@2"])
def test_sigkill_then_resume_equals_uninterrupted(shipped, arithmetic, straight, tmp_path, fault):
    b = tmp_path / "b"
    r = run_cli("looprl.train", "--model", shipped["huginn_raven"], "--data", arithmetic, "--output", b, *ARGS, "--updates", "3",
                env={"LOOPRL_FAULT": fault})
    assert r.returncode == -9, (r.returncode, r.stderr[-2000:])
    latest = b / "checkpoints" / "latest"
    if fault.startswith("checkpoint"):       # killed writing the second checkpoint: the first is the latest, complete
        assert latest.read_text().strip() == "update-000001"
    else:                                    # killed at update 1's publication, the first checkpoint perhaps still being written
        assert not latest.exists() or latest.read_text().strip() == "update-000001"     # in the background: it is complete or absent
    assert not [p for p in (b / "checkpoints").iterdir() if p.name.startswith("update-") and not (p / "loop.json").exists()]
    r = run_cli("looprl.train", "--output", b, "--resume", "--no-progress"); assert r.returncode == 0, r.stderr
    c = run_cli("looprl.compare", straight, b); assert c.returncode == 0, c.stdout + c.stderr

@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_is_one_line_and_resumes_exactly(shipped, arithmetic, straight, tmp_path, sig, code):
    "The signal reaches the whole process group at the second publication, as a terminal's Ctrl-C reaches every process of a job."
    b = tmp_path / "b"
    cmd = [sys.executable, "-m", "looprl.train", "--model", str(shipped["huginn_raven"]), "--data", str(arithmetic), "--output", str(b),
           *ARGS, "--updates", "3"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, start_new_session=True,
                       env={**os.environ, "LOOPRL_FAULT": f"publication@2:{sig.name}"})
    assert p.returncode == code, (p.returncode, p.stderr)
    lines = said_lines(p.stderr)
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith(f"looprl.train: interrupted by {sig.name} during update 1") and f"--output {b} --resume" in lines[0]
    assert (b / "checkpoints" / "latest").read_text().strip() == "update-000001"
    r = run_cli("looprl.train", "--output", b, "--resume", "--no-progress"); assert r.returncode == 0, r.stderr
    c = run_cli("looprl.compare", straight, b); assert c.returncode == 0, c.stdout + c.stderr

def ray_own_line(line):
    "Ray's own notices (its token-auth banner, its raylet's warnings such as a nearly full disk) are not looprl's output."
    plain = re.sub(r"\x1b\[[0-9;]*m", "", line)
    return plain.startswith(("Token authentication is enabled", "(raylet)", "(gcs_server)"))

def test_ray_own_lines_are_recognised():
    assert ray_own_line("\x1b[33m(raylet)\x1b[0m [2026-12-01] file_system_monitor.cc:116: /tmp/ray is over 95% full")
    assert not ray_own_line("looprl.train: interrupted by SIGINT during update 0")
    assert not ray_own_line("Traceback (most recent call last):")

def test_ctrl_c_under_ray_is_one_line(shipped, arithmetic, tmp_path):
    "Ctrl-C while Ray workers train: the terminal's SIGINT reaches the driver's process group; one line, exit 130, resumable."
    b = tmp_path / "b"
    cmd = [sys.executable, "-m", "looprl.train", "--model", str(shipped["huginn_raven"]), "--data", str(arithmetic), "--output", str(b),
           *ARGS, "--updates", "6", "--workers", "ray"]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 400
    while time.time() < deadline and not (b / "metrics.jsonl").exists() and p.poll() is None: time.sleep(0.05)
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 130, (p.returncode, err)
    lines = [l for l in said_lines(err) if not ray_own_line(l)]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("looprl.train: interrupted by SIGINT") and f"--output {b} --resume" in lines[0]
    r = run_cli("looprl.train", "--output", b, "--resume", "--no-progress", "--workers", "local"); assert r.returncode == 0, r.stderr
    assert len(updates(b)) == 6

def test_torn_metrics_line_is_dropped_on_resume(shipped, arithmetic, straight, tmp_path):
    "A crash in the middle of writing a metrics line leaves a line without its newline; the resume drops it and is exact."
    b = tmp_path / "b"
    r = run_cli("looprl.train", "--model", shipped["huginn_raven"], "--data", arithmetic, "--output", b, *ARGS, "--updates", "3", "--stop-after", "2")
    assert r.returncode == 0, r.stderr
    with open(b / "metrics.jsonl", "a") as f: f.write('{"kind": "update", "update": 2, "rew')
    r = run_cli("looprl.train", "--output", b, "--resume", "--no-progress"); assert r.returncode == 0, r.stderr
    assert [u["update"] for u in updates(b)] == [0, 1, 2]
    c = run_cli("looprl.compare", straight, b); assert c.returncode == 0, c.stdout + c.stderr
