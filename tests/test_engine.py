"""The rollout engine on the CPU: requests, the counter-based sampler, batching, stop/length, traces,
batch invariance, the publication transaction and its digests, and the CPU benchmark smoke test."""
import json, math, random
import pytest
import torch
from looprl.model.config import tiny_config, real_config
from looprl.model.models import build_model, init_weights
from looprl.model.hf import save_checkpoint, export_tensors, read_tensors, write_tensors, state_digest
from looprl.model.latents import LATENT_PROFILE, LatentTrace, check_trace, environment_fingerprint
from looprl.rollout.records import Request, Completion, check_requests
from looprl.rollout.sampling import hash_uniform, sample_tokens, processed_logprobs, M32
from looprl.rollout.publication import PublicationError
from looprl.rollout.engine import Engine
from looprl.bench.rollout import bench_rollout, decode_bytes
SHIPPED = ("huginn_raven", "ouro", "nanbeige")   # the families looprl ships (looprl.model.families)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine-ckpts")
    return {f: save_checkpoint(init_weights(build_model(tiny_config(f)), seed=3, perturb_norms=True), root / f) for f in SHIPPED}


def prompts(n, seed=0, lo=2, hi=12):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 1024, (int(torch.randint(lo, hi, (1,), generator=g)),), generator=g).tolist() for _ in range(n)]


# --- sampler -----------------------------------------------------------------------------------

def murmur3(words):
    h = 0
    for k in words:
        k = (k * 0xCC9E2D51) & M32; k = ((k << 15) | (k >> 17)) & M32; k = (k * 0x1B873593) & M32
        h ^= k; h = ((h << 13) | (h >> 19)) & M32; h = (h * 5 + 0xE6546B64) & M32
    h ^= 4 * len(words); h ^= h >> 16; h = (h * 0x85EBCA6B) & M32; h ^= h >> 13; h = (h * 0xC2B2AE35) & M32
    return h ^ (h >> 16)


def test_hash_matches_python_murmur3():
    rng = random.Random(1)
    seeds = [0, 2**63 - 1, 2**32 - 1, 2**32] + [rng.randrange(2**63) for _ in range(12)]
    pos = [0, 4095, 1, 2**31 - 1] + [rng.randrange(1 << 20) for _ in range(12)]
    u = hash_uniform(torch.tensor(seeds), torch.tensor(pos), 70_000)
    for b in range(len(seeds)):
        for v in (0, 1, 65535, 69_999):
            h = murmur3([seeds[b] & M32, seeds[b] >> 32, pos[b], v])
            assert u[b, v].item() == ((h >> 8) + 0.5) / 2**24
    assert u.dtype == torch.float64 and 0 < u.min() and u.max() < 1


def test_gumbel_max_is_softmax_sampling():
    logits, N = torch.tensor([1.5, 0.0, -0.5, 0.7, 2.2]), 30_000
    for T in (1.0, 0.5, 2.0):
        tok, lp = sample_tokens(logits.expand(N, -1), torch.arange(N) * 7919 + 3, torch.full((N,), 4), torch.full((N,), T))
        p = (logits / T).softmax(-1)
        freq = torch.bincount(tok, minlength=5) / N
        chi2 = (N * (freq - p) ** 2 / p).sum().item()
        assert chi2 < 18.47, (T, chi2)     # 99.9% quantile of chi-square with 4 degrees of freedom
        from looprl.training.objectives import selected_logprobs
        assert torch.equal(lp, selected_logprobs((logits / T).expand(N, -1), tok))          # the trainer's own function, bit for bit
        assert torch.allclose(lp, (logits / T).log_softmax(-1)[tok], atol=1e-6, rtol=0)


def test_sampler_rows_are_independent():
    torch.manual_seed(0)
    L = torch.randn(9, 300)
    s, q, T = torch.randint(0, 2**62, (9,)), torch.randint(0, 4096, (9,)), torch.rand(9) + 0.3
    tok, lp = sample_tokens(L, s, q, T)
    for i in range(9):
        t1, l1 = sample_tokens(L[i:i + 1], s[i:i + 1], q[i:i + 1], T[i:i + 1])
        assert t1.item() == tok[i].item() and l1.item() == lp[i].item()
    perm = torch.randperm(9)
    assert torch.equal(sample_tokens(L[perm], s[perm], q[perm], T[perm])[0], tok[perm])


