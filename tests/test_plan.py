"""The plan's choices and refusals, out-of-memory errors in each phase and failing checkpoint writes as one line with
the last checkpoint intact, and checkpoints written in the background equal to those written in the update's time."""
import json, shlex, shutil
from pathlib import Path
import pytest, torch
import looprl.run.plan as plan
import looprl.run.checkpoint_writer as writer
from looprl.core.state import latest_checkpoint, CHECKPOINTS
from looprl.train import main
from conftest import said_lines
from looprl.run.options import RunOptions

ARGS = ["--updates", "2", "--rollout-batch-size", "2", "--max-response-tokens", "6", "--no-eval", "--no-progress"]

def train(capsys, out, *args) -> tuple[int, list[str]]:
    "Run `looprl.train` in this process; (exit status, non-empty stderr lines)."
    try: main(["--output", str(out), *ARGS, *args]); code = 0
    except SystemExit as e: code = e.code
    return code, said_lines(capsys.readouterr().err)

@pytest.fixture
def after_first_update(monkeypatch):
    "A counter of finished `Trainer.train` calls: the faults below strike in update 1, once update 0 is checkpointed."
    from looprl.training.trainer import Trainer
    done, real = [0], Trainer.train
    def counted(self, *a, **k):
        r = real(self, *a, **k); done[0] += 1; return r
    monkeypatch.setattr(Trainer, "train", counted)
    return done

def oom(*a, **k): raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

def raise_after(done, real, only=lambda *a: True):
    def f(*a, **k):
        if done[0] >= 1 and only(*a): oom()
        return real(*a, **k)
    return f

@pytest.mark.parametrize("phase", ["rollout", "publication", "replay", "actor step", "critic step"])
def test_out_of_memory_is_one_line_per_phase(monkeypatch, capsys, tmp_path, after_first_update, phase):
    import looprl.rollout.engine, looprl.training.trainer
    from looprl.training.learner import Learner
    done = after_first_update
    if phase == "rollout": monkeypatch.setattr(looprl.rollout.engine.Engine, "generate", raise_after(done, looprl.rollout.engine.Engine.generate))
    if phase == "publication": monkeypatch.setattr(looprl.training.trainer, "export_tensors", raise_after(done, looprl.training.trainer.export_tensors))
    if phase == "replay": monkeypatch.setattr(looprl.training.trainer, "response_logprobs", raise_after(done, looprl.training.trainer.response_logprobs))
    if phase.endswith("step"):
        critic = phase == "critic step"
        monkeypatch.setattr(Learner, "backward", raise_after(done, Learner.backward, lambda l, *a: hasattr(l.model, "value_head") == critic))
    out = tmp_path / "run"
    code, lines = train(capsys, out)
    assert code == 1 and len(lines) == 1, (code, lines)
    assert lines[0].startswith(f"looprl.train: out of device memory in the {phase} during update 1 ("), lines[0]
    assert "the last checkpoint, update-000001, is intact" in lines[0] and f"--output {out} --resume" in lines[0]
    assert ("lower --engine-batch" in lines[0]) == (phase == "rollout")          # the setting that frees that memory
    assert latest_checkpoint(out).name == "update-000001" and (latest_checkpoint(out) / "trainer.pt").stat().st_size > 0

