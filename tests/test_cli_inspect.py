"`python -m looprl.inspect` in a subprocess: published parameter counts, layouts, and bad input (exit 2, one line)."
import functools, json
from pathlib import Path
from conftest import run_cli
import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "looprl" / "assets" / "configs"


def inspect(*args):
    return run_cli("looprl.inspect", *args)


@functools.cache
def inspect_real(name):
    return inspect(CONFIGS / name)


@pytest.mark.parametrize("name,family,actor,critic,planes,depth_key,depth,precision,nkeys", [
    ("huginn-0125.json", "huginn_raven", 3_564_976_800, 3_564_976_800 + 5280, 132, "mean_recurrence", 32, "fp16", 77),
    ("ouro-1.4b.json", "ouro", 1_434_652_673, 1_434_652_673 - (49152 - 1) * 2048, 96, "total_ut_steps", 4, "fp32", 269),
    ("nanbeige4.2-3b.json", "nanbeige", 4_169_800_704, 3_659_409_408, 44, "num_loops", 2, "fp32", 201),
])
def test_real_configs(name, family, actor, critic, planes, depth_key, depth, precision, nkeys):
    r = inspect_real(name)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    raw = json.loads((CONFIGS / name).read_text())
    assert info["family"] == family
    assert info["params_actor"] == actor == raw["_facts"]["unique_parameters"]
    assert info["params_critic"] == critic
    assert (info["kv_planes"], info["depth_key"], info["depth"]) == (planes, depth_key, depth)
    assert info["default_precision"] == precision
    assert info["revision"] == raw["_revision"]
    assert len(info["keys"]) == nkeys and info["weights"] is None
    assert all(isinstance(s, list) and all(isinstance(d, int) for d in s) for s in info["keys"].values())


def test_layout_details():
    info = json.loads(inspect_real("huginn-0125.json").stdout)
    k = info["keys"]
    assert k["transformer.core_block.0.attn.Wqkv.weight"] == [15840, 5280]
    assert k["freqs_cis"] == [1, 4096, 1, 48, 2]
    assert k["lm_head.weight"] == k["transformer.wte.weight"] == [65536, 5280]
    nan = json.loads(inspect_real("nanbeige4.2-3b.json").stdout)["keys"]
    assert nan["model.layers.0.self_attn.k_proj.weight"] == [1024, 3072] and "value_head.weight" not in nan


def test_directory_forms(tmp_path):
    "A directory with only config.json gives the same answer as the file."
    (tmp_path / "config.json").write_text((CONFIGS / "ouro-1.4b.json").read_text())
    a, b = inspect(tmp_path), inspect_real("ouro-1.4b.json")
    assert a.returncode == 0 and json.loads(a.stdout) == json.loads(b.stdout)


def test_checkpoint_with_weights(tmp_path):
    import torch
    from looprl.model.config import tiny_config
    from looprl.model.models import build_model, init_weights
    from looprl.model.hf import save_checkpoint, read_tensors, write_tensors
    ck = save_checkpoint(init_weights(build_model(tiny_config("nanbeige")), seed=0), tmp_path / "ck")
    r = inspect(ck)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["weights"] == {"files": ["model.safetensors"], "tensors": len(info["keys"]), "dtypes": ["F32"]}
    t = read_tensors(ck)
    t["model.norm.weight"] = torch.ones(7)
    write_tensors(t, ck)
    r = inspect(ck)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == f"looprl.inspect: {ck}: tensor model.norm.weight in model.safetensors has shape [7], expected [128]"


def _bad(tmp_path, text, name="config.json"):
    (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("case,expect", [
    ("missing", "no such file"),
    ("empty_dir", "config.json: no such file"),
    ("not_json", "invalid JSON at line 1"),
    ("not_object", "expected a JSON object"),
    ("llama", "unknown model_type 'llama'"),
    ("no_depth", "missing key 'num_loops'"),
    ("wrong_type", "key 'hidden_size' must be int"),
    ("zero_layers", "key 'num_hidden_layers' must be ≥ 1"),
    ("pickle_only", "only pickle weights found"),
])
def test_bad_input(tmp_path, case, expect):
    nan = json.loads((CONFIGS / "nanbeige4.2-3b.json").read_text())
    path = {
        "missing": lambda: tmp_path / "nowhere",
        "empty_dir": lambda: tmp_path,
        "not_json": lambda: _bad(tmp_path, "{ oops"),
        "not_object": lambda: _bad(tmp_path, "[1, 2]") / "config.json",
        "llama": lambda: _bad(tmp_path, json.dumps({"model_type": "llama"})),
        "no_depth": lambda: _bad(tmp_path, json.dumps({k: v for k, v in nan.items() if k != "num_loops"})),
        "wrong_type": lambda: _bad(tmp_path, json.dumps({**nan, "hidden_size": "3072"})),
        "zero_layers": lambda: _bad(tmp_path, json.dumps({**nan, "num_hidden_layers": 0})),
        "pickle_only": lambda: (_bad(tmp_path, json.dumps(nan)), (tmp_path / "pytorch_model.bin").write_bytes(b"x"), tmp_path)[-1],
    }[case]()
    r = inspect(path)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("looprl.inspect: ") and expect in lines[0] and str(tmp_path) in lines[0], r.stderr


def test_usage_error():
    r = inspect()
    assert r.returncode == 2 and r.stderr == "looprl.inspect: the following arguments are required: path\n"
