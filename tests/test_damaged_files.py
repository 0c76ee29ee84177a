"""A run whose newest checkpoint is damaged resumes from the older whole one in one command, says so in one line, moves
the damaged one aside, and ends equal to the uninterrupted run (`looprl.compare`: EQUAL); the twin that leaves one
generator fresh on that resume is reported DIFFERENT. With every checkpoint damaged: one line naming them, exit 1."""
import json, shutil
import pytest
from conftest import run_cli, assert_changing, said_lines, PLUGINS

REWARD = f"{PLUGINS / 'rng_reward.py'}:noisy_math_reward"        # draws from every generator: all state matters
ARGS = ["--algorithm", "ppo", "--precision", "fp32", "--optimizer", "adamw", "--lr", "1e-4", "--warmup-steps", "4",
        "--rollout-batch-size", "8", "--updates", "3", "--max-response-tokens", "6", "--reward", REWARD, "--no-eval",
        "--no-progress"]

@pytest.fixture(scope="module")
def runs(shipped, arithmetic, tmp_path_factory):
    "An uninterrupted 3-update run, and one stopped after 2 (checkpoints update-000001 and update-000002 kept)."
    root = tmp_path_factory.mktemp("damaged")
    a, b = root / "straight", root / "stopped"
    for d, extra in ((a, []), (b, ["--stop-after", "2"])):
        r = run_cli("looprl.train", "--model", shipped["huginn_raven"], "--data", arithmetic, "--output", d, *ARGS, *extra)
        assert r.returncode == 0, r.stderr
    assert_changing(a)
    assert sorted(p.name for p in (b / "checkpoints").iterdir()) == ["latest", "update-000001", "update-000002"]
    return a, b

def truncate(f, keep: float = 0.5):
    data = f.read_bytes(); f.write_bytes(data[:int(len(data) * keep)])

def resume_past_damage(runs, tmp_path, env=None):
    "Copy the stopped run, cut its newest trainer.pt in half, resume it; (stderr lines, compare exit, fields, copy)."
    a, b = runs
    c = tmp_path / "resumed"; shutil.copytree(b, c)
    truncate(c / "checkpoints" / "update-000002" / "trainer.pt")
    r = run_cli("looprl.train", "--output", c, "--resume", "--no-progress", env=env)
    assert r.returncode == 0, r.stderr
    rep = run_cli("looprl.compare", a, c, "--json")
    return said_lines(r.stderr), rep.returncode, {f["field"]: f for f in json.loads(rep.stdout)["fields"]}, c

def test_resume_falls_back_to_the_older_checkpoint_and_equals_the_straight_run(runs, tmp_path):
    lines, code, fields, c = resume_past_damage(runs, tmp_path)
    notes = [l for l in lines if l.startswith("looprl.train: note: ")]
    assert len(notes) == 1 and "update-000002" in notes[0] and "update-000001" in notes[0], lines
    assert code == 0, {k: v for k, v in fields.items() if v["status"] not in ("equal", "n/a")}
    assert (c / "checkpoints" / "damaged-update-000002" / "trainer.pt").is_file()        # moved aside, not deleted
    assert (c / "checkpoints" / "latest").read_text().strip() == "update-000003"

def test_twin_a_fallback_resume_that_leaves_a_generator_fresh_is_different(runs, tmp_path):
    _, code, fields, _ = resume_past_damage(runs, tmp_path, env={"LOOPRL_SKIP_RESTORE": "rng.torch_cpu"})
    assert code == 1 and fields["rng.torch_cpu"]["status"] == "different", fields["rng.torch_cpu"]

def test_every_checkpoint_damaged_is_one_line_and_exit_1(runs, tmp_path):
    c = tmp_path / "all-damaged"; shutil.copytree(runs[1], c)
    for name in ("update-000001", "update-000002"): truncate(c / "checkpoints" / name / "trainer.pt")
    before = sorted(str(p.relative_to(c)) for p in c.rglob("*"))
    r = run_cli("looprl.train", "--output", c, "--resume", "--no-progress")
    lines = said_lines(r.stderr)
    assert r.returncode == 1 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "update-000001" in lines[0] and "update-000002" in lines[0] and "trainer.pt" in lines[0], lines[0]
    assert sorted(str(p.relative_to(c)) for p in c.rglob("*")) == before                   # nothing moved or written
