"""train --depth N and --depth-sampler SPEC on the shipped tiny Huginn: the engine, the trainer's replay and the contract
at the depth asked for, resume equality (--stop-after 2 + --resume against 3 uninterrupted updates) with twins, a resume
at another depth refused naming the field, an older run (no depth in run.json) resuming as the config's own depth, bad
values refused in one line with nothing written; a sampler's depths drawn from each completion's seed, several distinct
depths in every update at parity exactly 0, with twins that replay at the config's depth (parity > 0) and serve the
config's depth (refused by the trace check)."""
import json, shutil
import pytest
from conftest import run_cli, assert_changing, updates

FAST = ["--max-response-tokens", "6", "--no-eval", "--no-progress", "--algorithm", "grpo", "--precision", "fp32",
        "--rollout-batch-size", "4", "--n-samples-per-prompt", "4", "--lr", "1e-4"]
SAMPLER = "uniform:1,2,6"

def train(model, data, out, *extra):
    return run_cli("looprl.train", "--model", model, "--data", data, "--output", out, *FAST, *extra)

def completions(run) -> list[list[dict]]:
    "Each update's completion records."
    return [json.loads(f.read_text())["completions"] for f in sorted((run / "rollouts").glob("update-*.json"))]

def compare(a, b) -> tuple[int, dict]:
    r = run_cli("looprl.compare", "--json", a, b)
    return r.returncode, {f["field"]: f["status"] for f in json.loads(r.stdout)["fields"]}

def contract(run) -> dict: return json.loads((run / "run.json").read_text())["contract"]

def one_line(r) -> str:
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]

@pytest.fixture(scope="module")
def runs(shipped, arithmetic, tmp_path_factory):
    "Three-update runs: at the config's depth, at --depth 6, with the sampler; and the last two stopped after 2."
    root, m, out = tmp_path_factory.mktemp("depth"), shipped["huginn_raven"], {}
    for name, extra in {"own": [], "d6": ["--depth", "6"], "sampled": ["--depth-sampler", SAMPLER]}.items():
        out[name] = root / name
        r = train(m, arithmetic, out[name], *extra, "--updates", "3"); assert r.returncode == 0, r.stderr
        if name == "own": continue
        out[name + "-stopped"] = root / f"{name}-stopped"
        r = train(m, arithmetic, out[name + "-stopped"], *extra, "--updates", "3", "--stop-after", "2")
        assert r.returncode == 0, r.stderr
    return out

def test_train_at_depth_runs_and_records_that_depth(runs):
    "--depth 6: contract, every trace and the replay at 6 loops (parity 0); twin: the own-depth run is at 4 and differs."
    d6, own = runs["d6"], runs["own"]
    assert contract(d6)["model"]["depth"] == 6 and contract(own)["model"]["depth"] == 4
    for run, depth in ((d6, 6), (own, 4)):
        for ups in completions(run):
            assert {c["trace"]["prefill_depth"] for c in ups} == {depth}
            assert {d for c in ups for d in c["trace"]["depths"]} == {depth}
    assert all(u["parity_max"] == 0.0 for u in updates(d6))
    code, fields = compare(d6, own)
    # the same seeds at other loops: other log-probs and traces (the tiny model's tokens barely change from 4 loops on)
    assert code == 1 and fields["logprobs"] == fields["latent_traces"] == "different", fields

def test_own_depth_is_todays_run(shipped, arithmetic, runs, tmp_path):
    "--depth 4 (the config's) is the run without --depth, field for field; the other depth's run differs (above)."
    r = train(shipped["huginn_raven"], arithmetic, tmp_path / "d4", "--depth", "4", "--updates", "3")
    assert r.returncode == 0, r.stderr
    code, fields = compare(tmp_path / "d4", runs["own"])
    assert code == 0 and set(fields.values()) <= {"equal", "n/a"}, fields
    assert contract(tmp_path / "d4") == contract(runs["own"])

def test_resume_at_depth_equals_uninterrupted_and_another_depth_is_refused(runs, tmp_path):
    b = tmp_path / "b"; shutil.copytree(runs["d6-stopped"], b)
    r = run_cli("looprl.train", "--output", b, "--resume", "--depth", "5", "--no-progress")
    assert "model.depth: run has 6, requested 5" in one_line(r)
    assert len(updates(b)) == 2                                              # nothing written by the refusal
    r = run_cli("looprl.train", "--output", b, "--resume", "--no-progress"); assert r.returncode == 0, r.stderr
    assert_changing(runs["d6"])
    code, fields = compare(runs["d6"], b)
    assert code == 0 and set(fields.values()) <= {"equal", "n/a"}, fields

