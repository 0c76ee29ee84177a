"""GSPO, CISPO and Dr. GRPO (--no-std-advantages, --loss-agg seq-mean-token-sum-norm) as runs: resume equality in fresh
processes (3 uninterrupted updates vs --stop-after 2 then --resume), each with a twin that sees the objective at work
(GRPO on the same data moves the weights differently); older contracts resume; the settings' bad input; and the
unbiased pass@k and mean@k against enumeration of every k-subset, reported in the held-out lines and by eval."""
import json, math, random
from itertools import combinations
import pytest
from conftest import run_cli, assert_changing, updates

FAST = ["--max-response-tokens", "6", "--no-eval", "--no-progress"]
COMMON = ["--precision", "fp32", "--optimizer", "adamw", "--lr", "1e-4", "--rollout-batch-size", "4", "--updates", "3"]
CASES = {"gspo": ["--algorithm", "gspo"], "cispo": ["--algorithm", "cispo"],
         "dr-grpo": ["--algorithm", "grpo", "--no-std-advantages", "--loss-agg", "seq-mean-token-sum-norm"]}

def train(model, data, out, *extra):
    return run_cli("looprl.train", "--model", model, "--data", data, "--output", out, *FAST, *COMMON, *extra)

def compare_fields(a, b) -> tuple[int, dict]:
    r = run_cli("looprl.compare", "--json", a, b)
    return r.returncode, {f["field"]: f["status"] for f in json.loads(r.stdout)["fields"]}

@pytest.fixture(scope="module")
def grpo_run(shipped, arithmetic, tmp_path_factory):
    "Plain GRPO with the same settings: the twin every new objective must differ from."
    out = tmp_path_factory.mktemp("grpo") / "grpo"
    r = train(shipped["huginn_raven"], arithmetic, out, "--algorithm", "grpo"); assert r.returncode == 0, r.stderr
    return out

@pytest.mark.parametrize("name", list(CASES))
def test_stop_resume_equals_uninterrupted(shipped, arithmetic, grpo_run, tmp_path, name):
    m, args = shipped["huginn_raven"], CASES[name]
    a, b = tmp_path / "straight", tmp_path / "stopped"
    r = train(m, arithmetic, a, *args); assert r.returncode == 0, r.stderr
    r = train(m, arithmetic, b, *args, "--stop-after", "2"); assert r.returncode == 0, r.stderr
    assert len(updates(b)) == 2
    r = run_cli("looprl.train", "--output", b, "--resume", "--no-progress"); assert r.returncode == 0, r.stderr
    assert_changing(a)
    code, fields = compare_fields(a, b)
    assert code == 0 and set(fields.values()) <= {"equal", "n/a"}, fields
    assert fields["critic"] == "n/a" and fields["actor"] == "equal"          # critic-free, like GRPO
    ua = updates(a)
    assert all(x["parity_max"] <= 3e-6 and x["skipped_steps"] == 0 for x in ua)
    # twin: GRPO on the same prompts, seeds and first rollout learns differently, so the objective is in effect
    code, fields = compare_fields(a, grpo_run)
    assert code == 1 and fields["actor"] == "different", fields
    assert updates(grpo_run)[0]["digest"] == ua[0]["digest"]                 # the same start: only the learning differs
    settings = json.loads((a / "run.json").read_text())["contract"]["settings"]
    if name == "dr-grpo": assert (settings["loss_agg_tokens"], settings["std_advantages"]) == (6, False)

