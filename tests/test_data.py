"Prompt data: every bad-input message, cursor resume, the shipped arithmetic file, the tiny tokenizer."
import hashlib, json, random, subprocess, sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from looprl.tasks.data import (BOS_ID, EMBEDDED_DATA, HELDOUT_DATA, WARMSTART_DATA, SPLITS, SPLIT_FILES, EOS_ID, PAD_ID, TINY_ALPHABET,
                         TINY_VOCAB, DataError, PromptCursor, all_arithmetic, arithmetic_splits, write_splits, build_char_tokenizer,
                         decode_response, encode_prompt, file_sha256, load_prompts)

ROOT = Path(__file__).resolve().parents[1]
GOOD = '{"prompt": "What is 1 + 1?", "label": "2"}\n'


def _write(tmp_path, text, name="data.jsonl"):
    f = tmp_path / name
    f.write_bytes(text.encode() if isinstance(text, str) else text)
    return f


@pytest.mark.parametrize("text,msg", [
    (GOOD + "\n" + '{"prompt": "x", "label": }\n', ":3: invalid JSON: Expecting value (column 26)"),
    ('{"prompt": "x", "label": "1"\n', ":1: invalid JSON: Expecting ',' delimiter"),
    (GOOD + '["What is 1 + 1?", "2"]\n', ":2: row must be a JSON object, got array"),
    ('"What is 1 + 1?"\n', ":1: row must be a JSON object, got string"),
    ('{"label": "2"}\n', ":1: missing field 'prompt'"),
    (GOOD + GOOD + '{"prompt": "What is 1 + 1?"}\n', ":3: missing field 'label'"),
    ('{"prompt": "What is 3 + 4?", "label": 7}\n', ":1: field 'label' must be a string, got number 7"),
    ('{"prompt": "What is 3 + 4?", "label": 7.5}\n', ":1: field 'label' must be a string, got number 7.5"),
    ('{"prompt": ["a"], "label": "7"}\n', ":1: field 'prompt' must be a string, got array [\"a\"]"),
    ('{"prompt": null, "label": "7"}\n', ":1: field 'prompt' must be a string, got null null"),
    ('{"prompt": true, "label": "7"}\n', ":1: field 'prompt' must be a string, got boolean true"),
    ('{"prompt": "", "label": "7"}\n', ":1: field 'prompt' is empty"),
    ('{"prompt": " \\t ", "label": "7"}\n', ":1: field 'prompt' is empty"),
    ('{"prompt": "What?", "label": ""}\n', ":1: field 'label' is empty"),
])
def test_bad_rows_name_file_line_and_field(tmp_path, text, msg):
    f = _write(tmp_path, text)
    with pytest.raises(DataError) as e:
        load_prompts(f)
    assert str(e.value).startswith(f"{f}:") and msg in str(e.value), str(e.value)


@pytest.mark.parametrize("text", ["", "\n", "  \n\n\t\n"])
def test_empty_file(tmp_path, text):
    f = _write(tmp_path, text)
    with pytest.raises(DataError, match="^" + str(f).replace(".", r"\.") + ": no rows$"):
        load_prompts(f)


def test_missing_file_and_bad_encoding(tmp_path):
    with pytest.raises(DataError, match="no such file"): load_prompts(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match="a directory, not a JSONL file"): load_prompts(tmp_path)
    f = _write(tmp_path, GOOD.encode() + GOOD.encode() + b'{"prompt": "\xff", "label": "1"}\n')
    with pytest.raises(DataError, match=r"data\.jsonl:3: not UTF-8"): load_prompts(f)


def test_long_value_is_shortened(tmp_path):
    f = _write(tmp_path, json.dumps({"prompt": "x", "label": list(range(200))}) + "\n")
    with pytest.raises(DataError) as e: load_prompts(f)
    assert len(str(e.value)) < len(str(f)) + 120 and str(e.value).endswith("...")


def test_good_file_blank_lines_extra_keys(tmp_path):
    text = "\n" + GOOD + "   \n" + '{"prompt": "2*3=", "label": "6", "id": 9, "meta": {"src": "hand"}}\n\n'
    rows = load_prompts(_write(tmp_path, text))
    assert rows == [{"prompt": "What is 1 + 1?", "label": "2"}, {"prompt": "2*3=", "label": "6", "id": 9, "meta": {"src": "hand"}}]
    assert load_prompts(str(tmp_path / "data.jsonl")) == rows  # str paths too
    # no trailing newline, CRLF line ends
    assert load_prompts(_write(tmp_path, GOOD.rstrip() + "\r\n" + GOOD.rstrip(), "b.jsonl")) == [rows[0], rows[0]]


