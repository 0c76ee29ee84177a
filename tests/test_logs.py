"""`--log-to tensorboard` on the main job: the event files in the run directory read back with TensorBoard's own reader,
every metrics field present, and a stopped-and-resumed run continuing the same log with no step twice and the same
values as the uninterrupted run. Skipped where tensorboard is not installed (it is in the `dev` and `tensorboard` extras)."""
import json
import pytest
from conftest import run_cli, updates

pytest.importorskip("tensorboard", reason="tensorboard is not installed: pip install -e '.[tensorboard]'")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from looprl.logs import flat_scalars
from looprl.state import read_metrics

SMALL = ["--updates", "3", "--rollout-batch-size", "4", "--max-response-tokens", "8", "--eval-limit", "16", "--eval-samples", "2",
         "--no-progress", "--log-to", "tensorboard"]


def events(run):
    return EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0}).Reload()


def scalars(acc) -> dict:
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def test_main_job_tensorboard_log(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    r = run_cli("looprl.train", "--output", a, *SMALL); assert r.returncode == 0, r.stderr[-3000:]
    r = run_cli("looprl.train", "--output", b, *SMALL, "--stop-after", "2"); assert r.returncode == 0, r.stderr[-3000:]
    r = run_cli("looprl.train", "--output", b, "--resume", "--no-progress"); assert r.returncode == 0, r.stderr[-3000:]
    acc_a, acc_b = events(a), events(b)
    sa = scalars(acc_a)
    want = {f"{'heldout' if l['kind'] == 'heldout' else 'update'}/{k}" for l in read_metrics(a) for k in flat_scalars(l)}
    assert set(sa) == want                                                  # every number of every metrics line
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
    timed = lambda t: "/time/" in t or t.endswith("_s")                     # wall-clock timings differ between two runs
    assert {t: v for t, v in sb.items() if not timed(t)} == {t: v for t, v in sa.items() if not timed(t)}   # and the same values
    assert len({json.dumps(sorted(l.items())) for l in updates(b)}) == 3
