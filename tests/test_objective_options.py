"""The objective options as runs: the mismatch correction (--mismatch-correction, --mismatch-cap) and the KL penalty
to the reference policy (--kl-coef, --kl-estimator), dynamic sampling (--dynamic-sampling). Each: a
hand-computed example, resume equality in fresh processes (3 uninterrupted updates vs --stop-after 2 then --resume)
with a twin that sees the option at work (the same run without it ends with other weights), older contracts resume,
and bad values are refused in one line with exit 2. Dynamic sampling also: no group whose rewards are all equal
reaches the loss, every batch is full, and a resumed run draws the same replacement prompts (twin: a resumed run whose
data cursor was moved draws others)."""
import json, math, shutil
import pytest, torch
from conftest import run_cli, assert_changing, updates

FAST = ["--max-response-tokens", "6", "--no-eval", "--no-progress"]
COMMON = ["--precision", "fp32", "--optimizer", "adamw", "--lr", "1e-3", "--rollout-batch-size", "4", "--updates", "3"]

def train(model, data, out, *extra):
    return run_cli("looprl.train", "--model", model, "--data", data, "--output", out, *FAST, *COMMON, *extra)

def compare_fields(a, b) -> tuple[int, dict]:
    r = run_cli("looprl.compare", "--json", a, b)
    return r.returncode, {f["field"]: f["status"] for f in json.loads(r.stdout)["fields"]}

def straight_and_resumed(model, data, root, *args):
    "An uninterrupted run of 3 updates, and one stopped after 2 and resumed in a fresh process; both must be equal."
    a, b = root / "straight", root / "stopped"
    r = train(model, data, a, *args); assert r.returncode == 0, r.stderr
    r = train(model, data, b, *args, "--stop-after", "2"); assert r.returncode == 0, r.stderr
    assert len(updates(b)) == 2
    r = run_cli("looprl.train", "--output", b, "--resume", "--no-progress"); assert r.returncode == 0, r.stderr
    assert_changing(a)
    code, fields = compare_fields(a, b)
    assert code == 0 and set(fields.values()) <= {"equal", "n/a"}, fields
    assert fields["actor"] == "equal"
    return a, b

def assert_option_acts(a, twin):
    "The twin (the same run without the option) starts from the same first rollout and ends with other weights."
    code, fields = compare_fields(a, twin)
    assert code == 1 and fields["actor"] == "different", fields
    assert updates(twin)[0]["digest"] == updates(a)[0]["digest"]

# --- the mismatch correction ---------------------------------------------------------------------------------------

def test_mismatch_weights_by_hand():
    "The objectives chapter's table: engine probability 1/4, token ratios (0.6, 3 | 1.5, 1.8, 1), cap 2."
    from looprl.training.objectives import mismatch_weights
    eng = torch.full((2, 3), math.log(0.25)); eng[0, 2] = -math.inf
    tr = torch.log(torch.tensor([[.6, 3.0, 1.], [1.5, 1.8, 1.0]]) / 4); tr[0, 2] = 0.0
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    want = {"token-tis": ([.6, 2, 0, 1.5, 1.8, 1], 6.9 / 5, 1 / 5), "token-mask": ([.6, 0, 0, 1.5, 1.8, 1], 4.9 / 5, 1 / 5),
            "seq-tis": ([1.8, 1.8, 0, 2, 2, 2], 9.6 / 5, 3 / 5), "seq-mask": ([1.8, 1.8, 0, 0, 0, 0], 3.6 / 5, 3 / 5)}
    for mode, (w, mean, frac) in want.items():
        got, keep, met = mismatch_weights(tr, eng, mask, mode, 2.0)
        assert torch.allclose(got.flatten(), torch.tensor(w), atol=1e-5), (mode, got)
        kind = "truncated" if "tis" in mode else "masked"
        assert math.isclose(met["mismatch_weight_mean"], mean, abs_tol=1e-5), (mode, met)
        assert math.isclose(met[f"mismatch_{kind}_frac"], frac, abs_tol=1e-6), (mode, met)
        assert keep.flatten().tolist() == ([x > 0 for x in w] if kind == "masked" else [True, True, False] + [True] * 3)
    # twin: the untruncated importance weight ρ itself is not what token-tis gives
    rho = (tr - eng).exp() * mask
    assert not torch.allclose(rho, mismatch_weights(tr, eng, mask, "token-tis", 2.0)[0], atol=1e-3)