def test_processed_logprobs():
    L, tok = torch.randn(2, 3, 10), torch.randint(0, 10, (2, 3))
    want = (L / 0.7).log_softmax(-1).gather(-1, tok[..., None])[..., 0]
    assert torch.allclose(processed_logprobs(L, tok, 0.7), want)
    assert processed_logprobs(L.half(), tok, 1.0).dtype == torch.float32


# --- requests ----------------------------------------------------------------------------------

@pytest.mark.parametrize("req,needle", [
    (Request([5], seed=-1, max_new_tokens=2), "request 1: seed must be in [0, 2**63)"),
    (Request([5], seed=2**63, max_new_tokens=2), "request 1: seed"),
    (Request([5], seed="3", max_new_tokens=2), "request 1: seed must be an int"),
    (Request([5], seed=1, max_new_tokens=2, temperature=-1.0), "request 1: temperature"),
    (Request([5], seed=1, max_new_tokens=2, temperature=float("nan")), "request 1: temperature"),
    (Request([], seed=1, max_new_tokens=2), "request 1: prompt_ids is empty"),
    (Request([5, 1024], seed=1, max_new_tokens=2), "request 1: prompt_ids[1] = 1024 is outside the vocabulary [0, 1024)"),
    (Request([5, 2.0], seed=1, max_new_tokens=2), "request 1: prompt_ids[1] must be an int"),
    (Request([5], seed=1, max_new_tokens=2, stop_ids=(9999,)), "request 1: stop_ids[0]"),
    (Request([5], seed=1, max_new_tokens=0), "request 1: max_new_tokens must be ≥ 1"),
    (Request([5] * 20, seed=1, max_new_tokens=13), "request 1: prompt of 20 tokens + max_new_tokens 13 = 33 positions exceeds the engine's max_len 32"),
])
def test_bad_requests_are_refused_before_any_work(ckpts, req, needle):
    e = Engine.from_checkpoint(ckpts["ouro"], max_batch=4, max_len=32)
    with pytest.raises(ValueError) as ei:
        e.generate([Request([5, 6], seed=1, max_new_tokens=3), req])
    assert needle in str(ei.value)
    assert e.stats["prefills"] == 0


# --- generation --------------------------------------------------------------------------------

@pytest.mark.parametrize("batching", ["static", "continuous"])
@pytest.mark.parametrize("family", SHIPPED)
def test_generation_lengths_stops_and_traces(ckpts, family, batching):
    e = Engine.from_checkpoint(ckpts[family], max_batch=4, max_len=40, model_revision="rev-a", engine_revision="eng-b",
                               batching=batching)
    cfg = e.cfg
    ps = prompts(6, seed=1)
    reqs = [Request(p, seed=10 + i, max_new_tokens=3 + 2 * i, temperature=0.8 + 0.1 * i) for i, p in enumerate(ps)]
    comps = e.generate(reqs)          # static: batches of 4 and 2; continuous: 4 rows, refilled as 3 and 5 tokens end
    assert [len(c.tokens) for c in comps] == [3, 5, 7, 9, 11, 13]
    assert all(c.finish_reason == "length" for c in comps)
    for r, c in zip(reqs, comps):
        assert c.prompt_ids == r.prompt_ids and len(c.logprobs) == len(c.tokens) and c.depths == [cfg.depth] * len(c.tokens)
        assert all(lp <= 0 and math.isfinite(lp) for lp in c.logprobs)
        t = c.trace
        assert (t.family, t.seed, t.prompt_len, t.response_len, t.prefill_depth, t.depths) == \
               (family, r.seed, len(r.prompt_ids), len(c.tokens), cfg.depth, (cfg.depth,) * len(c.tokens))
        assert (t.policy_version, t.publication_digest, c.policy_version) == (1, e.committed_digest, 1)
        assert t.profile == (LATENT_PROFILE if cfg.family == "huginn_raven" else None)
        assert (t.model_revision, t.engine_revision, t.environment) == ("rev-a", "eng-b", environment_fingerprint(torch.float32))
        check_trace(t, family=family, depth=cfg.depth, model_revision="rev-a", engine_revision="eng-b", environment=environment_fingerprint(torch.float32))
        d = json.loads(json.dumps(c.to_dict()))
        assert Completion.from_dict(d) == c and LatentTrace.from_dict(d["trace"]) == t
    assert e.stats["prefills"] == {"static": 2, "continuous": 3}[batching] and e.stats["completions"] == 6 and e.stats["tokens"] == sum(3 + 2 * i for i in range(6))
    # stop tokens: the stop token ends the completion and is included
    for i in (2, 5):
        stop = comps[i].tokens[1]
        c = e.generate([Request(ps[i], seed=10 + i, max_new_tokens=3 + 2 * i, temperature=0.8 + 0.1 * i, stop_ids=(stop, 1023))])[0]
        assert c.finish_reason == "stop" and c.tokens == comps[i].tokens[:comps[i].tokens.index(stop) + 1]


