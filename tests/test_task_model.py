"""Task models (`python -m looprl.warmstart OUT --preset small|mid`) and their learning benchmark: the same code path as
the GPU's mid preset at the small preset's width, on the CPU; every bad input one line, exit 2, nothing written."""
import json
from pathlib import Path
import pytest
from conftest import run_cli

def warmstart(*args):
    return run_cli("looprl.warmstart", *args)

def one_line_refusal(r, says: str):
    "A refusal: exit 2, one stderr line naming the problem, no traceback."
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("looprl.warmstart: ") and says in lines[0], lines[0]

@pytest.fixture(scope="module")
def small(tmp_path_factory):
    "A small task model after 10 supervised steps, evaluated on its held-out split, and its directory."
    out = tmp_path_factory.mktemp("task") / "small"
    r = warmstart(out, "--preset", "small", "--max-steps", "10")
    assert r.returncode == 0, r.stderr
    return out

def test_the_directory_is_a_checkpoint_with_its_tokenizer_splits_and_record(small):
    from looprl.model.hf import checkpoint_sha256, load_checkpoint
    from looprl.tasks.data import file_sha256
    from looprl.run.task_model import PRESETS, read_splits
    names = {p.name for p in small.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
            "splits", "warmstart.json"} <= names
    rec = json.loads((small / "warmstart.json").read_text())
    assert rec["command"] == f"python -m looprl.warmstart {small} --preset small --device cpu --seed 0 --max-steps 10"
    h = rec["heldout"]
    assert (h["questions"], h["samples"], h["precision"], h["device"]) == (256, 4, "fp32", "cpu")
    assert rec["model_sha256"] == checkpoint_sha256(small) and rec["steps"] == 10
    splits = read_splits(small / "splits")
    assert {n: len(r) for n, r in splits.items()} == dict(PRESETS["small"].splits)
    assert all(rec["splits"][n]["sha256"] == file_sha256(small / "splits" / f"{n}.jsonl") for n in splits)
    assert rec["environment"]["commit"] and rec["environment"]["torch"]
    assert load_checkpoint(small).cfg.depth == PRESETS["small"].recurrence

def test_the_same_command_rebuilds_the_same_model_on_the_cpu(small, tmp_path):
    r = warmstart(tmp_path / "again", "--preset", "small", "--max-steps", "10", "--no-eval",
                  "--splits", small / "splits")
    assert r.returncode == 0, r.stderr
    a, b = (json.loads((d / "warmstart.json").read_text()) for d in (small, tmp_path / "again"))
    assert a["losses_every_10"][0] != a["final_loss"]                              # the steps changed the model
    assert a["model_sha256"] == b["model_sha256"] and a["tokenizer"] == b["tokenizer"]
    r = warmstart(tmp_path / "other", "--preset", "small", "--max-steps", "10", "--no-eval", "--seed", "1",
                  "--splits", small / "splits")                                  # the twin: another seed
    assert json.loads((tmp_path / "other" / "warmstart.json").read_text())["model_sha256"] != a["model_sha256"]

def test_a_grpo_run_on_it_replays_exactly_on_the_cpu(small, tmp_path):
    "Parity 0 in FP32 on the CPU, on a run whose weights change (a reward that random weights vary on)."
    r = run_cli("looprl.train", "--algorithm", "grpo", "--model", small, "--reward", "looprl.tasks.rewards:even_token_share", "--data", small / "splits" / "train.jsonl",
                "--eval-data", small / "splits" / "heldout.jsonl", "--updates", "2", "--eval-limit", "8",
                "--rollout-batch-size", "4", "--max-response-tokens", "6", "--output", tmp_path / "run", "--no-progress")
    assert r.returncode == 0, r.stderr
    ups = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    ups = [u for u in ups if u["kind"] == "update"]
    assert len(ups) == 2 and all(u["parity_max"] == 0.0 for u in ups)
    assert len({u["digest"] for u in ups}) == 2                                   # the weights changed

@pytest.mark.parametrize("args, says", [
    (("--preset", "mid", "--device", "cuda"), "--device cuda: no CUDA device here"),
    (("--preset", "small", "--device", "tpu"), "--device: cpu or cuda"),
    (("--preset", "small", "--max-steps", "0"), "--max-steps must be ≥ 1"),
    (("--preset", "small", "--max-seconds", "-1"), "--max-seconds must be > 0"),
    (("--preset", "small", "--splits", "does/not/exist"), "does/not/exist: no train.jsonl"),
    (("--preset", "small", "--family", "ouro"), "--family: not a setting of --preset small"),
    (("--preset", "mid", "--target-accuracy", "0.3"), "--target-accuracy: not a setting of --preset mid"),
    (("--device", "cuda"), "--device: not a setting of --preset tiny"),
    (("--write-splits",), "--write-splits: not a setting of --preset tiny"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, says):
    r = warmstart(tmp_path / "out", *args)
    one_line_refusal(r, says)
    assert not (tmp_path / "out").exists()

def test_overlapping_splits_are_refused_before_any_work(small, tmp_path):
    bad = tmp_path / "splits"; bad.mkdir()
    for n in ("train", "dev", "heldout"): (bad / f"{n}.jsonl").write_text((small / "splits" / f"{n}.jsonl").read_text())
    first = (small / "splits" / "train.jsonl").read_text().splitlines()[0]
    (bad / "heldout.jsonl").write_text((bad / "heldout.jsonl").read_text() + first + "\n")
    r = warmstart(tmp_path / "out", "--preset", "small", "--splits", bad)
    one_line_refusal(r, "splits train and heldout share 1 question(s)")
    assert not (tmp_path / "out").exists()

def test_the_learning_benchmark_refuses_a_model_whose_heldout_split_overlaps_its_training_data(small, tmp_path):
    import shutil
    model = tmp_path / "model"; shutil.copytree(small, model)
    dev_first = (model / "splits" / "dev.jsonl").read_text().splitlines()[0]
    (model / "splits" / "heldout.jsonl").write_text((model / "splits" / "heldout.jsonl").read_text() + dev_first + "\n")
    r = run_cli("looprl.bench", "learning", "--preset", "small", "--model", model, "--workdir", tmp_path / "w",
                "--out", tmp_path / "r.json")
    assert r.returncode == 2 and "splits dev and heldout share 1 question(s)" in r.stderr, r.stderr
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "w").exists()