MISMATCH = {"grpo-token-tis": ["--algorithm", "grpo", "--mismatch-correction", "token-tis", "--mismatch-cap", "1.01"],
            "ppo-seq-mask": ["--algorithm", "ppo", "--mismatch-correction", "seq-mask", "--mismatch-cap", "1.5"]}

@pytest.mark.parametrize("name", list(MISMATCH))
def test_mismatch_correction_resumes_exactly_and_acts(shipped, arithmetic, tmp_path, name):
    """Under --async (a policy lag of 1: the replay differs from the engine's log-probs) the correction truncates or
    masks tokens; resumed equals uninterrupted; twin: the same run without it learns otherwise."""
    m, args = shipped["huginn_raven"], MISMATCH[name] + ["--async"]
    a, _ = straight_and_resumed(m, arithmetic, tmp_path, *args)
    kind = "truncated" if "tis" in name else "masked"
    ua = updates(a)
    assert all(f"mismatch_{kind}_frac" in u and "mismatch_weight_mean" in u for u in ua)
    assert ua[0][f"mismatch_{kind}_frac"] == 0                           # no lag yet: the replay is the engine's
    assert any(u[f"mismatch_{kind}_frac"] > 0 for u in ua[1:]), [u[f"mismatch_{kind}_frac"] for u in ua]
    settings = json.loads((a / "run.json").read_text())["contract"]["settings"]
    assert (settings["mismatch_correction"], settings["mismatch_cap"]) == (args[3], float(args[5]))
    twin = tmp_path / "twin"
    r = train(m, arithmetic, twin, *args[:2], "--async"); assert r.returncode == 0, r.stderr
    assert "mismatch_weight_mean" not in updates(twin)[0]
    assert_option_acts(a, twin)

# --- the KL penalty to the reference policy --------------------------------------------------------------------------

def test_kl_penalty_by_hand():
    "π = (1/2, 1/4), π_ref = (1/4, 1/2): k1 = (ln 2, −ln 2), gradient 1; k3 = (ln 2 − 1/2, 1 − ln 2), gradient 1 − π_ref/π."
    from looprl.training.objectives import kl_penalty
    lp = torch.log(torch.tensor([[.5, .25, .9]])).requires_grad_()
    ref, mask = torch.log(torch.tensor([[.25, .5, 0.]])), torch.tensor([[1, 1, 0]])
    k1, k3 = kl_penalty(lp, ref, mask, "k1"), kl_penalty(lp, ref, mask, "k3")
    ln2 = math.log(2)
    assert torch.allclose(k1, torch.tensor([[ln2, -ln2, 0.]])) and torch.allclose(k3, torch.tensor([[ln2 - .5, 1 - ln2, 0.]]))
    g1, = torch.autograd.grad(k1.sum(), lp); g3, = torch.autograd.grad(k3.sum(), lp)
    assert torch.allclose(g1, torch.tensor([[1., 1., 0.]])) and torch.allclose(g3, torch.tensor([[.5, -1., 0.]]))
    # twin: the reversed KL's k3 (x = log π − log π_ref) gives other values
    assert not torch.allclose(kl_penalty(ref, lp.detach(), mask, "k3"), k3.detach())

KL = {"grpo-k3": ["--algorithm", "grpo", "--kl-coef", "0.5"],
      "cispo-k1": ["--algorithm", "cispo", "--kl-coef", "0.5", "--kl-estimator", "k1"]}

@pytest.mark.parametrize("name", list(KL))
def test_kl_penalty_resumes_exactly_and_acts(shipped, arithmetic, tmp_path, name):
    """The reference (the initial weights) is rebuilt on resume: resumed equals uninterrupted; the first step's KL is 0
    (the policy is the reference, up to the replay's FP64 products), later ones are not; twin: the same run without the penalty learns otherwise."""
    m, args = shipped["huginn_raven"], KL[name]
    a, _ = straight_and_resumed(m, arithmetic, tmp_path, *args)
    ua = updates(a)
    assert abs(ua[0]["step0_ref_kl"]) < 1e-6 and all(u["ref_kl"] != 0 for u in ua[1:]), [u["ref_kl"] for u in ua]
    settings = json.loads((a / "run.json").read_text())["contract"]["settings"]
    assert (settings["kl_coef"], settings["kl_estimator"]) == (0.5, "k1" if "k1" in name else "k3")
    twin = tmp_path / "twin"
    r = train(m, arithmetic, twin, *args[:2]); assert r.returncode == 0, r.stderr
    assert "ref_kl" not in updates(twin)[0]
    assert_option_acts(a, twin)