def test_file_sha256(tmp_path):
    f = _write(tmp_path, GOOD * 1000)
    assert file_sha256(f) == hashlib.sha256(f.read_bytes()).hexdigest()
    g = _write(tmp_path, GOOD * 999 + GOOD.replace("2", "3"), "g.jsonl")
    assert file_sha256(g) != file_sha256(f)


# ---- cursor ---------------------------------------------------------------------------------------

def test_cursor_epochs_are_permutations():
    c = PromptCursor(37, seed=11)
    for e in range(3):
        assert sorted(c.take(37)) == list(range(37))
    assert c.epoch == 3 and c.offset == 0
    assert PromptCursor(37, 11).order(0) != PromptCursor(37, 11).order(1)
    assert PromptCursor(37, 11).order(2) == c.order(2)


def test_cursor_crosses_epoch_boundaries():
    c = PromptCursor(5, seed=2)
    e0, e1, e2 = c.order(0), c.order(1), c.order(2)
    assert c.take(3) == e0[:3]
    assert c.take(4) == e0[3:] + e1[:2]
    assert c.take(8) == e1[2:] + e2
    assert (c.epoch, c.offset) == (3, 0)
    assert c.take(0) == [] and PromptCursor(1, 0).take(3) == [0, 0, 0]


def test_cursor_does_not_touch_global_rng():
    import numpy as np
    np.random.seed(0); random.seed(0)
    a = PromptCursor(50, 1).take(60)
    np.random.seed(123); random.seed(123)
    before = (np.random.random(), random.random())
    np.random.seed(123); random.seed(123)
    b = PromptCursor(50, 1).take(60)
    assert a == b and (np.random.random(), random.random()) == before


