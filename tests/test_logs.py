"""`--log-to tensorboard wandb` on the main job: the TensorBoard event files read back with TensorBoard's own reader and the
offline W&B run files read back from W&B's record log, every metrics field present in each, and a stopped-and-resumed run
continuing the same logs with no step twice and the same values as the uninterrupted run. One pair of runs writes both logs;
each check is skipped only where its package is not installed (both are in the `dev` extra)."""
import importlib.util, json
import pytest
from conftest import run_cli, updates
from looprl.run.logs import flat_scalars
from looprl.core.state import read_metrics

TARGETS = [t for t in ("tensorboard", "wandb") if importlib.util.find_spec(t)]
pytestmark = pytest.mark.skipif(not TARGETS, reason="neither tensorboard nor wandb is installed: pip install -e '.[dev]'")
SMALL = ["--updates", "3", "--rollout-batch-size", "4", "--max-response-tokens", "8", "--eval-limit", "16", "--eval-samples", "2",
         "--no-progress", *[a for t in TARGETS for a in ("--log-to", t)]]
timed = lambda t: "/time/" in t or t.endswith("_s")                      # wall-clock timings differ between two runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    "The main job uninterrupted (a) and stopped after 2 updates then resumed (b), both logging to every installed target."
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    r = run_cli("looprl.train", "--output", a, *SMALL); assert r.returncode == 0, r.stderr[-3000:]
    r = run_cli("looprl.train", "--output", b, *SMALL, "--stop-after", "2"); assert r.returncode == 0, r.stderr[-3000:]
    r = run_cli("looprl.train", "--output", b, "--resume", "--no-progress"); assert r.returncode == 0, r.stderr[-3000:]
    assert "wandb" not in r.stdout.lower()                                  # the logger keeps stdout for the command's output
    assert len({json.dumps(sorted(l.items())) for l in updates(b)}) == 3
    return a, b


def want_scalars(run) -> dict:
    "Every number of every metrics line, by its logged name and update."
    return {(f"{'heldout' if l['kind'] == 'heldout' else 'update'}/{k}", l["update"]): v for l in read_metrics(run)
            for k, v in flat_scalars(l).items()}


def test_main_job_tensorboard_log(runs):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed: pip install -e '.[tensorboard]'")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = lambda run: EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0}).Reload()
    scalars = lambda acc: {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}
    a, b = runs
    acc_a, acc_b = events(a), events(b)
    sa = scalars(acc_a)
    assert set(sa) == {t for t, _ in want_scalars(a)}                       # every number of every metrics line
    assert [s for s, _ in sa["update/reward_mean"]] == [0, 1, 2]
    assert [s for s, _ in sa["heldout/greedy_accuracy"]] == [0, 3]
    assert [v for _, v in sa["update/reward_mean"]] == pytest.approx([l["reward_mean"] for l in updates(a)], rel=1e-6)
    assert any(t.startswith("update/time/") for t in sa)
    for h in ("rewards", "advantages", "logprob_parity"):
        assert [e.step for e in acc_a.Histograms(f"update/{h}")] == [0, 1, 2]
    text = acc_a.Tensors("update/samples/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "→" in text and "reward" in text
    sb = scalars(acc_b)
    assert set(sb) == set(sa) and all([s for s, _ in sb[t]] == [s for s, _ in sa[t]] for t in sa)   # the same steps, once each
    assert {t: v for t, v in sb.items() if not timed(t)} == {t: v for t, v in sa.items() if not timed(t)}   # and the same values


def test_main_job_wandb_log(runs):
    pytest.importorskip("wandb", reason="wandb is not installed: pip install -e '.[wandb]'")
    from looprl.run.logs import wandb_history
    a, b = runs
    ha, hb = wandb_history(a), wandb_history(b)
    assert [r["_step"] for r in ha] == [0, 1, 2, 3] == [r["_step"] for r in hb]      # each step once, across b's two processes
    assert len(list((b / "wandb").glob("offline-run-*-part*"))) == 2
    logged = lambda h: {(k, r["_step"]): v for r in h for k, v in r.items() if not k.startswith("_") and not isinstance(v, dict)}
    la, want = logged(ha), want_scalars(a)
    assert set(la) == set(want)                                              # every number of every metrics line, nothing else
    assert la == pytest.approx(want, rel=1e-6)
    assert any(k.startswith("update/time/") for k, _ in la) and ("heldout/greedy_accuracy", 3) in la
    for r in ha[:3]:
        for h in ("rewards", "advantages", "logprob_parity"): assert r[f"update/{h}"]["_type"] == "histogram"
        page = next((a / "wandb").glob(f"offline-run-*/files/{r['update/samples']['path']}")).read_text()
        assert "→" in page and "reward" in page
    lb = logged(hb)
    assert {k: v for k, v in lb.items() if not timed(k[0])} == {k: v for k, v in la.items() if not timed(k[0])}