@pytest.mark.parametrize("mode", ["background", "sync"])
def test_failing_checkpoint_write_is_one_line_and_leaves_the_previous(monkeypatch, capsys, tmp_path, mode):
    "The second checkpoint's trainer file fails after writing part of itself (a full disk); resume continues from the first."
    real, calls = torch.save, []
    def full_disk(obj, f, *a, **k):
        if str(f).endswith("trainer.pt"):
            calls.append(f)
            if len(calls) == 2:
                open(f, "wb").write(b"\0" * 4096)
                raise OSError(28, "No space left on device")
        return real(obj, f, *a, **k)
    monkeypatch.setattr(torch, "save", full_disk)
    out = tmp_path / "run"
    code, lines = train(capsys, out, *(["--sync-checkpoints"] if mode == "sync" else []))
    assert code == 1 and len(lines) == 1, (code, lines)
    assert f"writing checkpoint {out / CHECKPOINTS / 'update-000002'} failed (OSError: [Errno 28] No space left on device)" in lines[0], lines[0]
    assert "GiB are free there" in lines[0] and "the last checkpoint, update-000001, is intact" in lines[0], lines[0]
    ck = out / CHECKPOINTS
    assert sorted(p.name for p in ck.iterdir()) == ["latest", "update-000001"]     # nothing half-written that resume could take
    monkeypatch.setattr(torch, "save", real)
    code, lines = train(capsys, out, "--resume")
    assert code == 0 and latest_checkpoint(out).name == "update-000002", lines

def test_disk_full_while_the_tensor_bytes_are_written(monkeypatch, capsys, tmp_path):
    """The disk fills up while the second checkpoint's tensor bytes are written by the writer's threads (after the
    archive's skeleton): one line, nothing half-written left, and --resume continues from the first checkpoint."""
    from looprl.core import state_file
    skeletons, real_skeleton, real_storage = [], state_file.write_skeleton, state_file.write_storage
    def counted(obj, path):
        skeletons.append(path); return real_skeleton(obj, path)
    def full(fd, t, offset):
        if len(skeletons) == 2: raise OSError(28, "No space left on device")
        return real_storage(fd, t, offset)
    monkeypatch.setattr(state_file, "write_skeleton", counted)
    monkeypatch.setattr(state_file, "write_storage", full)
    out = tmp_path / "run"
    code, lines = train(capsys, out)
    assert code == 1 and len(lines) == 1, (code, lines)
    assert f"writing checkpoint {out / CHECKPOINTS / 'update-000002'} failed (OSError: [Errno 28] No space left on device)" in lines[0], lines[0]
    assert sorted(p.name for p in (out / CHECKPOINTS).iterdir()) == ["latest", "update-000001"]
    monkeypatch.setattr(state_file, "write_storage", real_storage)
    code, lines = train(capsys, out, "--resume")
    assert code == 0 and latest_checkpoint(out).name == "update-000002", lines

@pytest.mark.parametrize("skip", [True, False])
def test_busy_checkpoints_skipped_never_the_last(monkeypatch, capsys, tmp_path, skip):
    """Writes slower than the updates: with --skip-busy-checkpoints the checkpoints that come due mid-write are skipped
    (listed in the summary), the last is written, and the run's metrics equal a run that wrote every one; the twin
    (--no-skip-busy-checkpoints) waits and writes every checkpoint."""
    import time
    from looprl.core.state import read_metrics
    from looprl.run import checkpoint_writer
    real = checkpoint_writer.write_state
    def slow(*a, **k):                                     # the bytes reach the disk slowly, after the copies
        real(*a, **k); time.sleep(1.5)
    monkeypatch.setattr(checkpoint_writer, "write_state", slow)
    out, flag = tmp_path / "run", "--skip-busy-checkpoints" if skip else "--no-skip-busy-checkpoints"
    code, lines = train(capsys, out, "--updates", "4", "--keep-checkpoints", "4", flag); assert code == 0, lines
    written = sorted(p.name for p in (out / CHECKPOINTS).iterdir() if p.name.startswith("update-"))
    skipped = json.loads((out / "summary.json").read_text())["checkpoints_skipped"]
    assert "update-000004" in written and 4 not in skipped                       # the last is always written
    assert written == [f"update-{u:06d}" for u in range(1, 5) if u not in skipped]
    assert bool(skipped) == skip, skipped                                        # skipped only when asked
    monkeypatch.setattr(checkpoint_writer, "write_state", real)
    code, lines = train(capsys, tmp_path / "every", "--updates", "4", "--sync-checkpoints"); assert code == 0, lines
    strip = lambda run: [{k: v for k, v in l.items() if k != "time"} for l in read_metrics(run)]
    assert strip(out) == strip(tmp_path / "every")                              # skipping changes no result

