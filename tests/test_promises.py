"""What the README and the tutorials promise a new user, checked from the command line in fresh processes:
`looprl.eval RUN` reproduces the run's own last held-out line; extending a finished run loses no recorded row and
still compares equal to a fresh run; the learning benchmark refuses a used work directory in one line; the README's
commands leave a clone clean."""
import json, os, re, shlex, shutil, subprocess, sys
from pathlib import Path
import pytest
from conftest import ROOT, run_cli, assert_changing, updates

TINY = ["--max-response-tokens", "6", "--rollout-batch-size", "4", "--eval-limit", "8", "--eval-samples", "2", "--lr", "1e-4",
        "--no-progress"]
HELDOUT_KEYS = ("greedy_accuracy", "greedy_ci", "sampled_accuracy", "sampled_ci", "pass_at_k", "pass_at_k_ci", "questions", "samples",
                "temperature", "seed", "completion_tokens", "reward_statuses")

def train(out, *extra):
    r = run_cli("looprl.train", "--output", out, *TINY, *extra)
    assert r.returncode == 0, r.stderr
    return out

def heldout(run) -> list[dict]:
    from looprl.core.state import read_metrics
    return [l for l in read_metrics(run) if l["kind"] == "heldout"]

def eval_json(*args) -> dict:
    r = run_cli("looprl.eval", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)

def test_eval_of_a_run_reproduces_its_last_heldout_line(tmp_path):
    run = train(tmp_path / "run", "--updates", "2", "--seed", "7")
    last = heldout(run)[-1]
    assert last["update"] == 2 and last["seed"] == 7
    r = eval_json(run)
    assert (r["precision"], r["seed"], r["questions"], r["samples"]) == ("fp32", 7, 8, 2)
    assert {k: r[k] for k in HELDOUT_KEYS} == {k: last[k] for k in HELDOUT_KEYS}
    # twin: another seed is another evaluation, and it is seen as one
    other = eval_json(run, "--seed", "0")
    assert {k: other[k] for k in HELDOUT_KEYS} != {k: last[k] for k in HELDOUT_KEYS}

def test_eval_of_a_bare_checkpoint_uses_the_training_defaults_of_the_cpu():
    from looprl.warmstart import EMBEDDED_MODEL
    r = eval_json(EMBEDDED_MODEL, "--eval-limit", "4", "--eval-samples", "0")
    assert (r["precision"], r["seed"], r["device"], r["questions"]) == ("fp32", 0, "cpu", 4)

def test_extension_keeps_the_final_heldout_row_and_compares_equal(tmp_path):
    ext, fresh = tmp_path / "extended", tmp_path / "fresh"
    train(ext, "--updates", "2")
    before = heldout(ext)
    assert [(h["update"], h.get("final")) for h in before] == [(0, None), (2, True)]
    r = run_cli("looprl.train", "--output", ext, "--resume", "--updates", "3", "--no-progress"); assert r.returncode == 0, r.stderr
    after = heldout(ext)
    assert [(h["update"], h.get("segment_end", False)) for h in after] == [(0, False), (2, True), (3, False)]
    assert {**before[1], "segment_end": True} == after[1]            # the row is kept as measured, only marked
    train(fresh, "--updates", "3")
    assert_changing(fresh)
    c = run_cli("looprl.compare", ext, fresh)
    assert c.returncode == 0, c.stdout + c.stderr
    assert "not compared, ends of earlier segments (A: update 2)" in c.stdout
    # twin: the same row without its mark is an evaluation the fresh run lacks
    m = ext / "metrics.jsonl"
    m.write_text(m.read_text().replace(', "segment_end": true', ""))
    c = run_cli("looprl.compare", ext, fresh)
    assert c.returncode == 1 and "heldout" in c.stdout.splitlines()[-1], c.stdout

def test_learning_bench_refuses_a_used_workdir_in_one_line(tmp_path):
    (tmp_path / "grpo-42").mkdir()
    r = run_cli("looprl.bench", "learning", "--algorithms", "grpo", "--seeds", "42", "--workdir", tmp_path, "--out", tmp_path / "r.json")
    assert r.returncode == 2, r.stderr
    assert r.stderr == f"looprl.bench: learning: --workdir: {tmp_path / 'grpo-42'} exists; give an empty --workdir, or none for a new one\n"
    assert not (tmp_path / "r.json").exists()

def test_learning_bench_default_workdir_is_new_each_time(monkeypatch, tmp_path):
    "Without --workdir, each call's runs go to a new directory under runs/bench/ (of the directory it runs in)."
    import looprl.bench.learning as L
    monkeypatch.chdir(tmp_path)
    seen = []
    def fake_run(alg, seed, out, train_args):
        out.mkdir(); seen.append(out)
        return dict(algorithm=alg, seed=seed, wall_s=1.0, delta_sampled=0.0, delta_greedy=0.0,
                    heldout=[dict(sampled_accuracy=0.5, greedy_accuracy=0.5)] * 2)
    monkeypatch.setattr(L, "learning_run", fake_run)
    L.bench_learning(("grpo",), (42,)); L.bench_learning(("grpo",), (42,))
    assert len(seen) == 2 and seen[0].parent != seen[1].parent
    assert all(p.parent.parent == tmp_path / "runs" / "bench" for p in seen), seen