@pytest.mark.parametrize("family", SHIPPED)
def test_same_seed_same_completion_whatever_the_batch(ckpts, family):
    e = Engine.from_checkpoint(ckpts[family], max_batch=8, max_len=48)
    ps = prompts(12, seed=2)
    probe = Request(ps[0], seed=2**62 + 17, max_new_tokens=14, temperature=1.1)
    others = [Request(p, seed=500 + i, max_new_tokens=2 + (5 * i) % 13) for i, p in enumerate(ps[1:])]
    alone = e.generate([probe])[0]
    layouts = [e.generate(others[:5] + [probe] + others[5:7])[5],                 # row 5 of 8
               e.generate([probe] + others[:2])[0],                                # row 0 of 3
               e.generate(others + [probe])[-1],                                   # second static batch of 12 requests
               Engine.from_checkpoint(ckpts[family], max_batch=3, max_len=48).generate(others[:4] + [probe])[-1],
               Engine.from_checkpoint(ckpts[family], max_batch=1, max_len=32).generate([probe])[0]]
    for c in layouts:
        assert c.tokens == alone.tokens and c.trace == alone.trace
        assert max(abs(a - b) for a, b in zip(c.logprobs, alone.logprobs)) < 1e-5
    assert e.generate([probe])[0] == alone                                        # repeatable, bit for bit


def test_prompt_at_max_len_boundary(ckpts):
    e = Engine.from_checkpoint(ckpts["huginn_raven"], max_batch=2, max_len=16)
    c = e.generate([Request([7] * 10, seed=1, max_new_tokens=6), Request([8], seed=2, max_new_tokens=15)])
    assert [len(x.tokens) for x in c] == [6, 15]


def test_engine_arguments():
    with pytest.raises(ValueError, match="cuda_graphs=True needs a CUDA device"):
        Engine(tiny_config("ouro"), device="cpu", cuda_graphs=True)
    with pytest.raises(ValueError, match="max_len 999 must be in"):
        Engine(tiny_config("ouro"), max_len=999)
    e = Engine(tiny_config("nanbeige"), max_batch=3, max_len=20, batching="static")
    assert tuple(e.cache.k.shape) == (e.cfg.kv_planes, 3, 2, 20, 64)
    e = Engine(tiny_config("nanbeige"), max_batch=3, max_len=20)          # continuous: 3 rows × 2 blocks + the trash
    assert tuple(e.cache.k.shape) == (e.cfg.kv_planes, 7, 2, 16, 64) and tuple(e.cache.table.shape) == (3, 2)


def test_cuda_graphs_by_default_and_the_opt_out():
    "`--device cuda` alone decodes through CUDA graphs; --no-cuda-graphs (or cuda_graphs=False) decodes eagerly."
    from looprl.rollout.engine import graphs_by_default
    from looprl.train import parser, options_from_args
    opts = lambda *flags: options_from_args(parser().parse_args(["--device", "cuda", *flags]))
    assert opts().rollout.cuda_graphs is None and graphs_by_default(opts().rollout.cuda_graphs, "cuda") is True
    assert opts("--no-cuda-graphs").rollout.cuda_graphs is False and graphs_by_default(False, "cuda") is False
    assert opts("--cuda-graphs").rollout.cuda_graphs is True
    assert graphs_by_default(None, "cpu") is False and Engine(tiny_config("ouro"), max_batch=1, max_len=8).cuda_graphs is False


