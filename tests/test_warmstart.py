"The shipped warm-started tiny Huginn, and `python -m looprl.warmstart` (deterministic, refuses a non-empty output)."
import json
from pathlib import Path
from conftest import run_cli
import torch

ROOT = Path(__file__).resolve().parents[1]
ASSET = ROOT / "looprl" / "assets" / "tiny-huginn"


def warmstart(*args):
    return run_cli("looprl.warmstart", *args)


def test_embedded_model_path():
    from looprl.warmstart import EMBEDDED_MODEL
    assert Path(EMBEDDED_MODEL).resolve() == ASSET.resolve()


def test_asset_loads_strictly_and_is_small():
    from looprl.hf import load_checkpoint, read_tensors, checkpoint_sha256
    from looprl.config import tiny_config
    files = sorted(p.name for p in ASSET.iterdir())
    assert files == ["config.json", "model.safetensors", "tokenizer.json", "warmstart.json"]
    size = sum(p.stat().st_size for p in ASSET.iterdir())
    assert size < 5 * 2**20, size
    m = load_checkpoint(ASSET)                                   # strict: names, shapes, tied alias, freqs_cis
    assert m.cfg == tiny_config("huginn_raven")
    assert (m.cfg.vocab_size, m.cfg.n_prelude, m.cfg.n_core, m.cfg.n_coda, m.cfg.depth) == (1024, 2, 4, 2, 4)
    t = read_tensors(ASSET)
    assert t["transformer.adapter.weight"].dtype == torch.float16 and t["freqs_cis"].dtype == torch.float32
    rec = json.loads((ASSET / "warmstart.json").read_text())
    assert rec["model_sha256"] == checkpoint_sha256(ASSET)
    assert rec["command"].startswith("python -m looprl.warmstart looprl/assets/tiny-huginn")
    ev = rec["evaluation"]
    assert 0.2 <= ev["sampled_accuracy"] <= 0.7 and ev["temperature"] == 0.8
    assert rec["total_s"] <= 600


def test_asset_tokenizer_matches_data():
    from tokenizers import Tokenizer
    from looprl.data import build_char_tokenizer, TINY_ALPHABET, encode_prompt
    shipped = Tokenizer.from_file(str(ASSET / "tokenizer.json"))
    ref = build_char_tokenizer(TINY_ALPHABET)
    assert shipped.get_vocab() == ref.get_vocab()
    assert encode_prompt(shipped, "What is 3 + 4?") == encode_prompt(ref, "What is 3 + 4?")


def test_three_steps_deterministic(tmp_path):
    from looprl.hf import read_tensors
    a, b = warmstart(tmp_path / "a", "--steps", 3, "--no-evaluate"), warmstart(tmp_path / "b", "--steps", 3, "--no-evaluate")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    ra, rb = json.loads(a.stdout), json.loads(b.stdout)
    assert ra["final_loss"] == rb["final_loss"] and ra["model_sha256"] == rb["model_sha256"]
    ta, tb = read_tensors(tmp_path / "a"), read_tensors(tmp_path / "b")
    assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
    assert ra["command"] == f"python -m looprl.warmstart {tmp_path / 'a'} --steps 3 --seed 0"
    assert ra["evaluation"] is None


def test_other_seed_differs(tmp_path):
    from looprl.warmstart import warmstart as ws
    m0, l0 = ws(steps=2, batch_size=4, seed=0)
    m1, l1 = ws(steps=2, batch_size=4, seed=1)
    assert not torch.equal(m0.transformer.adapter.weight, m1.transformer.adapter.weight)


def test_refuses_non_empty_output(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    r = warmstart(tmp_path, "--steps", 1, "--no-evaluate")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [f"{tmp_path}: exists and is not empty; refusing to overwrite it"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_refuses_bad_steps(tmp_path):
    r = warmstart(tmp_path / "o", "--steps", 0)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "--steps" in r.stderr
    assert not (tmp_path / "o").exists()
