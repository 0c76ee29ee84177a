"""Asynchronous runs (--async, looprl.run.pipeline): resume equality of 3 updates vs --stop-after 2 then --resume, for the
four algorithms on Huginn and GRPO on Ouro and Nanbeige, with a sabotage twin (the pending rollout left fresh); the
policy lag and Decoupled PPO's behaviour correction; the engine in a process of its own sampling what the engine in
a thread samples, with a sabotage twin (rounded weights reach the process); refusals. One resume runs in a fresh process through the command
line; the other runs run in this process (each run seeds and restores every generator it uses), to keep CI time short."""
import json, shutil
import pytest, torch
from conftest import run_cli, assert_changing, updates
from looprl.run import loop as L, options as O, workers as W
from looprl.compare import compare_runs
from looprl.train import main as train_main

FAST = dict(max_response_tokens=6, no_eval=True, updates=3, async_=True, precision="fp32")
# (family, algorithm, optimizer and learning rate): each learns visibly in 3 updates
CASES = [("huginn_raven", "grpo", "adamw", 1e-4), ("huginn_raven", "ppo", "adamw", 1e-4), ("huginn_raven", "dppo", "adamw", 3e-3),
         ("huginn_raven", "flow-dppo", "adamw", 1e-4), ("ouro", "grpo", "sgd", 1e-2), ("nanbeige", "grpo", "sgd", 1e-2)]

def settings(family, algorithm, optimizer, lr, shipped, data) -> dict:
    return dict(model=str(shipped[family]), data=str(data), algorithm=algorithm, optimizer=optimizer, lr=lr,
                rollout_batch_size=4, **FAST)

def straight_and_resumed(s: dict, root) -> tuple:
    "An uninterrupted run and a run stopped after 2 updates then resumed, both in this process."
    a, b = root / "straight", root / "stopped"
    L.run(O.RunOptions.from_flat(str(a), **s), progress=False)
    L.run(O.RunOptions.from_flat(str(b), stop_after=2, **s), progress=False)
    assert len(updates(b)) == 2
    L.run(O.options_for_resume(str(b), {}), progress=False)
    return a, b

@pytest.mark.parametrize("family,algorithm,optimizer,lr", CASES[1:], ids=[f"{f}-{a}" for f, a, _, _ in CASES[1:]])
def test_async_resume_equals_uninterrupted(shipped, arithmetic, tmp_path, family, algorithm, optimizer, lr):
    a, b = straight_and_resumed(settings(family, algorithm, optimizer, lr, shipped, arithmetic), tmp_path)
    assert_changing(a)
    rep = compare_runs(a, b)
    assert rep["equal"], rep["verdict"]
    rows = {r["field"]: r["status"] for r in rep["fields"]}
    assert rows["pending_rollout"] == "equal"                                   # compared, not n/a
    ua = updates(a)
    assert [x["policy_lag"] for x in ua] == [0, 1, 1]
    versions = [json.loads((a / "rollouts" / f"update-{u:06d}.json").read_text())["completions"][0]["policy_version"] for u in range(3)]
    assert versions == [1, 1, 2]                                                # rollout u+1 sampled under update u's publication
    if algorithm == "dppo":                                                     # stale data: the behaviour correction is at work
        for x in ua[1:]: assert x["dppo_w_mean"] != 1 and 0 < x["dppo_w_clipfrac"] < 1, x
        # no lag at the first update: 1 within FP32 rounding (the replay has the training forward's arithmetic, the
        # --async default), exactly 1 with the engine's (--replay engine)
        assert abs(ua[0]["dppo_w_mean"] - 1) < 1e-5 and ua[0]["dppo_w_clipfrac"] == 0
        e = tmp_path / "engine-arithmetic"
        L.run(O.RunOptions.from_flat(str(e), **{**settings(family, algorithm, optimizer, lr, shipped, arithmetic),
                                                "updates": 1, "replay": "engine"}), progress=False)
        assert updates(e)[0]["dppo_w_mean"] == 1 and updates(e)[0]["parity_max"] == 0