def test_background_checkpoints_equal_written_in_the_update(capsys, tmp_path):
    from looprl.run.workers import nested_state_digest
    digests = {}
    for mode, extra in (("background", []), ("sync", ["--sync-checkpoints"])):
        code, lines = train(capsys, tmp_path / mode, *extra); assert code == 0, lines
        digests[mode] = [nested_state_digest(torch.load(tmp_path / mode / CHECKPOINTS / f"update-00000{u}" / "trainer.pt", weights_only=True))
                         for u in (1, 2)]
        s = json.loads((tmp_path / mode / "summary.json").read_text())
        assert all("checkpoint_wait_s" in u["time"] for u in s["updates"]) and s["checkpoint_wait_s"] >= 0
        assert [w["update"] for w in s["checkpoint_writes"]] == [1, 2]                  # each write's seconds
        assert all(("copies_s" in w) == (mode == "background") and w["total_s"] >= w["trainer_file_s"] > 0
                   for w in s["checkpoint_writes"]), s["checkpoint_writes"]
    assert digests["background"][0] != digests["background"][1]          # the state changed between the checkpoints
    assert digests["background"] == digests["sync"]

def test_training_waits_for_the_checkpoint_copies(monkeypatch, capsys, tmp_path):
    """Checkpoint copies made 1.5 s late: the checkpoints still equal those written in the update's time, because the
    next training step waits for the copies; the twin, whose wait returns at once, writes update 1's checkpoint with
    state that update 1's training had already changed."""
    import time
    from looprl.run import checkpoint_writer
    from looprl.run.workers import nested_state_digest
    real_fill = checkpoint_writer.DeferredSnapshot.fill
    def late(self, buf):
        t0 = self.__dict__.setdefault("t0", time.perf_counter())
        time.sleep(max(0.0, t0 + 1.5 - time.perf_counter())); real_fill(self, buf)
    digest = lambda run, u: nested_state_digest(torch.load(run / CHECKPOINTS / f"update-00000{u}" / "trainer.pt"))
    code, lines = train(capsys, tmp_path / "sync", "--sync-checkpoints"); assert code == 0, lines
    monkeypatch.setattr(checkpoint_writer.DeferredSnapshot, "fill", late)
    code, lines = train(capsys, tmp_path / "late"); assert code == 0, lines
    assert [digest(tmp_path / "late", u) for u in (1, 2)] == [digest(tmp_path / "sync", u) for u in (1, 2)]
    assert digest(tmp_path / "sync", 1) != digest(tmp_path / "sync", 2)           # training changed the state
    monkeypatch.setattr(checkpoint_writer.CheckpointWriter, "wait_for_snapshot", lambda self: 0.0)
    code, lines = train(capsys, tmp_path / "unwaited"); assert code == 0, lines
    assert digest(tmp_path / "unwaited", 1) != digest(tmp_path / "sync", 1)       # the twin: copied too late

def snapshot_file(l, staging, path):
    "A learner's deferred snapshot written to `path` (its copies made by the writing threads); the host tree."
    from looprl.core.state_file import write_state
    sources = {}
    snap = writer.DeferredSnapshot(writer.learner_snapshot(l, staging, sources), sources)
    write_state(snap.tree, path, snap.fill)
    assert snap.copied.is_set()
    return snap.tree