def test_results_gpu_cells_skip_under_nbconvert_on_a_cpu_and_leave_no_scratch(tmp_path):
    "The Results page's set-up cells and every GPU cell, run as Jupyter runs them (nbconvert --execute) with no GPU visible."
    src = json.loads((ROOT / "nbs" / "90_results.ipynb").read_text())
    code = [c for c in src["cells"] if c["cell_type"] == "code"]
    gpu = [c for c in code if "".join(c["source"]).startswith("#| gpu")]
    assert gpu, "the Results page has GPU cells"
    nb = dict(src, cells=code[:2] + gpu)                   # the imports, the scratch directory and `sh`, then the GPU cells
    (tmp_path / "gpu.ipynb").write_text(json.dumps(nb))
    scratch = tmp_path / "tmp"; scratch.mkdir()
    env = {"CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(scratch), "PYTHONPATH": str(ROOT)}
    r = run_cli("jupyter", "nbconvert", "--to", "notebook", "--execute", "--output", tmp_path / "out.ipynb", tmp_path / "gpu.ipynb", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    outs = [o.get("text", "") for c in json.loads((tmp_path / "out.ipynb").read_text())["cells"][2:] for o in c["outputs"]]
    assert outs and all("skipped: no CUDA GPU here" in "".join(o) for o in outs), outs
    assert not list(scratch.glob("looprl-results-*")), list(scratch.iterdir())
    # twin: without the removal on exit, the same run leaves its scratch folder behind
    code[1]["source"] = [l for l in code[1]["source"] if "atexit.register" not in l]
    (tmp_path / "gpu.ipynb").write_text(json.dumps(dict(src, cells=code[:2])))
    r = run_cli("jupyter", "nbconvert", "--to", "notebook", "--execute", "--output", tmp_path / "out2.ipynb", tmp_path / "gpu.ipynb", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(list(scratch.glob("looprl-results-*"))) == 1

def readme_outputs() -> list[str]:
    "Every directory or file the README's commands write: the value after --output, --out or a command's positional output."
    text = (ROOT / "README.md").read_text()
    cmds = [l.split("#")[0] for block in re.findall(r"```sh\n(.*?)```", text, re.S) for l in block.splitlines() if "python -m looprl" in l]
    outs = []
    for c in cmds:
        a = shlex.split(c[c.index("python -m looprl"):].split("&&")[0])
        outs += [a[i + 1] for i, x in enumerate(a[:-1]) if x in ("--output", "--out")]
        if a[2] in ("looprl.make_tiny", "looprl.warmstart"): outs.append([x for x in a[3:] if not x.startswith("-")][-1 if a[2] == "looprl.make_tiny" else 0])
    return outs

def test_readme_commands_write_where_git_does_not_look():
    outs = readme_outputs()
    assert len(outs) >= 8 and "runs/figures" in outs, outs
    assert all(o.startswith(("runs/", "/tmp/")) for o in outs), outs

def test_readme_cheap_commands_leave_a_clean_clone(tmp_path):
    "The README's commands, with tiny settings, in a copy of the tracked tree under git: nothing to commit afterwards."
    clone = tmp_path / "clone"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file(): (clone / f).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(ROOT / f, clone / f)
    git = lambda *a: subprocess.run(["git", *a], cwd=clone, capture_output=True, text=True, check=True).stdout
    git("init", "-q"); git("add", "-A"); git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tree")
    env = {**os.environ, "PYTHONPATH": str(clone), "PYTHONUNBUFFERED": "1"}
    def sh(*a):
        r = subprocess.run([sys.executable, "-m", *a], cwd=clone, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (a, r.stderr[-1500:])
    sh("looprl.train", "--output", "runs/demo", "--updates", "1", "--max-response-tokens", "6", "--rollout-batch-size", "4",
       "--eval-limit", "4", "--eval-samples", "1", "--no-progress")
    sh("looprl.eval", "runs/demo")
    sh("looprl.plots", "runs/demo", "--out", "runs/figures")
    sh("looprl.bench", "latents", "--n-embd", "64", "--positions", "16")
    assert (clone / "runs" / "figures" / "heldout.png").is_file() and (clone / "runs" / "bench" / "latents_speed.json").is_file()
    assert git("status", "--porcelain") == ""
    # twin: the figures where the README used to put them dirty the clone
    sh("looprl.plots", "runs/demo", "--out", "figures")
    assert git("status", "--porcelain").split() == ["??", "figures/"]