def test_async_resume_in_a_fresh_process_and_its_sabotage_twin(shipped, arithmetic, tmp_path, monkeypatch):
    "GRPO on Huginn, resumed through the command line in a fresh process; a resume that does not restore the pending rollout is reported on its field."
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    s = settings(*CASES[0], shipped, arithmetic)
    L.run(O.RunOptions.from_flat(str(a), **s), progress=False)
    L.run(O.RunOptions.from_flat(str(b), stop_after=2, **s), progress=False)
    shutil.copytree(b, c)
    r = run_cli("looprl.train", "--output", b, "--resume", "--no-progress"); assert r.returncode == 0, r.stderr
    monkeypatch.setenv("LOOPRL_SKIP_RESTORE", "pending")
    L.run(O.options_for_resume(str(c), {}), progress=False)
    assert_changing(a)
    assert [x["policy_lag"] for x in updates(a)] == [0, 1, 1]
    ok = compare_runs(a, b); assert ok["equal"], ok["verdict"]
    bad = compare_runs(a, c)
    fields = {f["field"]: f["status"] for f in bad["fields"]}
    assert not bad["equal"] and fields["pending_rollout"] == "different", fields

def test_sync_and_async_checkpoints_do_not_mix(shipped, arithmetic, tmp_path, capsys):
    "A synchronous run resumed with --async is refused in one line, exit 2, and so is an asynchronous run resumed synchronously."
    s = dict(settings("huginn_raven", "grpo", "sgd", 1e-2, shipped, arithmetic), updates=2, async_=False)
    sync, asyn = tmp_path / "sync", tmp_path / "async"
    L.run(O.RunOptions.from_flat(str(sync), stop_after=1, **s), progress=False)
    before = sorted(p.name for p in sync.rglob("*")); capsys.readouterr()       # the run's own progress lines
    with pytest.raises(SystemExit) as e: train_main(["--output", str(sync), "--resume", "--async", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and "async: run has False, requested True" in err, err
    assert sorted(p.name for p in sync.rglob("*")) == before                   # nothing written
    L.run(O.RunOptions.from_flat(str(asyn), stop_after=1, **{**s, "async_": True}), progress=False)
    with pytest.raises(O.UsageError, match="async: run has True, requested False"):
        L.run(O.options_for_resume(str(asyn), {"async_": False}), progress=False)

def test_unsupported_combinations_are_refused(tmp_path):
    "Refused by the options (one line, exit status 2 on the command line, before any work; see the test above for the line)."
    for flags, message in ((dict(backend="megatron"), "--async: not supported with --backend megatron"),
                           (dict(engine="vllm"), "--async: not supported with --engine vllm"),
                           (dict(trainer_processes=2, micro_batch_size=4), "--async: not supported with --trainer-processes 2")):
        with pytest.raises(O.UsageError, match=message): O.RunOptions.from_flat(str(tmp_path / "r"), async_=True, **flags).validate()
        if "backend" not in flags: O.RunOptions.from_flat(str(tmp_path / "r"), **flags).validate()   # the same options run synchronously

def test_engine_process_samples_what_the_engine_thread_samples_and_its_sabotage_twin(shipped, arithmetic, tmp_path, monkeypatch):
    """--async on the CPU: the engine in a process of its own (the default) gives the run of the engine in a thread of
    the trainer's process (--engine-thread), field by field; weight matrices rounded to BF16 on their way to the process are seen."""
    s = settings(*CASES[0], shipped, arithmetic)
    thread, proc, rounded = tmp_path / "thread", tmp_path / "process", tmp_path / "rounded"
    calls, real = [], W.WorkerProcess.start
    def spy(self, method, *args):
        calls.append(method); return real(self, method, *args)
    monkeypatch.setattr(W.WorkerProcess, "start", spy)
    L.run(O.RunOptions.from_flat(str(thread), engine_thread=True, **s), progress=False)
    assert calls == []                                                          # --engine-thread: no engine process
    L.run(O.RunOptions.from_flat(str(proc), **s), progress=False)
    assert calls.count("generate") == 4 and calls.count("publish") == 3, calls   # the default: every rollout sampled there
    assert_changing(thread)
    ok = compare_runs(thread, proc); assert ok["equal"], ok["verdict"]
    def bf16(self, method, *args):
        if method == "publish":
            t = {n: x.to(torch.bfloat16).to(x.dtype) if n.endswith(".weight") else x for n, x in args[1]["tensors"].items()}
            args = (args[0], dict(tensors=t, digest=None))
        return real(self, method, *args)
    monkeypatch.setattr(W.WorkerProcess, "start", bf16)
    L.run(O.RunOptions.from_flat(str(rounded), **s), progress=False)
    bad = compare_runs(thread, rounded)
    fields = {f["field"]: f["status"] for f in bad["fields"]}
    assert not bad["equal"] and fields["pending_rollout"] == "different", fields