# --- dynamic sampling ------------------------------------------------------------------------------------------------

def test_fill_batch_by_hand():
    "Prompts 0, 1, 2, … of which 1 and 3 teach, P = 3, G = 2, at most 4 extra prompts: the chapter's example."
    from looprl.run.dynamic_sampling import fill_batch, has_signal
    def fake(teach):
        calls = []
        def draw(n, first):
            start = sum(c[0] for c in calls); calls.append((n, first)); rows = list(range(start, start + n))
            return rows, [(r, (first + j) * 2 + g) for j, r in enumerate(rows) for g in range(2)], [None] * 2 * n
        return draw, lambda rows, reqs, comps: [1 - g % 2 / 2 if r in teach else 0.0 for r, g in reqs], calls
    draw, rewards_of, calls = fake({1, 3})
    rows, reqs, _, met = fill_batch(draw, rewards_of, 3, 2, 4)
    assert rows == [1, 3, 0] and met == dict(dynamic_drawn=7, dynamic_dropped=4, dynamic_filled=1)
    assert calls == [(3, 0), (2, 3), (1, 5), (1, 6)] and len({i for _, i in reqs}) == 6      # no completion number twice
    draw, rewards_of, calls = fake({1, 3, 7})
    rows, reqs, _, met = fill_batch(draw, rewards_of, 3, 2, 10)
    assert rows == [1, 3, 7] and met["dynamic_filled"] == 0
    assert all(has_signal(rewards_of(None, reqs[2 * j:2 * j + 2], None)) for j in range(3))
    # twin: without extra draws the groups without signal stay in the batch
    draw, rewards_of, calls = fake({1, 3})
    rows, reqs, _, met = fill_batch(draw, rewards_of, 3, 2, 0)
    assert rows == [1, 0, 2] and not all(has_signal(rewards_of(None, reqs[2 * j:2 * j + 2], None)) for j in range(3))

def groups(run, u, G=4) -> list[tuple]:
    "The (prompt row, rewards) of each group of update u's rollout."
    comps = json.loads((run / "rollouts" / f"update-{u:06d}.json").read_text())["completions"]
    return [(comps[i]["prompt_row"], tuple(c["reward"] for c in comps[i:i + G])) for i in range(0, len(comps), G)]

def test_dynamic_sampling_fills_the_batch_and_resumes_exactly(shipped, arithmetic, tmp_path):
    from looprl.run.dynamic_sampling import has_signal
    m, args = shipped["huginn_raven"], ["--algorithm", "grpo", "--dynamic-sampling"]
    a, b = straight_and_resumed(m, arithmetic, tmp_path, *args)
    ua = updates(a)
    for run in (a, b):
        for u in range(3):
            gs = groups(run, u)
            assert len(gs) == 4 and all(has_signal(r) for _, r in gs), (run, u, gs)   # full, no group without signal
    assert all(x["dynamic_filled"] == 0 and x["dynamic_drawn"] == 4 + x["dynamic_dropped"] for x in ua), ua
    assert sum(x["dynamic_dropped"] for x in ua) > 0                              # replacements were drawn
    assert [groups(a, u) for u in range(3)] == [groups(b, u) for u in range(3)]   # the same replacement prompts
    assert [x["dynamic_drawn"] for x in ua] == [x["dynamic_drawn"] for x in updates(b)]
    # twin: a resumed run whose data cursor moved by one prompt draws other prompts
    c = tmp_path / "moved"
    r = train(m, arithmetic, c, *args, "--stop-after", "2"); assert r.returncode == 0, r.stderr
    f = c / "checkpoints" / "update-000002" / "loop.json"
    d = json.loads(f.read_text()); d["cursor"]["offset"] += 1; f.write_text(json.dumps(d))
    r = run_cli("looprl.train", "--output", c, "--resume", "--no-progress"); assert r.returncode == 0, r.stderr
    assert [p for p, _ in groups(c, 2)] != [p for p, _ in groups(a, 2)]
    # twin: without dynamic sampling a group without signal reaches the loss, and the run learns otherwise
    twin = tmp_path / "twin"
    r = train(m, arithmetic, twin, *args[:2]); assert r.returncode == 0, r.stderr
    assert any(not has_signal(r) for u in range(3) for _, r in groups(twin, u))
    assert "dynamic_drawn" not in updates(twin)[0]
    assert_option_acts(a, twin)