@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_snapshot_is_the_state_and_stays_put(shipped, precision, tmp_path):
    from looprl.training.trainer import build_trainer
    from looprl.training.settings import TrainSettings
    from looprl.run.workers import nested_state_digest
    t = build_trainer(shipped["huginn_raven"], TrainSettings(algorithm="grpo", precision=precision, optimizer="adamw"))
    l = t.actor
    def step():
        for p in l.opt_params: p.grad = torch.full_like(p, 1e-3)
        assert l.step()["skipped"] == 0
    step()
    before = nested_state_digest(l.state_dict())
    snapshot_file(l, writer.HostStaging(), tmp_path / "s.pt")
    step()
    assert nested_state_digest(l.state_dict()) != before                  # the learner moved on ...
    assert nested_state_digest(torch.load(tmp_path / "s.pt")) == before   # ... the file holds it as it was

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_staged_snapshot_on_the_gpu(shipped, tmp_path):
    "Snapshots through one HostStaging: each file equals the state when taken; the second reuses the first's buffers."
    from looprl.training.trainer import build_trainer
    from looprl.training.settings import TrainSettings
    from looprl.run.workers import nested_state_digest
    l = build_trainer(shipped["huginn_raven"], TrainSettings(algorithm="grpo", precision="fp16", optimizer="adamw"),
                      device="cuda").actor
    def step():
        for p in l.opt_params: p.grad = torch.full_like(p, 1e-3)
        assert l.step()["skipped"] == 0
    staging = writer.HostStaging()
    step(); first = snapshot_file(l, staging, tmp_path / "1.pt")
    before = nested_state_digest(l.state_dict())
    assert nested_state_digest(torch.load(tmp_path / "1.pt")) == before
    step(); second = snapshot_file(l, staging, tmp_path / "2.pt")
    after = nested_state_digest(l.state_dict())
    assert after != before and nested_state_digest(torch.load(tmp_path / "2.pt")) == after   # the state moved; so did this
    assert second["master"][0].data_ptr() == first["master"][0].data_ptr()                 # in the same host buffer