def test_a_contract_from_before_these_settings_resumes(grpo_run, tmp_path):
    "A run recorded before GSPO, CISPO and Dr. GRPO existed (no such settings in run.json) resumes; twin: a stored value that differs from the request is refused, naming it."
    import shutil
    new = ("gspo_clip_low", "gspo_clip_high", "cispo_clip_low", "cispo_clip_high", "loss_agg_tokens", "std_advantages")
    old, changed = tmp_path / "old", tmp_path / "changed"
    for d in (old, changed): shutil.copytree(grpo_run, d)
    doc = json.loads((old / "run.json").read_text())
    for k in new:
        doc["contract"]["settings"].pop(k); doc["options"].pop(k, None)
    (old / "run.json").write_text(json.dumps(doc))
    r = run_cli("looprl.train", "--output", old, "--resume", "--updates", "4", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert len(updates(old)) == 4
    doc["contract"]["settings"]["std_advantages"] = False                    # a stored value the request does not match
    (changed / "run.json").write_text(json.dumps(doc))
    r = run_cli("looprl.train", "--output", changed, "--resume", "--updates", "4", "--no-progress")
    assert r.returncode == 2 and "settings.std_advantages: run has False, requested True" in r.stderr, r.stderr

@pytest.mark.parametrize("flags,message", [
    (["--gspo-clip-low", "1.5"], "--gspo-clip-low: must be < 1"),
    (["--cispo-clip-low", "2"], "--cispo-clip-low: must be in [0, 1]"),
    (["--loss-agg-tokens", "8"], "--loss-agg-tokens: only loss_agg seq-mean-token-sum-norm reads it"),
    (["--algorithm", "cispo", "--n-samples-per-prompt", "1"], "--n-samples-per-prompt: cispo compares a group's completions: at least 2")])
def test_bad_settings_are_one_line(tmp_path, flags, message):
    r = run_cli("looprl.train", "--output", tmp_path / "x", "--updates", "1", *flags)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and message in r.stderr, r.stderr
    assert not (tmp_path / "x").exists()

def brute(scores, k, f):
    subsets = list(combinations(scores, k))
    return sum(f(c) for c in subsets) / len(subsets)

def test_pass_at_k_equals_enumeration_of_every_k_subset():
    from looprl.run.evaluation import pass_at_k, mean_at_k
    rng = random.Random(0)
    cases = [[rng.randint(0, 1) for _ in range(n)] for n in range(1, 9) for _ in range(10)] + \
            [[rng.random() for _ in range(n)] for n in range(1, 8) for _ in range(5)] + [[0] * 5, [1] * 5]
    for s in cases:
        for k in range(1, len(s) + 1):
            assert math.isclose(pass_at_k(s, k), brute(s, k, max), abs_tol=1e-12), (s, k)
            assert math.isclose(mean_at_k(s, k), brute(s, k, lambda c: sum(c) / len(c)), abs_tol=1e-12), (s, k)
    # twin: the estimator looprl reported before (the best of exactly k samples, here the first k) fails the same check
    first_k = lambda s, k: max(s[:k])
    assert any(not math.isclose(first_k(s, k), brute(s, k, max), abs_tol=1e-12)
               for s in cases for k in range(1, len(s) + 1))

def test_heldout_lines_and_eval_json_report_pass_at_k(tmp_path):
    out = tmp_path / "run"
    r = run_cli("looprl.train", "--output", out, "--algorithm", "grpo", "--updates", "1", "--rollout-batch-size", "4",
                "--max-response-tokens", "6", "--eval-limit", "8", "--eval-samples", "3", "--no-progress")
    assert r.returncode == 0, r.stderr
    from looprl.core.state import read_metrics
    lines = [l for l in read_metrics(out) if l["kind"] == "heldout"]
    e = run_cli("looprl.eval", out, "--json"); assert e.returncode == 0, e.stderr
    res = json.loads(e.stdout)
    for l in lines + [res]:
        assert all(f"pass_at_{k}" in l and f"pass_at_{k}_ci" in l for k in (1, 2, 3)) and "pass_at_4" not in l, sorted(l)
        assert math.isclose(l["pass_at_1"], l["sampled_accuracy"], abs_tol=1e-12)
        assert (l["pass_at_3"], l["mean_at_3"]) == (l["pass_at_k"], l["sampled_accuracy"])
        assert l["pass_at_1"] <= l["pass_at_2"] <= l["pass_at_3"]
    assert {k: res[k] for k in ("pass_at_1", "pass_at_2", "pass_at_3")} == \
           {k: lines[-1][k] for k in ("pass_at_1", "pass_at_2", "pass_at_3")}       # eval of the run = its last line
    assert "pass@1…3" in res["summary"]
