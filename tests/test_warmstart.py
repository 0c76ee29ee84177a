"The shipped warm-started tiny models, and `python -m looprl.warmstart` (deterministic, refuses a non-empty output)."
import json
from pathlib import Path
import pytest
import torch
from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "looprl" / "assets"
DIRS = {"huginn_raven": "tiny-huginn", "ouro": "tiny-ouro", "nanbeige": "tiny-nanbeige", "hrm_text": "tiny-hrm-text"}

def warmstart(*args):
    return run_cli("looprl.warmstart", *args)

def test_embedded_model_paths():
    from looprl.warmstart import EMBEDDED_MODEL, EMBEDDED_MODELS
    assert Path(EMBEDDED_MODEL).resolve() == (ASSETS / "tiny-huginn").resolve()
    assert {f: Path(p).resolve() for f, p in EMBEDDED_MODELS.items()} == {f: (ASSETS / d).resolve() for f, d in DIRS.items()}

@pytest.mark.parametrize("family", DIRS)
def test_asset_loads_strictly_generalises_and_is_small(family):
    from looprl.model.hf import load_checkpoint, read_tensors, checkpoint_sha256
    from looprl.model.config import tiny_config
    from looprl.tasks.data import file_sha256, WARMSTART_DATA, HELDOUT_DATA
    d = ASSETS / DIRS[family]
    assert sorted(p.name for p in d.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json", "warmstart.json"]
    assert sum(p.stat().st_size for p in d.iterdir()) < 5 * 2**20
    m = load_checkpoint(d)                                                      # strict: names, shapes, aliases, buffers
    assert m.cfg == tiny_config(family)
    rec = json.loads((d / "warmstart.json").read_text())
    assert rec["model_sha256"] == checkpoint_sha256(d) and rec["family"] == family
    assert rec["command"].startswith(f"python -m looprl.warmstart looprl/assets/{DIRS[family]} --family {family}")
    assert rec["data"]["warmstart"]["sha256"] == file_sha256(WARMSTART_DATA) and rec["data"]["heldout"]["sha256"] == file_sha256(HELDOUT_DATA)
    assert rec["reached_target"] is True
    h = rec["heldout"]["fp32"]
    assert h["questions"] == 512 and h["samples"] == 4 and h["temperature"] == 0.8
    assert h["greedy_accuracy"] >= 0.4 and h["sampled_accuracy"] < h["greedy_accuracy"]       # it generalises, and RL has room
    assert t_dtype(d) == torch.float16

def t_dtype(d):
    from looprl.model.hf import read_tensors
    return next(v.dtype for k, v in read_tensors(d).items() if k != "freqs_cis")

def test_shipped_accuracy_is_measured_again(shipped):
    "Re-measured now on the first 64 held-out questions, greedy: the same answers the record's evaluation saw."
    from looprl.run.evaluation import evaluate_model, EvalSpec
    r = evaluate_model(shipped["huginn_raven"], limit=64, spec=EvalSpec(samples=0), precision="fp32")
    assert 0.3 <= r["greedy_accuracy"] <= 0.8, r

def test_asset_tokenizer_matches_data():
    from tokenizers import Tokenizer
    from looprl.tasks.data import build_char_tokenizer, TINY_ALPHABET, encode_prompt
    for d in DIRS.values():
        shipped = Tokenizer.from_file(str(ASSETS / d / "tokenizer.json"))
        assert shipped.get_vocab() == build_char_tokenizer(TINY_ALPHABET).get_vocab()
        assert encode_prompt(shipped, "07+48=") == encode_prompt(build_char_tokenizer(TINY_ALPHABET), "07+48=")

def test_three_steps_deterministic(tmp_path):
    from looprl.model.hf import read_tensors
    a = warmstart(tmp_path / "a", "--max-steps", 3, "--no-target", "--no-eval")
    b = warmstart(tmp_path / "b", "--max-steps", 3, "--no-target", "--no-eval")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    ra, rb = json.loads(a.stdout), json.loads(b.stdout)
    assert ra["final_loss"] == rb["final_loss"] and ra["model_sha256"] == rb["model_sha256"]
    ta, tb = read_tensors(tmp_path / "a"), read_tensors(tmp_path / "b")
    assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
    assert ra["command"] == f"python -m looprl.warmstart {tmp_path / 'a'} --family huginn_raven --max-steps 3 --seed 0 --no-target"
    assert ra["heldout"] is None

def test_other_seed_and_family(tmp_path):
    from looprl.warmstart import warmstart as ws
    m0, _ = ws(max_steps=2, batch_size=4, seed=0, target=None)
    m1, _ = ws(max_steps=2, batch_size=4, seed=1, target=None)
    assert not torch.equal(m0.transformer.adapter.weight, m1.transformer.adapter.weight)
    r = warmstart(tmp_path / "n", "--family", "nanbeige", "--max-steps", 2, "--no-target", "--no-eval")
    assert r.returncode == 0 and json.loads(r.stdout)["family"] == "nanbeige", r.stderr

def test_refuses_non_empty_output(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    r = warmstart(tmp_path, "--max-steps", 1, "--no-eval")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [f"looprl.warmstart: {tmp_path}: exists and is not empty; refusing to overwrite it"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]

@pytest.mark.parametrize("args,needle", [(["--max-steps", 0], "--max-steps"), (["--family", "gpt2"], "unknown model family 'gpt2'"),
                                         (["--stpes", 3], "unrecognized arguments")])
def test_refuses_bad_arguments(tmp_path, args, needle):
    r = warmstart(tmp_path / "o", *args)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and r.stderr.startswith("looprl.warmstart: ") and needle in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()
