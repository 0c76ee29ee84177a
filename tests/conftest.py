import json, math, os, re, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = Path(__file__).resolve().parent / "plugins"

def run_cli(module, *args, env=None, timeout=600):
    "Run `python -m module args…` in a fresh process; returns the CompletedProcess."
    e = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=e, cwd=ROOT)

@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    "Tiny checkpoints of the three families in the real layouts, with random weights."
    from looprl.make_tiny import make_tiny_checkpoint
    root = tmp_path_factory.mktemp("models")
    return {f: make_tiny_checkpoint(f, root / f, seed=7) for f in ("huginn_raven", "ouro", "nanbeige")}

@pytest.fixture(scope="session")
def shipped():
    "The warm-started tiny models shipped in the package: their sampled answers are sometimes right, sometimes wrong."
    from looprl.warmstart import EMBEDDED_MODELS
    return {f: Path(p) for f, p in EMBEDDED_MODELS.items()}

@pytest.fixture(scope="session")
def arithmetic(tmp_path_factory):
    "The first 64 embedded RL prompts."
    from looprl.tasks.data import EMBEDDED_DATA
    p = tmp_path_factory.mktemp("data") / "arith.jsonl"
    p.write_text("\n".join(Path(EMBEDDED_DATA).read_text().splitlines()[:64]) + "\n")
    return p

PROGRESS_LINE = re.compile(r"^looprl\.train: (update \d+ \(\d+/\d+\) · |warning: )")

def said_lines(stderr: str) -> list[str]:
    """A command's non-empty stderr lines without what a run says as it goes (a line per finished update, warnings):
    what is left of a run that fails is its one line."""
    return [l for l in stderr.splitlines() if l.strip() and not PROGRESS_LINE.match(l)]

def updates(run) -> list[dict]:
    "The update lines of a run's metrics."
    from looprl.core.state import read_metrics
    return [l for l in read_metrics(run) if l["kind"] == "update"]

def assert_changing(run):
    """Non-vacuity of an equality test: the run's state changed at every update. Finite gradient norms > 0 for the
    actor (and the critic), every publication digest different from the one before, rewards that differ within at
    least one group (GRPO) or one batch (the others)."""
    ups = updates(run)
    assert ups, f"{run}: no updates"
    for l in ups:
        for k in ("grad_norm", "critic_grad_norm"):
            if k in l: assert math.isfinite(l[k]) and l[k] > 0, (run, l["update"], k, l[k])
    digests = [l["digest"] for l in ups]
    assert all(a != b for a, b in zip(digests, digests[1:])), digests
    G = json.loads((Path(run) / "run.json").read_text())["contract"]["rollout"]["n_samples_per_prompt"]
    rewards = [c["reward"] for f in sorted((Path(run) / "rollouts").glob("update-*.json")) for c in json.loads(f.read_text())["completions"]]
    groups = [rewards[i:i + G] for i in range(0, len(rewards), G)] if G > 1 else [rewards]
    assert any(len(set(g)) > 1 for g in groups), "every group earned equal rewards"