# --- publication -------------------------------------------------------------------------------

def other_weights(family, seed=9):
    return export_tensors(init_weights(build_model(tiny_config(family)), seed=seed, perturb_norms=True))


@pytest.fixture
def served(ckpts):
    e = Engine.from_checkpoint(ckpts["huginn_raven"], max_batch=2, max_len=24)
    probe = [Request([4, 5, 6], seed=8, max_new_tokens=6), Request([9], seed=9, max_new_tokens=4)]
    return e, probe, e.generate(probe)


def test_generation_refused_before_first_commit_and_while_open(ckpts):
    e = Engine(tiny_config("huginn_raven"), max_batch=2, max_len=16)
    req = [Request([4], seed=1, max_new_tokens=2)]
    with pytest.raises(PublicationError, match="no committed publication"):
        e.generate(req)
    e.begin_publication(1)
    with pytest.raises(PublicationError, match="publication 1 is open"):
        e.generate(req)
    e.receive(read_tensors(ckpts["huginn_raven"]))
    with pytest.raises(PublicationError, match="publication 1 is open"):
        e.generate(req)
    e.commit()
    assert len(e.generate(req)[0].tokens) == 2


@pytest.mark.parametrize("case,needle", [
    ("missing", "missing tensor transformer.core_block.2.mlp.fc.weight"),
    ("extra", "unexpected tensor model.norm.weight"),
    ("value-head", "unexpected tensor value_head.weight"),
    ("shape", "tensor transformer.adapter.weight has shape [128, 128], expected [128, 256]"),
    ("duplicate", "tensor transformer.wte.weight was already received"),
    ("alias", "tied lm_head.weight differs from transformer.wte.weight"),
    ("freqs", "freqs_cis does not equal the RoPE buffer"),
    ("digest", "digest mismatch"),
    ("older", "older than the committed version 1"),
    ("conflict", "conflicting publication at committed version 1"),
    ("bad-version", "publication version must be an int"),
    ("integer", "must be a floating-point tensor"),
])
def test_publication_refusals_keep_serving_committed(served, case, needle):
    e, probe, before = served
    o = other_weights("huginn_raven")
    v0, d0 = e.committed_version, e.committed_digest
    attempt = {
        "missing": lambda: e.publish(2, {k: v for k, v in o.items() if k != "transformer.core_block.2.mlp.fc.weight"}),
        "extra": lambda: e.publish(2, {**o, "model.norm.weight": torch.ones(128)}),
        "value-head": lambda: e.publish(2, {**o, "value_head.weight": torch.zeros(1, 128)}),
        "shape": lambda: e.publish(2, {**o, "transformer.adapter.weight": torch.zeros(128, 128)}),
        "duplicate": lambda: e.publish(2, [{k: v for k, v in o.items() if k != "lm_head.weight"}, {"transformer.wte.weight": o["transformer.wte.weight"]}]),
        "alias": lambda: e.publish(2, {**o, "lm_head.weight": o["lm_head.weight"].clone().index_fill_(0, torch.tensor([5]), 0.0)}),
        "freqs": lambda: e.publish(2, {**o, "freqs_cis": o["freqs_cis"].clone().mul_(1 + 1e-6)}),
        "digest": lambda: e.publish(2, o, digest=state_digest({**o, "transformer.ln_f.weight": o["transformer.ln_f.weight"] + 1})),
        "older": lambda: e.publish(0, o),
        "conflict": lambda: e.publish(1, o),
        "bad-version": lambda: e.publish(2.0, o),
        "integer": lambda: e.publish(2, {**o, "transformer.ln_f.weight": torch.ones(128, dtype=torch.int64)}),
    }[case]
    with pytest.raises(PublicationError) as ei:
        attempt()
    assert needle in str(ei.value)
    assert (e.committed_version, e.committed_digest) == (v0, d0)
    assert e.generate(probe) == before                       # still serving the committed version, bit for bit
    e.publish(2, o)                                          # and the transaction was cleaned up: a good one goes through
    assert e.committed_version == 2 and e.generate(probe) != before


