"`python -m looprl.make_tiny` in a subprocess: every family loads strictly, seeds are reproducible, refusals exit 2."
import json, os, subprocess, sys
from pathlib import Path
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def make_tiny(*args):
    return subprocess.run([sys.executable, "-m", "looprl.make_tiny", *map(str, args)], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("family", ["huginn_raven", "ouro", "nanbeige"])
def test_family_loads_strictly(tmp_path, family):
    from looprl.model.hf import load_checkpoint, checkpoint_sha256
    from looprl.model.config import tiny_config
    from tokenizers import Tokenizer
    out = tmp_path / "ck"
    r = make_tiny("--family", family, out, "--seed", 5)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert (s["family"], s["seed"], s["path"]) == (family, 5, str(out))
    assert s["sha256"] == checkpoint_sha256(out)
    m = load_checkpoint(out)
    assert m.family == family and m.cfg == tiny_config(family)
    assert Tokenizer.from_file(str(out / "tokenizer.json")).token_to_id("<eos>") == 2


def test_seed_reproducible(tmp_path):
    a, b, c = (make_tiny("--family", "huginn_raven", tmp_path / n, "--seed", s) for n, s in (("a", 1), ("b", 1), ("c", 2)))
    sa, sb, sc = (json.loads(r.stdout)["sha256"] for r in (a, b, c))
    assert sa == sb != sc
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()


def test_empty_existing_directory_is_accepted(tmp_path):
    r = make_tiny("--family", "nanbeige", tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]


def test_refuses_non_empty_output(tmp_path):
    (tmp_path / "notes.txt").write_text("keep")
    r = make_tiny("--family", "ouro", tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [f"looprl.make_tiny: {tmp_path}: exists and is not empty; refusing to overwrite it"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_refuses_existing_checkpoint_unchanged(tmp_path):
    out = tmp_path / "ck"
    assert make_tiny("--family", "ouro", out, "--seed", 1).returncode == 0
    before = (out / "model.safetensors").read_bytes()
    r = make_tiny("--family", "huginn_raven", out)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert (out / "model.safetensors").read_bytes() == before
    assert json.loads((out / "config.json").read_text())["model_type"] == "ouro"


def test_refuses_file_output(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    r = make_tiny("--family", "ouro", f)
    assert r.returncode == 2 and "is not a directory" in r.stderr and f.read_text() == "x"


@pytest.mark.parametrize("args,expect", [
    (("--family", "llama"), "unknown model family 'llama'"),
    ((), "--family is required"),
])
def test_refuses_family(tmp_path, args, expect):
    out = tmp_path / "ck"
    r = make_tiny(*args, out)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("looprl.make_tiny: ") and expect in lines[0]
    assert not out.exists()
