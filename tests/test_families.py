"""The family registry from outside: a family that only an installed entry point names is known to every command in a new
process (make_tiny, inspect, verify, train), and without the entry point, or with a broken one, each command refuses it in
one line. Nothing in looprl is edited or patched."""
import json, os, subprocess, sys
from pathlib import Path
import pytest
from looprl.model.registry import Family, FamilyError, family_names, get_family, register, unregister

PLUGINS = Path(__file__).parent / "plugins"

def plugin_path(tmp_path, entry: str | None) -> str:
    "A PYTHONPATH holding the plugin module and, if `entry`, a distribution whose entry point group looprl.families names it."
    site = tmp_path / "site"
    if entry is not None:
        info = site / "loopllama_plugin-0.1.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: loopllama-plugin\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[looprl.families]\nloopllama = {entry}\n")
    site.mkdir(parents=True, exist_ok=True)
    return os.pathsep.join([str(site), str(PLUGINS)] + [p for p in [os.environ.get("PYTHONPATH")] if p])

def looprl(cmd: list, pythonpath: str, timeout=300):
    env = {**os.environ, "PYTHONPATH": pythonpath, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", *cmd], capture_output=True, text=True, env=env, timeout=timeout)

def test_entry_point_family_works_in_every_command(tmp_path):
    path, ck = plugin_path(tmp_path, "loopllama_family:FAMILY"), tmp_path / "tiny-loopllama"
    p = looprl(["looprl.make_tiny", str(ck), "--family", "loopllama", "--seed", "1"], path)
    assert p.returncode == 0, p.stderr
    assert json.loads((ck / "config.json").read_text())["model_type"] == "loopllama"
    p = looprl(["looprl.inspect", str(ck)], path)
    assert p.returncode == 0 and "loopllama" in p.stdout and "loop_count" in p.stdout, p.stdout + p.stderr
    p = looprl(["looprl.verify", str(ck), "--samples", "4", "--max-response-tokens", "8", "--temperature", "0.8"], path)
    assert p.returncode == 0, p.stdout + p.stderr
    report = json.loads(p.stdout)
    assert report["family"] == "loopllama" and report["depth_key"] == "loop_count" and report["max_abs_logprob_diff"] <= 3e-6
    out = tmp_path / "run"
    p = looprl(["looprl.train", "--model", str(ck), "--output", str(out), "--updates", "2", "--algorithm", "grpo", "--workers", "local",
                "--reward", "looprl.tasks.rewards:even_token_share", "--no-eval", "--no-progress", "--rollout-batch-size", "4",
                "--max-response-tokens", "8"], path, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    ups = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if json.loads(l).get("kind") == "update"]
    assert len(ups) == 2 and all(u["grad_norm"] > 0 for u in ups) and ups[0]["digest"] != ups[1]["digest"]   # it learned something

def test_without_or_with_a_broken_entry_point_commands_refuse_in_one_line(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_text(json.dumps({"model_type": "loopllama"}))
    p = looprl(["looprl.inspect", str(ck)], plugin_path(tmp_path / "none", None))
    assert p.returncode == 2 and "unknown model_type 'loopllama'" in p.stderr and "Traceback" not in p.stderr, p.stderr
    p = looprl(["looprl.inspect", str(ck)], plugin_path(tmp_path / "broken", "loopllama_family:NO_SUCH_NAME"))
    assert p.returncode == 2 and "entry point 'loopllama'" in p.stderr and "Traceback" not in p.stderr, p.stderr

def test_registration_is_checked_and_reversible():
    nanbeige = get_family("nanbeige")
    with pytest.raises(FamilyError, match="already registered"): register(nanbeige)
    twin = Family(**{**vars(nanbeige), "name": "nanbeige-twin", "tiny": {**nanbeige.tiny, "model_type": "nanbeige-twin"}})
    with pytest.raises(FamilyError, match="preset 'nanbeige4.2-3b' belongs to 'nanbeige'"): register(twin)
    twin = Family(**{**vars(twin), "presets": {}})
    register(twin)
    try: assert family_names()[-1] == "nanbeige-twin"
    finally: unregister("nanbeige-twin")
    assert "nanbeige-twin" not in family_names()
