"""Depth as a setting, run as a user runs it: `python -m looprl.eval --depth/--depths` and `python -m looprl.verify --depth`
on the embedded tiny Huginn. At the config's own depth eval equals today's eval bit for bit (twin: another depth
differs); a paired evaluation sends the same requests at every depth and is reproducible to the bit on a second run;
bad depth values are refused in one line with exit status 2 and nothing written."""
import json
import pytest
from conftest import run_cli
from looprl.model.config import load_config
from looprl.model.registry import default_family

EMBEDDED = default_family().embedded
SMALL = ("--eval-limit", "3", "--eval-samples", "2")            # a few questions: these tests check equality, not accuracy


def cli(module, *args):
    "Run the command in a fresh process (one torch thread: test workers share few cores)."
    return run_cli(module, *args, env={"OMP_NUM_THREADS": "1"})


def one_line_error(r) -> str:
    "The single stderr line of a refused command (exit status 2, nothing on stdout)."
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    return lines[0]


def test_eval_at_its_own_depth_is_todays_eval_and_another_depth_differs():
    own = load_config(EMBEDDED).depth
    today = cli("looprl.eval", EMBEDDED, *SMALL, "--json")
    same = cli("looprl.eval", EMBEDDED, *SMALL, "--json", "--depth", own)
    other = cli("looprl.eval", EMBEDDED, *SMALL, "--json", "--depth", own * 2)
    for r in (today, same, other): assert r.returncode == 0, r.stderr
    t, s, o = (json.loads(r.stdout) for r in (today, same, other))
    assert s == t and t["depth"] == own                            # bit for bit: every figure and the digest
    assert o["depth"] == own * 2 and o["publication_digest"] == t["publication_digest"]
    assert {k: o[k] for k in t if k != "depth"} != {k: t[k] for k in t if k != "depth"}   # twin: another depth differs


def test_depths_are_paired_and_reproducible_to_the_bit(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for out in (a, b):
        r = cli("looprl.eval", EMBEDDED, *SMALL, "--depths", "1,2,4,8,16", "--out", out)
        assert r.returncode == 0, r.stderr
        assert len(r.stdout.strip().splitlines()) == 2 + 5            # the table: title, header, one line per depth
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    assert ra == rb and a.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    assert [row["depth"] for row in ra["table"]] == [1, 2, 4, 8, 16]
    assert len({row["requests_digest"] for row in ra["table"]}) == 1     # the same questions and seeds at each depth
    assert len({row["completions_digest"] for row in ra["table"]}) == 5  # and each depth answered them its own way
    assert all(0 <= row["greedy_accuracy"] <= 1 and "sampled_ci" in row for row in ra["table"])


@pytest.mark.parametrize("args, says", [
    (("--depth", "0"), "--depth: must be an integer ≥ 1, got 0"),
    (("--depth", "-2"), "--depth: must be an integer ≥ 1, got -2"),
    (("--depth", "two"), "argument --depth: invalid int value: 'two'"),
    (("--depths", "1,0,4"), "--depths: '0' in '1,0,4' is not an integer ≥ 1"),
    (("--depths", "1,-4"), "--depths: '-4' in '1,-4' is not an integer ≥ 1"),
    (("--depths", "1,,2"), "--depths: '' in '1,,2' is not an integer ≥ 1"),
    (("--depths", "4,4"), "--depths: depth 4 is named twice in '4,4'"),
    (("--depths", "1,2", "--depth", "2"), "--depth and --depths: give one of them"),
    (("--depths", "1,100000000"), "a KV cache of"),
    (("--depths", "1,2", "--out", "OUT/r.txt"), "must end in .json"),
    (("--depth", "2", "--out", "OUT/r.json"), "--out: only with --depths"),
])
def test_bad_depths_are_refused_in_one_line_and_nothing_is_written(tmp_path, args, says):
    args = [str(a).replace("OUT", str(tmp_path / "out")) for a in args]
    assert says in one_line_error(cli("looprl.eval", EMBEDDED, *SMALL, *args))
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_out_is_refused_before_any_work(tmp_path):
    (tmp_path / "file").write_text("")
    msg = one_line_error(cli("looprl.eval", "/nowhere", "--depths", "1,2", "--out", tmp_path / "file" / "r.json"))
    assert "is a file" in msg                                       # refused before the missing model is even looked at
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_verify_at_another_depth_keeps_parity_and_refuses_bad_depths():
    r = cli("looprl.verify", EMBEDDED, "--samples", "2", "--max-response-tokens", "6", "--depth", "7")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["ok"] and (rep["depth"], rep["config_depth"], set(rep["exit_depths"])) == (7, 4, {"7"})
    assert rep["kv_planes"] == load_config(EMBEDDED).with_depth(7).kv_planes
    assert "--depth must be an integer ≥ 1, got 0" in one_line_error(cli("looprl.verify", EMBEDDED, "--depth", "0"))