def test_alias_compared_as_sent_not_after_cast(ckpts):
    "In FP16, two FP32 aliases that differ below FP16 resolution still differ as sent."
    e = Engine.from_checkpoint(ckpts["huginn_raven"], dtype=torch.float16, max_batch=1, max_len=8)
    o = other_weights("huginn_raven")
    lm = o["lm_head.weight"].clone(); lm[0, 0] += 1e-7 * max(1.0, lm[0, 0].abs().item())
    assert torch.equal(lm.half(), o["transformer.wte.weight"].half()) and not torch.equal(lm, o["transformer.wte.weight"])
    with pytest.raises(PublicationError, match="tied lm_head.weight differs"):
        e.publish(2, {**o, "lm_head.weight": lm})
    assert e.committed_version == 1


def test_transaction_api(served, tmp_path):
    e, probe, before = served
    o = other_weights("huginn_raven")
    with pytest.raises(PublicationError, match="no publication is open"):
        e.receive(o)
    with pytest.raises(PublicationError, match="no publication is open"):
        e.commit()
    e.begin_publication(5)
    with pytest.raises(PublicationError, match="publication 5 is already open"):
        e.begin_publication(6)
    e.receive({k: v for k, v in o.items() if "prelude" in k})
    e.abort()
    assert e.generate(probe) == before and e.committed_version == 1
    # an error inside receive aborts the transaction
    e.begin_publication(5)
    with pytest.raises(PublicationError, match="unexpected tensor"):
        e.receive({"nope": torch.zeros(1)})
    with pytest.raises(PublicationError, match="no publication is open"):
        e.commit()
    # a partial publication is refused at commit, and nothing of it is served
    e.begin_publication(5)
    e.receive({k: v for k, v in o.items() if "coda" not in k})
    with pytest.raises(PublicationError, match="missing tensor transformer.coda"):
        e.commit()
    assert e.generate(probe) == before
    # a good one, in many chunks
    e.begin_publication(5)
    for k, v in o.items(): e.receive({k: v})
    d = e.commit(state_digest(o))
    assert (e.committed_version, d) == (5, state_digest(o))
    after = e.generate(probe)
    assert after != before and all(c.policy_version == 5 and c.trace.publication_digest == d for c in after)
    # idempotent re-send of the committed version, and versions strictly increase
    assert e.publish(5, o) == d and e.committed_version == 5 and e.generate(probe) == after
    with pytest.raises(PublicationError, match="older than the committed version 5"):
        e.publish(4, o)


@pytest.mark.parametrize("family", SHIPPED)
def test_digest_is_independent_of_chunking_and_transport(ckpts, tmp_path, family):
    o = other_weights(family, seed=21)
    e = Engine.from_checkpoint(ckpts[family], max_batch=1, max_len=8)
    want = state_digest(o)
    names = sorted(o)
    assert e.publish(2, o) == want
    assert e.publish(3, [{n: o[n]} for n in reversed(names)]) == want
    assert e.publish(4, [{n: o[n] for n in names[i::3]} for i in range(3)]) == want
    for shard in (None, 150_000):
        d = tmp_path / f"{family}-{shard}"; d.mkdir()
        write_tensors(o, d, max_shard_bytes=shard)
        assert e.publish_dir(5 if shard is None else 6, d) == want
    assert len(list((tmp_path / f"{family}-150000").glob("*.safetensors"))) > 1
    assert e.committed_digest == want and e.committed_version == 6
    # the digest of a checkpoint directory served by from_checkpoint equals its tensors' state digest
    assert Engine.from_checkpoint(ckpts[family], version=7, max_batch=1, max_len=8).committed_digest == state_digest(read_tensors(ckpts[family]))


def test_publish_dir_refusals(served, tmp_path):
    e, probe, before = served
    with pytest.raises(PublicationError, match="no model.safetensors"):
        e.publish_dir(2, tmp_path)
    o = other_weights("huginn_raven")
    d = tmp_path / "shards"; d.mkdir()
    write_tensors(o, d, max_shard_bytes=150_000)
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    files = sorted(set(idx["weight_map"].values()))
    moved = next(n for n, f in idx["weight_map"].items() if f == files[0])
    idx["weight_map"][moved] = files[1]
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(PublicationError, match="differ from those the manifest"):
        e.publish_dir(2, d)
    assert e.committed_version == 1 and e.generate(probe) == before


