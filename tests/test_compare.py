"""`looprl.compare` on real runs of the real command line (made in fresh processes): the same command twice is
EQUAL, and each kind of difference (a flipped bit, -0.0 for 0.0, an int for a float, a NaN payload, a removed key,
an empty list, null on both sides, a changed metric, a deleted held-out line, other settings, another seed) is
DIFFERENT on the field it is in, with exit status 1. Input that cannot be compared is one line and exit status 2.

Most comparisons call `looprl.compare.main` in this process (the code `python -m looprl.compare` runs) to keep
the file fast; the equal pair, GRPO against PPO and one bad input go through the command in a fresh process."""
import json, math, re, shutil
from concurrent.futures import ThreadPoolExecutor
import pytest
import torch
from conftest import ROOT, run_cli
from looprl.compare import FIELDS, main
from looprl.core.state import latest_checkpoint, read_metrics

HELDOUT = ROOT / "looprl" / "assets" / "data" / "arithmetic-heldout.jsonl"
COMMON = ["--updates", "2", "--max-response-tokens", "6", "--rollout-batch-size", "4", "--precision", "fp32", "--optimizer", "adamw", "--lr", "1e-3",
          "--reward", "looprl.tasks.rewards:even_token_share", "--no-progress"]
EVAL = ["--eval-data", HELDOUT, "--eval-limit", "4", "--eval-samples", "2"]
RUNS = {"a": EVAL, "b": EVAL, "no_eval": ["--no-eval"], "seed43": ["--no-eval", "--seed", "43"], "grpo": ["--no-eval", "--algorithm", "grpo", "--n-samples-per-prompt", "4"]}

@pytest.fixture(scope="module")
def runs(tiny_models, arithmetic, tmp_path_factory):
    "PPO twice with held-out evaluation (a, b), once without (no_eval), with seed 43, and GRPO: side by side, fresh processes."
    root = tmp_path_factory.mktemp("compare")
    def train(k): return run_cli("looprl.train", "--model", tiny_models["huginn_raven"], "--data", arithmetic, "--output", root / k, *COMMON, *RUNS[k])
    with ThreadPoolExecutor(len(RUNS)) as pool: done = dict(zip(RUNS, pool.map(train, RUNS)))
    for k, r in done.items(): assert r.returncode == 0, (k, r.stderr)
    return {k: root / k for k in RUNS}

@pytest.fixture
def copies(runs, tmp_path):
    "copies(run name, copy name): a fresh copy of one of the runs, to be sabotaged."
    def copy(k, name):
        shutil.copytree(runs[k], tmp_path / name)
        return tmp_path / name
    return copy

def compare(a, b, *extra, capsys):
    "`python -m looprl.compare A B --json ...`, in this process: (exit status, report)."
    with pytest.raises(SystemExit) as e: main([str(a), str(b), "--json", *map(str, extra)])
    return e.value.code, json.loads(capsys.readouterr().out)

def statuses(report, keep=("equal", "n/a")): return {r["field"]: r["status"] for r in report["fields"] if r["status"] not in keep}
def row(report, field): return next(r for r in report["fields"] if r["field"] == field)
def update_lines(lines): return [l for l in lines if l["kind"] == "update"]

def edit_json(f, change):
    d = json.loads(f.read_text()); change(d); f.write_text(json.dumps(d))

def edit_rollout(run, u, change): edit_json(run / "rollouts" / f"update-{u:06d}.json", change)