def test_a_run_from_before_depth_resumes_at_the_configs_depth(runs, tmp_path):
    "A run.json without depth or depth_sampler (recorded before they existed) resumes; twin: a stored depth 5 refused."
    old, changed = tmp_path / "old", tmp_path / "changed"
    for d in (old, changed): shutil.copytree(runs["own"], d)
    doc = json.loads((old / "run.json").read_text())
    for k in ("depth", "depth_sampler"): doc["options"].pop(k)
    (old / "run.json").write_text(json.dumps(doc))
    r = run_cli("looprl.train", "--output", old, "--resume", "--updates", "4", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert len(updates(old)) == 4 and completions(old)[-1][0]["trace"]["prefill_depth"] == 4
    doc["contract"]["model"]["depth"] = 5
    (changed / "run.json").write_text(json.dumps(doc))
    r = run_cli("looprl.train", "--output", changed, "--resume", "--updates", "4", "--no-progress")
    assert "model.depth: run has 5, requested 4" in one_line(r)

def test_sampled_depths_replay_at_parity_zero_and_resume_equal(runs):
    "Each completion at its drawn depth (several in every update), recorded, replayed at parity 0; resume equal."
    from looprl.rollout.depth_sampler import draw_depth, parse_depth_sampler
    a, s = runs["sampled"], parse_depth_sampler(SAMPLER)
    assert contract(a)["rollout"]["depth_sampler"] == SAMPLER and contract(a)["model"]["depth"] == 4
    for ups in completions(a):
        drawn = [draw_depth(s, c["seed"]) for c in ups]
        assert [c["trace"]["prefill_depth"] for c in ups] == drawn
        assert all(set(c["trace"]["depths"]) == {d} for c, d in zip(ups, drawn))
        assert len(set(drawn)) >= 2, drawn                                  # several depths in one update
    assert all(u["parity_max"] == 0.0 and u["parity_mean"] == 0.0 for u in updates(a))
    assert_changing(a)
    b = runs["sampled-stopped"]
    r = run_cli("looprl.train", "--output", b, "--resume", "--depth-sampler", "uniform:1:3", "--no-progress")
    assert "rollout.depth_sampler: run has 'uniform:1,2,6', requested 'uniform:1:3'" in one_line(r)
    r = run_cli("looprl.train", "--output", b, "--resume", "--no-progress"); assert r.returncode == 0, r.stderr
    code, fields = compare(a, b)
    assert code == 0 and set(fields.values()) <= {"equal", "n/a"}, fields
    code, fields = compare(a, runs["own"])                                  # twin: the fixed-depth run differs
    assert code == 1 and fields["logprobs"] == fields["latent_traces"] == "different", fields

def train_here(shipped, data, out, *extra):
    "A run in this process, so that a test can break a part of it: its summary."
    from looprl.train import parser, options_from_args
    from looprl.run.loop import run
    argv = ["--model", str(shipped["huginn_raven"]), "--data", str(data), "--output", str(out), *FAST, *extra]
    return run(options_from_args(parser().parse_args(argv)), progress=False)

def test_a_trainer_replaying_at_the_configs_depth_is_caught(shipped, arithmetic, tmp_path, monkeypatch):
    "Twin of the replay: a trainer that replays every row at the config's depth sees parity far from 0."
    import looprl.training.trainer as T
    ok = train_here(shipped, arithmetic, tmp_path / "ok", "--updates", "1", "--depth-sampler", SAMPLER)
    assert ok["updates"][0]["parity_max"] == 0.0
    monkeypatch.setattr(T, "row_depths", lambda depths, own: None)
    s = train_here(shipped, arithmetic, tmp_path / "own", "--updates", "1", "--depth-sampler", SAMPLER)
    assert s["updates"][0]["parity_max"] > 1e-3, s["updates"][0]["parity_max"]

def test_an_engine_serving_the_configs_depth_is_refused_by_the_trace_check(shipped, arithmetic, tmp_path, monkeypatch):
    "Twin of the serving: an engine that ignores the drawn depths makes traces the run refuses, naming the field."
    import dataclasses
    import looprl.rollout.engine as E
    from looprl.model.latents import TraceMismatch
    monkeypatch.setattr(E, "serve_depths", lambda eng, reqs, gen: gen([dataclasses.replace(r, depth=None) for r in reqs]))
    with pytest.raises(TraceMismatch, match="latent trace field 'prefill_depth': trace has 4, model has "):
        train_here(shipped, arithmetic, tmp_path / "bad", "--updates", "1", "--depth-sampler", SAMPLER)

@pytest.fixture(scope="module")
def fixed_nanbeige(shipped, tmp_path_factory):
    "The shipped tiny Nanbeige with loop_loss_weights, which fix its loop count."
    d = tmp_path_factory.mktemp("fixed") / "nanbeige"
    shutil.copytree(shipped["nanbeige"], d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["loop_loss_weights"] = [1.0] * (cfg["num_loops"] - 1)
    (d / "config.json").write_text(json.dumps(cfg))
    return d

@pytest.mark.parametrize("args,says", [
    (["--depth", "0"], "--depth: must be an int ≥ 1, got 0"),
    (["--depth", "-3"], "--depth: must be an int ≥ 1, got -3"),
    (["--depth", "100000"], "or a smaller --depth / --depth-sampler (the run serves up to 100000 loops)"),
    (["--depth-sampler", "uniform:100000:100001"], "(the run serves up to 100001 loops)"),
    (["--depth", "3", "FIXED"], "--depth: "),
    (["--depth-sampler", "uniform:1:3", "FIXED"], "--depth-sampler uniform:1:3: "),
    (["--depth-sampler", "uniform:0:3"], "--depth-sampler: LO must be ≥ 1"),
    (["--depth-sampler", "poisson:3"], "--depth-sampler: 'poisson:3' is not fixed"),
    (["--depth-sampler", "lognormal-poisson:0"], "--depth-sampler: MEAN must be > 0"),
    (["--depth", "6", "--engine", "vllm"], "--depth: the vllm engine serves the config's depth; use --engine native"),
    (["--depth-sampler", "uniform:1:3", "--trainer-processes", "2", "--micro-batch-size", "1"], "--depth-sampler: one torch trainer process"),
    (["--depth-sampler", "uniform:1:3", "--exit-threshold", "0.5", "OURO"],
     "--depth-sampler: adaptive exit runs at one depth; use --depth-sampler fixed")],
    ids=["zero", "negative", "beyond-the-plan", "sampler-beyond-the-plan", "fixed-family", "sampler-fixed-family",
         "sampler-lo", "sampler-kind", "sampler-mean", "vllm", "processes", "exits"])
def test_bad_depths_are_refused_in_one_line_and_nothing_is_written(shipped, arithmetic, fixed_nanbeige, tmp_path, args,
                                                                  says):
    model = fixed_nanbeige if "FIXED" in args else shipped["ouro"] if "OURO" in args else shipped["huginn_raven"]
    r = train(model, arithmetic, tmp_path / "x", "--updates", "1", *[a for a in args if a not in ("FIXED", "OURO")])
    assert says in one_line(r), r.stderr
    assert not (tmp_path / "x").exists()
    if "FIXED" in args: assert "loop_loss_weights" in r.stderr

def test_bench_rollout_at_a_depth(tmp_path):
    "bench rollout --depth N: the native engine's tokens/s at N loops, the depth in its JSON; bad depths one line."
    runs = {}
    for d in (1, 8):
        r = run_cli("looprl.bench", "rollout", "--engine", "native", "--depth", d, "--batch", "2", "--new-tokens", "4",
                    "--repeats", "1", "--out", tmp_path / f"d{d}.json")
        assert r.returncode == 0, r.stderr
        runs[d] = json.loads((tmp_path / f"d{d}.json").read_text())["result"]
    assert (runs[1]["depth"], runs[8]["depth"]) == (1, 8)
    assert all(x["engines"]["native"]["tok_s"] > 0 for x in runs.values())
    # twin: the same requests at another loop count sample other tokens
    assert runs[1]["engines"]["native"]["tokens_digest"] != runs[8]["engines"]["native"]["tokens_digest"]
    for args, says in ((["--depth", "0"], "--depth: must be ≥ 1, got 0"),
                       (["--engine", "vllm", "--depth", "3"], "--depth: the vllm engine serves the config's depth"),
                       (["--lengths", "fixed:4", "--depth", "3"], "--depth: not with --lengths")):
        r = run_cli("looprl.bench", "rollout", *args, "--out", tmp_path / "bad.json")
        assert says in one_line(r) and not (tmp_path / "bad.json").exists()

def test_plots_draws_paired_depth_curves_and_refuses_unpaired(tmp_path):
    "plots --depth-reports BEFORE AFTER: depth-curves.png; twin: a report on other requests refused in one line."
    def report(digest):
        table = [dict(depth=n, greedy_accuracy=a, greedy_ci=0.1, sampled_accuracy=a, sampled_ci=0.1)
                 for n, a in ((1, 0.1), (2, 0.3), (4, 0.5))]
        return dict(model="m", table=table, depths=[1, 2, 4], requests_digest=digest, temperature=0.8,
                    config_depth=4, depth_key="mean_recurrence", questions=8)
    for name, digest in (("before", "a"), ("after", "a"), ("unpaired", "b")):
        (tmp_path / f"{name}.json").write_text(json.dumps(report(digest)))
    r = run_cli("looprl.plots", "--depth-reports", tmp_path / "before.json", tmp_path / "after.json",
                "--out", tmp_path / "figs")
    assert r.returncode == 0 and (tmp_path / "figs" / "depth-curves.png").stat().st_size > 0, r.stderr
    r = run_cli("looprl.plots", "--depth-reports", tmp_path / "before.json", tmp_path / "unpaired.json",
                "--out", tmp_path / "figs2")
    assert "unpaired was not evaluated on the questions, seeds and depths of before" in one_line(r)
    assert not (tmp_path / "figs2").exists()