# --- benchmark ---------------------------------------------------------------------------------

def test_bench_rollout_cpu_smoke():
    rows = bench_rollout("tiny-ouro", batch_sizes=(1, 2), context=32, dtype=torch.float32, device="cpu", warmup=1, iters=2)
    assert [r["B"] for r in rows] == [1, 2]
    for r in rows:
        assert r["eager_ms"] > 0 and r["graph_ms"] is None and r["bound_ms"] > 0 and r["T"] == 32
        assert r["tok_s"] == pytest.approx(r["B"] / r["default_ms"] * 1e3) and r["default_path"] == "eager"
    with pytest.raises(ValueError, match="unknown preset"):
        bench_rollout("gpt2", device="cpu")


def test_decode_bytes_reproduce_the_h200_anchor_bounds():
    h = build_model(real_config("huginn-0125"), device="meta", dtype=torch.float16)
    ms = [sum(decode_bytes(h, B, 256).values()) / 4.8e12 * 1e3 for B in (1, 8, 32, 64)]
    assert ms == pytest.approx([22.8, 23.8, 27.4, 32.1], abs=0.1)
    n = build_model(real_config("nanbeige4.2-3b"), device="meta", dtype=torch.float32)
    b = decode_bytes(n, 1, 100)
    layers = sum(p.numel() for p in n.model.layers.parameters()) * 4
    assert b["weights"] > 2 * layers and b["kv"] == 2 * 44 * 8 * 100 * 128 * 4


def test_decode_bytes_count_every_run_of_hrm_texts_stacks():
    "An H cycle runs the L stack L_cycles (3) times and the H stack once: one decode step reads 8 stack runs, not 4."
    h = build_model(real_config("hrm-text-1b"), device="meta", dtype=torch.float16)
    stack = 16 * (5 * 1536 * 1536 + 3 * 1536 * 4096)
    assert decode_bytes(h, 1, 256)["weights"] == 2 * (2 * (3 + 1) * stack + 65536 * 1536 + 1536)    # FP16


def test_published_rope_table_is_the_revisions(ckpts):
    "freqs_cis is checked against the CPU table of the config and copied in, whatever the model's own buffer held."
    from looprl.model.families.huginn import huginn_freqs_cis
    e = Engine.from_checkpoint(ckpts["huginn_raven"], max_batch=1, max_len=8)
    with torch.no_grad(): e.model.freqs_cis.add_(1e-3)
    e.publish(2, other_weights("huginn_raven"))
    assert torch.equal(e.model.freqs_cis, huginn_freqs_cis(e.cfg)) and e.model.freqs_cis.dtype == torch.float32


def test_failure_while_copying_refuses_generation_until_a_complete_publication(ckpts, served, monkeypatch):
    "If copying into the live model fails midway, the weights are a mix: generation is refused until a full commit."
    import looprl.rollout.engine as E
    e, probe, before = served
    real_apply = E.Publication.apply
    def broken(self):
        with torch.no_grad(): self.model.transformer.wte.weight.copy_(self.staged["transformer.wte.weight"])
        raise RuntimeError("device lost")
    monkeypatch.setattr(E.Publication, "apply", broken)
    with pytest.raises(RuntimeError, match="device lost"):
        e.publish(2, other_weights("huginn_raven"))
    with pytest.raises(PublicationError, match="failed midway"):
        e.generate(probe)
    monkeypatch.setattr(E.Publication, "apply", real_apply)
    assert e.publish(1, read_tensors(ckpts["huginn_raven"])) == e.committed_digest   # the committed version, re-applied in full
    assert e.generate(probe) == before and e.committed_version == 1


def test_engine_leaves_global_rng_alone(ckpts):
    "Building an engine, publishing and generating draw nothing from torch's global generator (resume equality)."
    other = other_weights("huginn_raven")
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    e = Engine.from_checkpoint(ckpts["huginn_raven"], max_batch=2, max_len=16)
    e.generate([Request([4, 5], seed=1, max_new_tokens=5), Request([6], seed=2, max_new_tokens=3)])
    e.publish(2, other)
    assert torch.equal(torch.random.get_rng_state(), state)
