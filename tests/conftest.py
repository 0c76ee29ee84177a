import json, os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]

def run_cli(module, *args, env=None, timeout=600):
    "Run `python -m module args…` in a fresh process; returns the CompletedProcess."
    e = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=e, cwd=ROOT)

@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    "Tiny checkpoints of the three families in the real layouts."
    from looprl.hf import make_tiny_checkpoint
    root = tmp_path_factory.mktemp("models")
    return {f: make_tiny_checkpoint(f, root / f, seed=7) for f in ("huginn_raven", "ouro", "nanbeige")}

@pytest.fixture(scope="session")
def arithmetic(tmp_path_factory):
    "A small arithmetic JSONL taken from the embedded data."
    from looprl.data import EMBEDDED_DATA
    rows = Path(EMBEDDED_DATA).read_text().splitlines()[:40]
    p = tmp_path_factory.mktemp("data") / "arith.jsonl"
    p.write_text("\n".join(rows) + "\n")
    return p