def test_dynamic_sampling_limit_completes_the_batch(shipped, arithmetic, tmp_path):
    "With no extra prompt allowed the batch is still full: its groups without signal stay, counted as filled."
    from looprl.run.dynamic_sampling import has_signal
    out = tmp_path / "limited"
    r = train(shipped["huginn_raven"], arithmetic, out, "--algorithm", "grpo", "--dynamic-sampling",
              "--dynamic-sampling-max-extra", "0", "--updates", "2")
    assert r.returncode == 0, r.stderr
    for x, u in zip(updates(out), range(2)):
        flat = sum(not has_signal(rw) for _, rw in groups(out, u))
        assert len(groups(out, u)) == 4 and (x["dynamic_drawn"], x["dynamic_filled"]) == (4, flat), x

# --- every option: older contracts and bad values -------------------------------------------------------------------

NEW_SETTINGS = ("mismatch_correction", "mismatch_cap", "kl_coef", "kl_estimator", "dynamic_sampling",
                "dynamic_sampling_max_extra")

def test_a_contract_from_before_these_options_resumes(shipped, arithmetic, tmp_path):
    "A run recorded before these settings existed resumes; twin: a stored value that differs from the request is refused."
    base = tmp_path / "base"
    r = train(shipped["huginn_raven"], arithmetic, base, "--algorithm", "grpo", "--updates", "2", "--stop-after", "1")
    assert r.returncode == 0, r.stderr
    old, changed = tmp_path / "old", tmp_path / "changed"
    for d in (old, changed): shutil.copytree(base, d)
    doc = json.loads((old / "run.json").read_text())
    for k in NEW_SETTINGS:
        doc["contract"]["settings"].pop(k); doc["options"].pop(k, None)
    (old / "run.json").write_text(json.dumps(doc))
    r = run_cli("looprl.train", "--output", old, "--resume", "--no-progress"); assert r.returncode == 0, r.stderr
    assert len(updates(old)) == 2
    doc["contract"]["settings"]["mismatch_correction"] = "token-tis"
    (changed / "run.json").write_text(json.dumps(doc))
    r = run_cli("looprl.train", "--output", changed, "--resume", "--no-progress")
    assert r.returncode == 2 and "settings.mismatch_correction: run has 'token-tis', requested 'off'" in r.stderr, r.stderr

@pytest.mark.parametrize("flags,message", [
    (["--mismatch-correction", "tis"], "argument --mismatch-correction: invalid choice: 'tis'"),
    (["--mismatch-cap", "0.5"], "--mismatch-cap: must be a finite number ≥ 1, got 0.5"),
    (["--mismatch-cap", "inf"], "--mismatch-cap: must be a finite number ≥ 1"),
    (["--kl-coef", "-0.1"], "--kl-coef: must be a finite number ≥ 0, got -0.1"),
    (["--kl-coef", "nan"], "--kl-coef: must be a finite number ≥ 0"),
    (["--kl-estimator", "k2"], "argument --kl-estimator: invalid choice: 'k2'"),
    (["--kl-coef", "0.1", "--backend", "megatron"], "--kl-coef: the torch backend keeps the reference policy"),
    (["--dynamic-sampling"], "--dynamic-sampling: only the critic-free objectives (grpo, gspo, cispo) compare groups, not ppo"),
    (["--algorithm", "grpo", "--dynamic-sampling-max-extra", "-1"], "--dynamic-sampling-max-extra: must be an int ≥ 0"),
    (["--algorithm", "grpo", "--dynamic-sampling", "--async"], "--async: not supported with --dynamic-sampling")])
def test_bad_values_are_one_line(tmp_path, flags, message):
    r = run_cli("looprl.train", "--output", tmp_path / "x", "--updates", "1", *flags)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and message in r.stderr, r.stderr
    assert not (tmp_path / "x").exists()