@pytest.mark.parametrize("n_rows,seed,steps", [(5, 3, [7, 16]), (97, 0, [10, 10, 200, 1, 96]), (8, 2**40, [8, 8, 3])])
def test_cursor_resume_equals_uninterrupted(n_rows, seed, steps):
    full = PromptCursor(n_rows, seed).take(sum(steps))
    got, state = [], None
    for k in steps:  # a fresh cursor for every chunk, restored through JSON
        c = PromptCursor(n_rows, seed)
        if state is not None: c.load_state_dict(json.loads(json.dumps(state)))
        got += c.take(k)
        state = c.state_dict()
    assert got == full
    assert state == {"seed": seed, "n_rows": n_rows, "epoch": sum(steps) // n_rows, "offset": sum(steps) % n_rows}


def test_cursor_resume_in_fresh_process():
    c = PromptCursor(13, 5)
    c.take(20)
    code = ("import json, sys; from looprl.tasks.data import PromptCursor; "
            "c = PromptCursor(13, 5).load_state_dict(json.loads(sys.argv[1])); print(json.dumps(c.take(30)))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(c.state_dict())], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == c.take(30)


@pytest.mark.parametrize("change,msg", [
    (dict(n_rows=6), "cursor state field 'n_rows': state has 6, cursor has 5"),
    (dict(seed=4), "cursor state field 'seed': state has 4, cursor has 3"),
    (dict(offset=5), "cursor state field 'offset': must be in [0, 5), got 5"),
    (dict(offset=-1), "cursor state field 'offset'"),
    (dict(epoch=-1), "cursor state field 'epoch': must be ≥ 0"),
    (dict(epoch="1"), "cursor state field 'epoch': must be an int"),
    (dict(offset=True), "cursor state field 'offset': must be an int"),
    (dict(extra=1), "cursor state field 'extra': unknown field"),
])
def test_cursor_refuses_foreign_state(change, msg):
    state = {**PromptCursor(5, 3).state_dict(), **change}
    with pytest.raises(DataError) as e:
        PromptCursor(5, 3).load_state_dict(state)
    assert msg in str(e.value)


def test_cursor_refuses_missing_field_and_bad_args():
    with pytest.raises(DataError, match="'offset': missing"): PromptCursor(5, 3).load_state_dict({"seed": 3, "n_rows": 5, "epoch": 0})
    with pytest.raises(DataError, match="must be a dict"): PromptCursor(5, 3).load_state_dict([])
    with pytest.raises(DataError, match="n_rows"): PromptCursor(0, 1)
    with pytest.raises(DataError, match="seed"): PromptCursor(3, -1)
    with pytest.raises(DataError, match="k must be"): PromptCursor(3, 1).take(-1)


# ---- embedded data ---------------------------------------------------------------------------------

def test_shipped_splits_equal_regeneration(tmp_path):
    out = write_splits(tmp_path)
    for s in SPLITS:
        assert SPLIT_FILES[s].is_file() and out[s].read_bytes() == SPLIT_FILES[s].read_bytes()
        assert load_prompts(SPLIT_FILES[s]) == arithmetic_splits()[s]

def test_splits_are_disjoint_complete_and_right():
    sp = arithmetic_splits()
    seen = [r["prompt"] for s in SPLITS for r in sp[s]]
    assert len(seen) == len(set(seen)) == len(all_arithmetic()) == 10000 + 5050
    assert len(sp["heldout"]) >= 256 and len(sp["prompts"]) == 2048
    for r in all_arithmetic():
        a, op, b = int(r["prompt"][:2]), r["prompt"][2], int(r["prompt"][3:5])
        assert r["prompt"] == f"{a:02d}{op}{b:02d}=" and r["label"] == str(a + b if op == "+" else a - b) and int(r["label"]) >= 0
    assert {r["prompt"][2] for r in sp["heldout"]} == {"+", "-"}
    assert arithmetic_splits(1)["heldout"] != sp["heldout"]
    assert EMBEDDED_DATA == SPLIT_FILES["prompts"] and HELDOUT_DATA == SPLIT_FILES["heldout"] and WARMSTART_DATA == SPLIT_FILES["warmstart"]

def test_splits_are_deterministic_in_fresh_process():
    code = "import hashlib, json; from looprl.tasks.data import arithmetic_splits; print(hashlib.sha256(json.dumps(arithmetic_splits(5)).encode()).hexdigest())"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert out == hashlib.sha256(json.dumps(arithmetic_splits(5)).encode()).hexdigest()


# ---- tokenizer -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer(TINY_ALPHABET)


def test_tokenizer_ids(tok):
    assert [tok.token_to_id(t) for t in ("<pad>", "<bos>", "<eos>")] == [PAD_ID, BOS_ID, EOS_ID] == [0, 1, 2]
    ids = [tok.token_to_id(ch) for ch in TINY_ALPHABET]
    assert ids == list(range(3, 3 + len(TINY_ALPHABET)))
    assert tok.get_vocab_size() == len(TINY_ALPHABET) + 3 < TINY_VOCAB == 1024
    for ch in "0123456789+-*=? \\{}abcXYZ.,()":
        assert ch in TINY_ALPHABET


def test_tokenizer_round_trip(tok):
    rng = random.Random(0)
    texts = ["What is 12 + 7?", "  leading and trailing  ", "a  b   c", "\\boxed{19}", "line1\nline2\n", " ", "",
             "".join(TINY_ALPHABET)] + ["".join(rng.choice(TINY_ALPHABET) for _ in range(rng.randrange(1, 60))) for _ in range(200)]
    for t in texts:
        ids = encode_prompt(tok, t)
        assert ids[0] == BOS_ID and len(ids) == len(t) + 1
        assert tok.decode(ids[1:]) == t
        assert decode_response(tok, ids) == t
        assert decode_response(tok, ids[1:] + [EOS_ID] + ids[1:]) == t


def test_decode_response_stops_and_skips(tok):
    ids = encode_prompt(tok, "19 apples")[1:]
    assert decode_response(tok, ids[:2] + [EOS_ID] + ids[2:]) == "19"
    assert decode_response(tok, [PAD_ID, BOS_ID] + ids[:2] + [PAD_ID]) == "19"
    assert decode_response(tok, ids[:2] + [TINY_VOCAB - 1, 500]) == "19"  # ids the model can emit beyond the alphabet
    assert decode_response(tok, [EOS_ID] + ids) == ""
    import torch
    assert decode_response(tok, torch.tensor(ids[:2])) == "19"


def test_encode_prompt_refuses(tok):
    with pytest.raises(DataError, match="character 'é' at index 1"): encode_prompt(tok, "aé")
    with pytest.raises(DataError, match="special token"): encode_prompt(tok, "1<bos>")


def test_tokenizer_saves_tokenizer_json(tmp_path, tok):
    tok.save(str(tmp_path / "tokenizer.json"))
    d = json.loads((tmp_path / "tokenizer.json").read_text())
    assert d["decoder"]["type"] == "Fuse" and d["model"]["type"] == "WordLevel"
    t2 = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    s = "What is 3 * 4?\n 12 "
    assert encode_prompt(t2, s) == encode_prompt(tok, s) and decode_response(t2, encode_prompt(t2, s)) == s
    assert t2.encode(s).ids == encode_prompt(tok, s)  # the post-processor adds <bos> too


def test_build_char_tokenizer_refuses():
    with pytest.raises(ValueError, match="repeated"): build_char_tokenizer("abca")
    with pytest.raises(ValueError, match="exceed"): build_char_tokenizer("".join(chr(0x4E00 + i) for i in range(1022)))
    small = build_char_tokenizer("01+")
    assert encode_prompt(small, "1+0") == [1, 4, 5, 3]
