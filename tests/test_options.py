"""The settings are declared once (looprl.run.options): the trainer and the engine see the same defaults, the command line
keeps every flag it had, and a run directory written before the settings were split resumes and equals a new run."""
import json, shutil
from dataclasses import asdict
from pathlib import Path
import pytest
from looprl.run import loop as L, options as O
from looprl.core import state as S
from looprl.compare import compare_runs
from looprl.train import parser

FIXTURE = Path(__file__).parent / "fixtures" / "run-json-before-options.json"

# Every flag `python -m looprl.train --help` offered before the command line was generated from the settings.
FLAGS_BEFORE = """algorithm model data output updates recompute stop-after resume model-revision engine-revision precision
rollout-batch-size n-samples-per-prompt max-prompt-tokens max-response-tokens temperature optimizer lr warmup-steps
minibatches entropy-coef micro-batch-size loss-scale max-skipped-steps seed reward eval-data eval-every eval-samples
eval-limit no-eval export-every device cuda-graphs engine workers ray-address train-env-vars transport threads
trainer-processes tensor-parallel backend distributed-optimizer keep-checkpoints checkpoint-every no-progress""".split()

def test_every_flag_kept():
    flags = {s.lstrip("-") for a in parser()._actions for s in a.option_strings}
    assert set(FLAGS_BEFORE) <= flags, sorted(set(FLAGS_BEFORE) - flags)
    helps = {a.dest: a.help for a in parser()._actions}
    assert helps["temperature"].startswith("sampling temperature") and helps["temperature"].endswith("(default 0.8)")
    assert helps["lr"] == "learning rate after warm-up (default 5e-05)"          # the comment beside the field, with its default

def test_one_default_per_setting(tmp_path):
    "The default options, prepared: the trainer's settings and the engine's requests carry the same values."
    p = L.prepare(O.RunOptions(str(tmp_path / "r"), eval_limit=4))
    o = p.opts
    reqs = L.generate_requests(p, 0, [0, 1])
    assert {r.temperature for r in reqs} == {o.rollout.temperature} == {0.8}
    assert {r.max_new_tokens for r in reqs} == {o.rollout.max_response_tokens}
    assert p.contract["rollout"]["temperature"] == o.rollout.temperature and "temperature" not in asdict(p.settings)
    # the trainer gets the options' own dataclass, with the device's defaults resolved (the CPU: FP32, eager blocks) and
    # the replay's arithmetic (the engine's without --async, the training forward's with it)
    assert asdict(p.settings) == {**asdict(o.trainer), "precision": "fp32", "compile_blocks": False, "replay": "engine"}
    assert L.prepare(O.RunOptions(str(tmp_path / "a"), eval_limit=4, async_=True)).settings.replay == "training"
    assert (o.trainer.optimizer, o.trainer.lr, o.trainer.warmup_steps, o.trainer.minibatches, o.trainer.micro_batch_size) == \
        ("adamw", 5e-5, 10, 2, 16)                                                  # the measured recipe, declared once
    names = list(O.setting_fields())
    assert len(names) == len(set(names))

def _old_layout(new_run: Path) -> str:
    "The stored run.json of a run written before the split, with this machine's paths and fingerprints."
    old, new = json.loads(FIXTURE.read_text()), json.loads((new_run / "run.json").read_text())
    for k in ("looprl", "environment", "model", "data"): old["contract"][k] = new["contract"][k]
    # the reward keeps its stored name, from before the tasks layer; its source digest is of today's file
    assert old["contract"]["reward"]["spec"] == old["options"]["reward"] == "looprl.rewards:math_reward"
    old["contract"]["reward"]["source_sha256"] = new["contract"]["reward"]["source_sha256"]
    for k in ("model", "data"): old["options"][k] = new["options"][k]
    assert "temperature" in old["contract"]["settings"] and "momentum" not in old["options"]   # really the old layout
    return json.dumps(old)

def test_old_run_directory_resumes(tmp_path, monkeypatch):
    common = dict(algorithm="grpo", updates=2, rollout_batch_size=4, no_eval=True)
    L.run(O.RunOptions.from_flat(str(tmp_path / "straight"), **common), progress=False)
    L.run(O.RunOptions.from_flat(str(tmp_path / "old"), stop_after=1, **common), progress=False)
    (tmp_path / "old" / "run.json").write_text(_old_layout(tmp_path / "old"))
    shutil.copytree(tmp_path / "old", tmp_path / "twin")
    L.run(O.options_for_resume(str(tmp_path / "old"), {}), progress=False)
    report = compare_runs(tmp_path / "old", tmp_path / "straight")
    assert report["equal"], report["verdict"]
    assert len({l["digest"] for l in S.read_metrics(tmp_path / "straight")}) == 2     # the weights changed between updates
    # the twin: without the upgrade of the stored contract the old run is refused, naming the moved setting
    monkeypatch.setattr(S, "upgrade_contract", lambda c: c)
    with pytest.raises(O.UsageError, match="settings.temperature"):
        L.run(O.options_for_resume(str(tmp_path / "twin"), {}), progress=False)

def test_run_naming_its_reward_by_an_old_module_resumes(tmp_path, monkeypatch):
    "A run stored before the tasks layer names its reward `looprl.rewards:math_reward`; it resumes, equal to a straight run."
    common = dict(algorithm="grpo", updates=2, rollout_batch_size=4, no_eval=True)
    L.run(O.RunOptions.from_flat(str(tmp_path / "straight"), **common), progress=False)
    L.run(O.RunOptions.from_flat(str(tmp_path / "old"), stop_after=1, **common), progress=False)
    f = tmp_path / "old" / "run.json"
    stored = json.loads(f.read_text())
    assert stored["contract"]["reward"]["spec"] == stored["options"]["reward"] == "looprl.tasks.rewards:math_reward"
    stored["contract"]["reward"]["spec"] = stored["options"]["reward"] = "looprl.rewards:math_reward"
    f.write_text(json.dumps(stored))
    shutil.copytree(tmp_path / "old", tmp_path / "twin")
    L.run(O.options_for_resume(str(tmp_path / "old"), {}), progress=False)
    report = compare_runs(tmp_path / "old", tmp_path / "straight")
    assert report["equal"], report["verdict"]
    assert json.loads(f.read_text())["contract"]["reward"]["spec"] == "looprl.rewards:math_reward"   # stored as it was
    # the twin: without the contract's upgrade the old run is refused, naming the reward's spec
    monkeypatch.setattr(S, "upgrade_reward_spec", lambda spec: spec)
    with pytest.raises(O.UsageError, match="reward.spec: run has 'looprl.rewards:math_reward'"):
        L.run(O.options_for_resume(str(tmp_path / "twin"), {}), progress=False)