def edit_metrics(run, change):
    lines = read_metrics(run); change(lines)
    (run / "metrics.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))

def edit_pt(run, name, change):
    f = latest_checkpoint(run) / name
    st = torch.load(f, weights_only=True); change(st); torch.save(st, f)

def wte(st): return st["actor"]["model"]["transformer.wte.weight"]
def flip_bit(st): wte(st).view(torch.int32)[12, 7] ^= 1
def nan_bits(bits): return lambda st: wte(st).view(torch.int32).__setitem__((3, 4), bits)
def first_completion(key, value): return lambda d: d["completions"][0].__setitem__(key, value)
def first_element(key, value): return lambda d: d["completions"][0][key].__setitem__(0, value)
def metric(key, value): return lambda lines: update_lines(lines)[1].__setitem__(key, value)
def next_float(run, key): return math.nextafter(update_lines(read_metrics(run))[1][key], math.inf)

def test_runs_change_at_every_update(runs):
    "Non-vacuity: the compared states change at every update (gradients flow, each publication is new weights)."
    for k, run in runs.items():
        u = update_lines(read_metrics(run))
        assert [l["update"] for l in u] == [0, 1], k
        assert all(l["grad_norm"] > 0 for l in u), (k, [l["grad_norm"] for l in u])
        assert u[0]["digest"] != u[1]["digest"], k
    assert [l["kind"] for l in read_metrics(runs["a"])] == ["heldout", "update", "update", "heldout"]

def test_same_command_twice_is_equal(runs):
    r = run_cli("looprl.compare", runs["a"], runs["b"], "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert rep["equal"] and rep["different_settings"] == []
    assert [x["field"] for x in rep["fields"]] == list(FIELDS)
    assert statuses(rep, keep=("equal",)) == {"master": "n/a", "rng.torch_cuda": "n/a", "pending_rollout": "n/a"}
    assert rep["verdict"] == f"EQUAL: {runs['a']} vs {runs['b']} (25 fields equal, 3 n/a)"

# name: (change to a copy of B standing for A, or None to use run A; change to a copy of B; field; status; message part)
SABOTAGES = {
    "flipped bit in an actor weight": (None, lambda r: edit_pt(r, "trainer.pt", flip_bit), "actor", "different",
                                       "actor['transformer.wte.weight'] at index (12, 7): "),
    "-0.0 for 0.0 in an advantage": (lambda r: edit_rollout(r, 1, first_element("advantages", 0.0)),
                                     lambda r: edit_rollout(r, 1, first_element("advantages", -0.0)), "advantages", "different",
                                     "update 1, completion 0, advantages[0]: 0.0 vs -0.0"),
    "int 1 for 1.0 in a metric": (lambda r: edit_metrics(r, metric("clipfrac", 1.0)), lambda r: edit_metrics(r, metric("clipfrac", 1)),
                                  "metrics", "different", "update 1, clipfrac: 1.0 (float) vs 1 (int)"),
    "NaN with another payload": (lambda r: edit_pt(r, "trainer.pt", nan_bits(0x7fc00000)), lambda r: edit_pt(r, "trainer.pt", nan_bits(0x7fc00001)),
                                 "actor", "different", "actor['transformer.wte.weight'] at index (3, 4): nan (0x7fc00000) vs nan (0x7fc00001)"),
    "removed key in a rollout record": (None, lambda r: edit_rollout(r, 1, lambda d: d["completions"][3].pop("replay_logprobs")),
                                        "replay_logprobs", "missing", "missing in B: update 1, completion 3, replay_logprobs: absent"),
    "empty list where tokens are": (None, lambda r: edit_rollout(r, 0, first_completion("tokens", [])), "tokens", "missing",
                                    "missing in B: update 0, completion 0, tokens: empty"),
    "null on both sides": (lambda r: edit_rollout(r, 1, first_completion("returns", None)), lambda r: edit_rollout(r, 1, first_completion("returns", None)),
                           "returns", "missing", "missing in A and B: update 1, completion 0, returns: null"),
    "changed loss": (None, lambda r: edit_metrics(r, metric("loss", next_float(r, "loss"))), "metrics", "different", "update 1, loss: "),
    "deleted heldout line": (None, lambda r: edit_metrics(r, lambda lines: lines.pop()), "heldout", "missing",
                             "missing in B: heldout at update 2, kind: absent"),
    "changed driver generator": (None, lambda r: edit_pt(r, "rng.pt", lambda st: st["numpy"][1].__setitem__(5, st["numpy"][1][5] + 1)),
                                 "rng.numpy", "different", "driver rng.numpy[1] at index (5): "),
    "changed data cursor": (None, lambda r: edit_json(latest_checkpoint(r) / "loop.json", lambda d: d["cursor"].__setitem__("offset", d["cursor"]["offset"] + 1)),
                            "loop", "different", "loop.json['cursor']['offset']: "),
}

@pytest.mark.parametrize("name", SABOTAGES)
def test_one_change_is_different_on_its_field(name, runs, copies, capsys):
    change_a, change_b, field, status, message = SABOTAGES[name]
    a, b = (copies("b", "a") if change_a else runs["a"]), copies("b", "b")
    if change_a: change_a(a)
    change_b(b)
    code, rep = compare(a, b, capsys=capsys)
    assert code == 1 and rep["verdict"].startswith("DIFFERENT: ")
    assert statuses(rep) == {field: status}, statuses(rep)
    assert message in row(rep, field)["first_difference"], row(rep, field)

def test_nan_with_the_same_bits_is_equal(copies, capsys):
    a, b = copies("b", "a"), copies("b", "b")
    for r in (a, b): edit_pt(r, "trainer.pt", nan_bits(0x7fc00000))
    assert compare(a, b, capsys=capsys)[0] == 0

def test_heldout_on_one_side_only_is_missing_unless_ignored(runs, capsys):
    code, rep = compare(runs["a"], runs["no_eval"], capsys=capsys)
    assert code == 1 and statuses(rep) == {"heldout": "missing"}
    assert row(rep, "heldout")["first_difference"].startswith("missing in B: heldout lines of metrics.jsonl: absent")
    code, rep = compare(runs["a"], runs["no_eval"], "--ignore", "heldout", capsys=capsys)
    assert code == 0 and rep["verdict"].endswith("(24 fields equal, 3 n/a, 1 ignored)")
    code, rep = compare(runs["no_eval"], runs["no_eval"], capsys=capsys)
    assert code == 0 and row(rep, "heldout")["status"] == "n/a"

def test_grpo_against_ppo_is_different_runs(runs):
    r = run_cli("looprl.compare", runs["no_eval"], runs["grpo"])
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith("different runs: algorithm ppo vs grpo; "), r.stdout
    assert not re.search(r"\binf\b", r.stdout), r.stdout
    critic = next(l for l in r.stdout.splitlines() if l.startswith("critic "))
    assert "different" in critic and "n/a in B (algorithm grpo), compared in A" in critic
    assert r.stdout.splitlines()[-1].startswith(f"DIFFERENT: {runs['no_eval']} vs {runs['grpo']} (different runs; different: ")

def test_not_applicable_is_decided_by_the_contract(runs, copies, capsys):
    code, rep = compare(runs["grpo"], copies("grpo", "same"), capsys=capsys)
    assert code == 0 and statuses(rep, keep=("equal",)) == {f: "n/a" for f in ("master", "critic", "rng.torch_cuda", "pending_rollout", "values", "returns", "heldout")}
    assert (row(rep, "critic")["note"], row(rep, "master")["note"]) == ("algorithm grpo", "precision fp32")
    stray = copies("grpo", "stray")                 # a critic in a GRPO checkpoint is a difference, not a detail
    critic = torch.load(latest_checkpoint(runs["a"]) / "trainer.pt", weights_only=True)["critic"]
    edit_pt(stray, "trainer.pt", lambda st: st.__setitem__("critic", critic))
    code, rep = compare(runs["grpo"], stray, capsys=capsys)
    assert code == 1 and row(rep, "critic")["first_difference"].startswith("n/a (algorithm grpo) but B has critic['")
    gone = copies("b", "gone")                      # a PPO checkpoint without its critic is missing it, not n/a
    edit_pt(gone, "trainer.pt", lambda st: st.__setitem__("critic", None))
    code, rep = compare(runs["a"], gone, capsys=capsys)
    assert code == 1 and statuses(rep) == {f: "missing" for f in ("critic", "optimizer", "scheduler", "loss_scaler")}
    assert row(rep, "critic")["first_difference"].startswith("missing in B: critic: null")

def test_other_seed_differs_in_actor_critic_and_digests(runs, capsys):
    code, rep = compare(runs["no_eval"], runs["seed43"], capsys=capsys)
    assert code == 1 and rep["different_settings"] == ["seed 42 vs 43"]
    found = statuses(rep)
    assert all(found.get(f) == "different" for f in ("actor", "critic", "publication_digests", "seeds", "tokens")), found
    assert row(rep, "actor")["max_abs_diff"] > 0
    assert row(rep, "publication_digests")["first_difference"].startswith("update 1, digest: ")   # version 1 is the same initial model

def bad_run(case, copies, tmp):
    "A directory that cannot be compared, for each case of BAD."
    if case == "not a directory": return tmp / "nowhere"
    if case == "no run.json": return tmp
    run = copies("b", "x")
    if case == "no checkpoint": shutil.rmtree(run / "checkpoints")
    if case == "broken rollout": (run / "rollouts" / "update-000001.json").write_text("{")
    if case == "broken metrics line": (run / "metrics.jsonl").write_text('{"kind": "update"}\n{\n{}\n')
    return run

BAD = {"not a directory": "nowhere: not a run directory", "no run.json": "not a looprl run directory (no run.json)",
       "no checkpoint": "no complete checkpoint", "broken rollout": "update-000001.json: unreadable (JSONDecodeError: ",
       "broken metrics line": "metrics.jsonl:2: invalid JSON"}

@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line_and_exit_2(case, runs, copies, tmp_path, capsys):
    with pytest.raises(SystemExit) as e: main([str(runs["a"]), str(bad_run(case, copies, tmp_path))])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("looprl.compare: ") and err.count("\n") == 1 and BAD[case] in err, err

def test_bad_input_from_the_command(runs, copies):
    torn = copies("b", "torn")
    newest = latest_checkpoint(torn)         # the checkpoint `latest` names: compare reads it, whole or not
    (newest / "trainer.pt").write_bytes(b"not a checkpoint")
    r = run_cli("looprl.compare", runs["a"], torn)
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    assert r.stderr.startswith(f"looprl.compare: {newest / 'trainer.pt'}: ") and r.stderr.count("\n") == 1, r.stderr
    r = run_cli("looprl.compare", runs["a"], runs["b"], "--ignore", "weights")
    assert r.returncode == 2 and r.stderr.startswith("looprl.compare: --ignore: unknown field 'weights' (fields: actor, ") and r.stderr.count("\n") == 1
