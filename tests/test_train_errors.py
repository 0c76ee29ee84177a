"""Every bad input: one line on stderr, exit status 2, and the output directory as it was."""
import json, shutil
import pytest
from conftest import run_cli

def tree(p):
    return None if not p.exists() else sorted((str(f.relative_to(p)), f.stat().st_size) for f in p.rglob("*"))

def bad(out, *args):
    before = tree(out)
    r = run_cli("looprl.train", "--output", out, "--ray-address", "local", "--no-progress", *args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    assert tree(out) == before
    return lines[0]

@pytest.fixture
def data_file(tmp_path):
    def make(text):
        p = tmp_path / "data.jsonl"; p.write_text(text); return p
    return make

def test_unknown_flag(tmp_path):
    assert "unrecognized arguments: --updtes" in bad(tmp_path / "new", "--updtes", "3")

def test_stop_after_not_below_updates(tmp_path):
    assert "--stop-after" in bad(tmp_path / "new", "--updates", "3", "--stop-after", "3")

def test_resume_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    assert "not a looprl run directory" in bad(tmp_path / "empty", "--resume")

@pytest.mark.parametrize("text,needle", [
    ('{"prompt": "1+1=", "label": "2"}\n{"prompt": "2+2=", "label": \n', "data.jsonl:2"),
    ('{"prompt": "1+1="}\n', "label"),
    ('{"prompt": "1+1=", "label": 2}\n', "label"),
    ('{"prompt": 5, "label": "2"}\n', "prompt"),
    ('', "no rows"),
    ('{"prompt": "1+1=", "label": "2"}\n\n{"prompt": "6 × 7", "label": "42"}\n', "data.jsonl:3: field 'prompt'"),
])
def test_malformed_data(tmp_path, data_file, text, needle):
    msg = bad(tmp_path / "new", "--data", data_file(text))
    assert needle in msg and "data.jsonl" in msg

def test_unknown_model_family(tmp_path, tiny_models):
    m = tmp_path / "llama"; shutil.copytree(tiny_models["ouro"], m)
    cfg = json.loads((m / "config.json").read_text()); cfg["model_type"] = "llama"; (m / "config.json").write_text(json.dumps(cfg))
    assert "unknown model_type 'llama'" in bad(tmp_path / "new", "--model", m)

def test_mismatched_revision(tmp_path, tiny_models):
    m = tmp_path / "rev"; shutil.copytree(tiny_models["ouro"], m)
    cfg = json.loads((m / "config.json").read_text()); cfg["_revision"] = "aaaa"; (m / "config.json").write_text(json.dumps(cfg))
    assert "does not match" in bad(tmp_path / "new", "--model", m, "--model-revision", "bbbb")

def test_grpo_needs_two_samples(tmp_path):
    assert "at least 2" in bad(tmp_path / "new", "--algorithm", "grpo", "--n-samples-per-prompt", "1")

def test_resume_with_a_different_contract_and_finished_run(tmp_path, tiny_models, arithmetic):
    out = tmp_path / "run"
    r = run_cli("looprl.train", "--model", tiny_models["ouro"], "--data", arithmetic, "--output", out, "--algorithm", "grpo",
                "--updates", "2", "--stop-after", "1", "--max-response-tokens", "6", "--ray-address", "local", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "algorithm: run has 'grpo', requested 'ppo'" in bad(out, "--resume", "--algorithm", "ppo")
    other = tmp_path / "other.jsonl"; other.write_text(arithmetic.read_text() + '{"prompt": "9+9=", "label": "18"}\n')
    assert "data.sha256: run has" in bad(out, "--resume", "--data", other)
    r = run_cli("looprl.train", "--output", out, "--resume", "--ray-address", "local", "--no-progress"); assert r.returncode == 0, r.stderr
    assert "already finished" in bad(out, "--resume")

def test_new_run_into_non_empty_directory(tmp_path):
    d = tmp_path / "busy"; d.mkdir(); (d / "x").write_text("keep")
    assert "not empty" in bad(d)

def test_nccl_transport_needs_two_gpu_workers(tmp_path):
    # bad() runs with --ray-address local (in-process workers), which cannot hold a two-rank NCCL link
    assert "--transport nccl" in bad(tmp_path / "new", "--transport", "nccl")

def test_checkpoint_every_must_be_positive(tmp_path):
    assert "--checkpoint-every" in bad(tmp_path / "new", "--checkpoint-every", "0")
