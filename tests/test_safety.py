"""Runs that must stop, and exported policies: an FP16 run whose steps keep overflowing stops with one line and its
last good checkpoint intact; a reward function that raises stops the run naming it; every run exports its policy
as a native checkpoint that --model, looprl.eval, looprl.verify and looprl.inspect take."""
import json
import pytest
from conftest import run_cli, updates, said_lines, PLUGINS

def test_fp16_overflow_stops_after_k_skipped_steps(shipped, arithmetic, tmp_path):
    out = tmp_path / "run"
    r = run_cli("looprl.train", "--model", shipped["huginn_raven"], "--data", arithmetic, "--output", out, "--algorithm", "grpo",
                "--precision", "fp16", "--loss-scale", "1e30", "--max-skipped-steps", "3", "--updates", "5", "--max-response-tokens", "6",
                "--no-eval", "--no-progress")
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = said_lines(r.stderr)
    assert lines == ["looprl.train: update 1: 4 consecutive optimizer steps skipped (FP16 gradients overflowed at loss scale 1e+30); "
                     "stopping. The last good checkpoint is update-000001"], r.stderr
    assert (out / "checkpoints" / "latest").read_text().strip() == "update-000001"
    assert [(u["update"], u["skipped_steps"], u["consecutive_skipped_steps"]) for u in updates(out)] == [(0, 2, 2), (1, 4, 4)]      # two optimizer steps an update

def test_a_raising_reward_stops_the_run_naming_it(shipped, arithmetic, tmp_path):
    out = tmp_path / "run"
    r = run_cli("looprl.train", "--model", shipped["huginn_raven"], "--data", arithmetic, "--output", out, "--algorithm", "grpo",
                "--precision", "fp32", "--reward", f"{PLUGINS / 'rng_reward.py'}:broken_reward", "--updates", "3",
                "--max-response-tokens", "6", "--no-eval", "--no-progress")
    assert r.returncode == 1
    lines = said_lines(r.stderr)
    assert len(lines) == 1 and "broken_reward raised ValueError: cannot score a 7" in lines[0] and lines[0].startswith("looprl.train: update "), r.stderr

@pytest.fixture(scope="module")
def exported(shipped, arithmetic, tmp_path_factory):
    run = tmp_path_factory.mktemp("export") / "run"
    r = run_cli("looprl.train", "--model", shipped["huginn_raven"], "--data", arithmetic, "--output", run, "--algorithm", "grpo",
                "--precision", "fp32", "--optimizer", "adamw", "--lr", "1e-4", "--updates", "2", "--export-every", "1",
                "--max-response-tokens", "6", "--no-eval", "--no-progress")
    assert r.returncode == 0, r.stderr
    return run

def test_exports_are_native_checkpoints(exported, shipped):
    from looprl.model.hf import load_checkpoint, read_tensors
    from looprl.core.state import latest_policy
    assert sorted(p.name for p in (exported / "policies").glob("update-*")) == ["update-000001", "update-000002"]
    d = latest_policy(exported)
    assert d.name == "update-000002"
    assert sorted(p.name for p in d.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    t = read_tensors(d)
    assert "lm_head.weight" in t and "transformer.wte.weight" in t and "freqs_cis" in t       # Huginn's aliases and RoPE buffer
    load_checkpoint(d)                                                                     # strict: names, shapes, alias, freqs_cis
    from looprl.model.hf import state_digest
    ups = updates(exported)        # the export after update k holds what version k + 1 publishes
    assert state_digest(read_tensors(exported / "policies" / "update-000001")) == ups[1]["digest"] != ups[0]["digest"]

def test_export_feeds_eval_verify_inspect_and_train(exported, arithmetic, tmp_path):
    r = run_cli("looprl.eval", exported, "--eval-limit", "16", "--eval-samples", "2", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["model"].endswith("policies/update-000002") and rep["questions"] == 16
    d = exported / "policies" / "update-000002"
    r = run_cli("looprl.verify", d, "--samples", "16", "--temperature", "0.8", "--max-response-tokens", "8"); assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["max_abs_logprob_diff"] <= 3e-6
    r = run_cli("looprl.inspect", d); assert r.returncode == 0 and "huginn_raven" in r.stdout, r.stderr
    r = run_cli("looprl.train", "--model", d, "--data", arithmetic, "--output", tmp_path / "again", "--algorithm", "grpo", "--updates", "1",
                "--precision", "fp32", "--max-response-tokens", "6", "--no-eval", "--no-progress")
    assert r.returncode == 0, r.stderr