def test_plan_refuses_a_disk_too_small(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(plan, "disk_free", lambda run_dir: 1000)
    code, lines = train(capsys, tmp_path / "run")
    assert code == 2 and len(lines) == 1 and "on disk and 0.0 GiB are free" in lines[0], lines
    assert not (tmp_path / "run").exists()

def test_plan_chooses_recompute_when_left_at_default(monkeypatch, capsys, tmp_path):
    "A device just large enough with recompute: the run turns it on and says so; given --micro-batch-size 16 is kept."
    from looprl.run.loop import RunOptions
    o = RunOptions.from_flat(output=str(tmp_path / "x"), updates=2, rollout_batch_size=2, max_response_tokens=6, no_eval=True)
    need = plan.make_plan(o.replaced(recompute=True), capacity={"CPU": 1}, free=1 << 40)
    cap = need.used("CPU") + 1024
    assert plan.make_plan(o, capacity={"CPU": cap}, free=1 << 40).used("CPU") > cap        # the defaults do not fit
    monkeypatch.setattr(plan, "device_capacity", lambda o: {"CPU": cap})
    code, lines = train(capsys, tmp_path / "run", "--micro-batch-size", "16")
    assert code == 0 and lines[0].startswith("looprl.train: tiny-huginn on one cpu: --recompute (plan"), lines
    assert json.loads((tmp_path / "run" / "run.json").read_text())["options"]["recompute"] is True

def test_plan_lowers_the_engine_batch_when_left_at_default(monkeypatch, capsys, tmp_path):
    """A device that holds the engine's KV cache only for half the update's completions: the run's engine gets half
    the rows (it decodes 4 at a time) and says so; its rollouts equal, byte for byte, those of a run decoding all at once (a run with another
    seed, the twin, differs)."""
    from looprl.run.loop import RunOptions
    from looprl.rollout.engine import Engine
    given = ["--algorithm", "grpo", "--recompute", "--recompute-every", "1", "--micro-batch-size", "16", "--optimizer",
             "adamw"]
    o = RunOptions.from_flat(output=str(tmp_path / "x"), updates=2, rollout_batch_size=2, max_response_tokens=6,
                             no_eval=True, recompute=True, algorithm="grpo")
    assert o.engine_rows == 8
    cap = plan.make_plan(o.replaced(engine_batch=4), capacity={"CPU": 1}, free=1 << 40).used("CPU") + 1024
    assert plan.make_plan(o, capacity={"CPU": cap}, free=1 << 40).used("CPU") > cap     # all 8 at once do not fit
    batches, real = [], Engine.generate               # the engine's rows at each update's generate call
    monkeypatch.setattr(Engine, "generate", lambda self, reqs: batches.append(self.max_batch) or real(self, reqs))
    monkeypatch.setattr(plan, "device_capacity", lambda o: {"CPU": cap})
    code, lines = train(capsys, tmp_path / "halves", *given)
    assert code == 0 and lines[0].startswith("looprl.train: tiny-huginn on one cpu: --engine-batch 4 (plan"), lines
    assert json.loads((tmp_path / "halves" / "run.json").read_text())["options"]["engine_batch"] == 4
    assert batches == [4, 4], batches
    monkeypatch.setattr(plan, "device_capacity", lambda o: {"CPU": 1 << 40})
    rollouts = lambda run: [f.read_bytes() for f in sorted((tmp_path / run / "rollouts").iterdir())]
    for run, seed in (("whole", "42"), ("twin", "43")):
        batches.clear()
        assert train(capsys, tmp_path / run, *given, "--seed", seed)[0] == 0 and batches == [8, 8], batches
    assert len(rollouts("halves")) == 2 and rollouts("halves") == rollouts("whole")
    assert all(a != b for a, b in zip(rollouts("halves"), rollouts("twin")))

@pytest.mark.parametrize("sync", [False, True])
def test_policies_are_exported_while_the_checkpoint_is_written(monkeypatch, capsys, tmp_path, sync):
    """An export does not wait for its update's checkpoint, written in the background (slowed here): at the export of
    update 2 only update 1's checkpoint is complete; with --sync-checkpoints (the twin) update 2's is complete first.
    Both end with the last checkpoint and both policies."""
    import time
    import looprl.run.loop
    from looprl.run import checkpoint_writer
    real_write = checkpoint_writer.write_state
    def slow(*a, **k):
        time.sleep(1.0); real_write(*a, **k)
    monkeypatch.setattr(checkpoint_writer, "write_state", slow)
    seen, real = [], looprl.run.loop.export_policy
    def export(pl, run_dir, update, *rest):               # the complete checkpoints at the export
        ck = run_dir / CHECKPOINTS
        seen.append((update, sorted(p.parent.name for p in ck.glob("update-*/loop.json"))))
        return real(pl, run_dir, update, *rest)
    monkeypatch.setattr(looprl.run.loop, "export_policy", export)
    out = tmp_path / "run"
    code, lines = train(capsys, out, "--updates", "2", "--export-every", "1", "--keep-checkpoints", "1",
                        *(["--sync-checkpoints"] * sync))
    assert code == 0, lines
    if sync: assert seen == [(1, ["update-000001"]), (2, ["update-000002"])], seen
    else: assert seen == [(1, []), (2, ["update-000001"])], seen          # each export beside its checkpoint's write
    assert sorted(p.name for p in (out / CHECKPOINTS).iterdir() if p.is_dir()) == ["update-000002"]
    assert sorted(p.name for p in (out / "policies").iterdir() if p.is_dir()) == ["update-000001", "update-000002"]


STORED_H100 = sorted((Path(__file__).parents[1] / "benchmarks/results/h100").glob("fit-runs-huginn-0125-grpo-*.json"))

def inspect_plan(capsys, tmp_path, *args) -> tuple[int, str, str]:
    "`python -m looprl.inspect <Huginn-0125 layout> --plan ARGS` in this process: (exit status, stdout, stderr)."
    from looprl.inspect import main as inspect_main
    model = tmp_path / "h0125"; model.mkdir(exist_ok=True)
    shutil.copy(Path(plan.__file__).parents[1] / "assets" / "configs" / "huginn-0125.json", model / "config.json")
    try: inspect_main([str(model), "--plan", "--output", str(tmp_path / "run"), *args]); code = 0
    except SystemExit as e: code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err

def test_plan_for_an_h100_from_a_host_without_one_is_the_plan_train_made_on_it(capsys, tmp_path):
    """`inspect --plan --gpu h100` on this CPU host chooses the changes and the memory plan that `train` chose on an H100
    (the stored fit run of `benchmarks/gpu/fit.sh`, whose plan then switched to SGD itself: here SGD is given). AdamW is
    refused, naming what SGD needs. Twin: the same plan for a card 2 GiB smaller differs from the stored one."""
    assert STORED_H100, "no stored H100 fit run"
    run = json.loads(STORED_H100[-1].read_text())["runs"][0]
    stored = run["looprl_lines"][0].split(" (plan ")
    argv = shlex.split(run["command"])[3:]
    given = [a for a in argv[argv.index("--algorithm"):] if a not in ("--output", "/tmp/fit/grpo-h0125")]
    card = ["--gpu", "h100", "--disk-free", f"{run['disk_free_gib_before']}", *given]
    code, out, err = inspect_plan(capsys, tmp_path, *card, "--optimizer", "sgd")
    line = out.strip().splitlines()[-1].split(" (plan ")
    assert code == 0 and line[0] == stored[0].replace(", --optimizer sgd", ""), (out, err, stored)
    assert line[1].split(";")[0] == stored[1].split(";")[0]                 # plan 77 of 79 GiB
    o = RunOptions.from_flat(model=str(tmp_path / "h0125"), output=str(tmp_path / "run"), device="cuda",
                             workers="local", algorithm="grpo", updates=3, no_eval=True, optimizer="sgd",
                             defaulted=plan.ADJUSTABLE)
    cap = {"GPU": plan.GPU_CARDS["h100"].total_memory}
    _, pl, _ = plan.fit_options(o, capacity=cap, free=1 << 40)
    assert {k: round(v / plan.GiB, 3) for k, v in pl.memory["GPU"].items()} == run["plan_gib"]
    code, out, err = inspect_plan(capsys, tmp_path, *card)
    assert code == 2 and len(err.splitlines()) == 1 and out == "", (out, err)
    assert "the largest item is actor optimizer" in err and "--optimizer sgd fits (--recompute, --engine-batch 32;" in err
    code, out, err = inspect_plan(capsys, tmp_path, *card[2:], "--gpu-memory", "77.2", "--optimizer", "sgd")
    assert code != 0 or out.strip().splitlines()[-1].split(" (plan ")[0] != stored[0].replace(", --optimizer sgd", "")

def test_plan_for_cuda_on_a_host_without_it_is_refused(capsys, tmp_path):
    "`--device cuda` on a host without CUDA and no card named: one line naming --gpu, never host memory for a GPU's."
    if torch.cuda.is_available(): pytest.skip("this host has CUDA")
    code, out, err = inspect_plan(capsys, tmp_path, "--device", "cuda", "--algorithm", "grpo")
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "--plan --gpu h100" in err, (out, err)
    code, out, err = inspect_plan(capsys, tmp_path, "--device", "cpu", "--gpu", "h100")
    assert code == 2 and "--gpu and --gpu-memory plan a CUDA run" in err, err

def test_inspect_help_documents_the_plan(capsys):
    from looprl.inspect import main as inspect_main
    with pytest.raises(SystemExit): inspect_main(["--help"])
    text = capsys.readouterr().out
    for flag in ("--plan", "--gpu", "--gpu-memory", "--disk-free", "--algorithm", "--device", "--optimizer"):
        assert flag in text, flag
