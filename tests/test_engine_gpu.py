"""The engine on a CUDA device: CUDA-graph decoding gives the same tokens and log-probs as eager decoding
(tiny models of every family, and Huginn-0125 shapes with random weights when memory allows), graphs keep
serving after a new publication, graphs are the default on a GPU, fallbacks (and failed captures) are counted, and the verify CLI holds its CUDA bound.
Skipped without CUDA."""
import json
import pytest
import torch
from looprl.model.config import tiny_config, real_config
from looprl.model.models import build_model, init_weights
from looprl.model.hf import save_checkpoint, export_tensors
from looprl.rollout.engine import Engine, Request
from looprl.bench.rollout import bench_rollout
SHIPPED = ("huginn_raven", "ouro", "nanbeige")   # the families looprl ships (looprl.model.families)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-ckpts")
    return {f: save_checkpoint(init_weights(build_model(tiny_config(f)), seed=4, perturb_norms=True), root / f) for f in SHIPPED}


def requests(n, max_new=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [Request(torch.randint(3, 1024, (int(torch.randint(2, 10, (1,), generator=g)),), generator=g).tolist(),
                    seed=1000 * seed + i, max_new_tokens=max_new - (i % 3), temperature=(1.0, 0.8, 1.2)[i % 3]) for i in range(n)]


def graph_then_eager(engine, reqs):
    engine.cuda_graphs = True
    g = engine.generate(reqs)
    engine.cuda_graphs = False
    e = engine.generate(reqs)
    engine.cuda_graphs = True
    return g, e


@pytest.mark.parametrize("family", SHIPPED)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_graph_equals_eager_tiny(ckpts, family, dtype):
    eng = Engine.from_checkpoint(ckpts[family], device="cuda", dtype=dtype, max_batch=8, max_len=48, cuda_graphs=True)
    for n in (1, 4, 8):                                     # batch sizes that fill a bucket: same shapes, same kernels
        g, e = graph_then_eager(eng, requests(n, seed=n))
        assert [c.tokens for c in g] == [c.tokens for c in e]
        assert [c.logprobs for c in g] == [c.logprobs for c in e]
    assert eng.stats["captures"] == 3 and eng.stats["replays"] > 0 and eng.stats["fallbacks"] == 0
    # a batch of 3 replays the bucket of 4 (one padding row): same tokens, log-probs to rounding
    g, e = graph_then_eager(eng, requests(3, seed=3))
    assert [c.tokens for c in g] == [c.tokens for c in e]
    assert max(abs(a - b) for x, y in zip(g, e) for a, b in zip(x.logprobs, y.logprobs)) <= (1e-5 if dtype == torch.float32 else 2e-2)
    assert eng.stats["captures"] == 3                       # the bucket of 4 was already captured


def test_graphs_serve_new_publications_and_count_fallbacks(ckpts):
    eng = Engine.from_checkpoint(ckpts["huginn_raven"], device="cuda", max_batch=8, max_len=48, cuda_graphs=True, graph_buckets=(1, 2))
    reqs2, reqs4 = requests(2, seed=1), requests(4, seed=2)
    v1 = eng.generate(reqs2)
    other = export_tensors(init_weights(build_model(tiny_config("huginn_raven")), seed=99, perturb_norms=True))
    eng.publish(2, other)
    g, e = graph_then_eager(eng, reqs2)                      # the captured graph reads the new weights (copied in place)
    assert [c.tokens for c in g] == [c.tokens for c in e] and [c.logprobs for c in g] == [c.logprobs for c in e]
    assert [c.tokens for c in g] != [c.tokens for c in v1] and all(c.policy_version == 2 for c in g)
    before = eng.stats["fallbacks"]
    eng.generate(reqs4)                                      # no bucket ≥ 4: eager decode, counted
    assert eng.stats["fallbacks"] > before


def test_graphs_by_default_and_a_failed_capture_decodes_eagerly(ckpts):
    "No cuda_graphs argument on a GPU: graphs. A bucket whose capture fails (a host sync inside it) decodes eagerly, counted."
    reqs = requests(4, seed=5)
    eng = Engine.from_checkpoint(ckpts["huginn_raven"], device="cuda", max_batch=4, max_len=48)
    ref = eng.generate(reqs)
    assert eng.cuda_graphs and eng.stats["captures"] == 1 and eng.stats["replays"] > 0 and eng.stats["fallbacks"] == 0
    bad = Engine.from_checkpoint(ckpts["huginn_raven"], device="cuda", max_batch=4, max_len=48)
    logits = bad.model.logits
    def syncing_logits(h):                                   # a device sync: allowed eagerly, refused while capturing
        torch.cuda.synchronize()
        return logits(h)
    bad.model.logits = syncing_logits
    with pytest.warns(UserWarning, match="could not be captured"):
        out = bad.generate(reqs)
    assert [c.tokens for c in out] == [c.tokens for c in ref]
    assert max(abs(a - b) for x, y in zip(out, ref) for a, b in zip(x.logprobs, y.logprobs)) <= 1e-5
    assert bad.stats["capture_failures"] == 1 and bad.stats["replays"] == 0 and bad.stats["fallbacks"] > 0
    assert bad.generate(reqs)[0].tokens == ref[0].tokens and bad.stats["capture_failures"] == 1
    torch.randn(4, device="cuda"); torch.nn.init.normal_(torch.empty(8, device="cuda"))   # the CUDA generator draws again


def test_graph_equals_eager_huginn_0125_shapes():
    cfg = real_config("huginn-0125")
    free = torch.cuda.mem_get_info()[0]
    if free < 40 * 2**30: pytest.skip(f"needs ~40 GiB free GPU memory, {free / 2**30:.0f} GiB free")
    eng = Engine(cfg, device="cuda", dtype=torch.float16, max_batch=4, max_len=64, cuda_graphs=True)
    src = init_weights(build_model(cfg, device="cuda", dtype=torch.float16), seed=0)
    eng.publish(1, src.state_dict())
    del src; torch.cuda.empty_cache()
    g = torch.Generator().manual_seed(0)
    reqs = [Request(torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist(), seed=7 + i, max_new_tokens=6) for i, n in enumerate((5, 11, 3, 8))]
    gr, ea = graph_then_eager(eng, reqs)
    assert [c.tokens for c in gr] == [c.tokens for c in ea]
    assert [c.logprobs for c in gr] == [c.logprobs for c in ea]
    assert all(len(c.tokens) == 6 and c.depths == [32] * 6 for c in gr)


def test_bench_rollout_cuda_tiny():
    rows = bench_rollout("tiny-huginn_raven", batch_sizes=(1, 4), context=64, dtype=torch.float16, device="cuda", warmup=2, iters=5)
    for r in rows:
        assert r["graph_ms"] > 0 and r["eager_ms"] > 0 and r["bound_ms"] > 0
        assert r["eager_over_graph"] == pytest.approx(r["eager_ms"] / r["graph_ms"])
        assert r["graph_over_bound"] == pytest.approx(r["graph_ms"] / r["bound_ms"])
    print(json.dumps(rows, indent=1))


@pytest.mark.parametrize("family", SHIPPED)
def test_verify_cli_cuda_fp32(ckpts, family):
    from conftest import run_cli
    r = run_cli("looprl.verify", ckpts[family], "--device", "cuda", "--samples", "4", "--max-response-tokens", "16")
    assert r.returncode == 0, (r.stdout, r.stderr)
    rep = json.loads(r.stdout)
    assert rep["device"] == "cuda" and rep["bound"] == 1.5e-5 and rep["max_abs_logprob_diff"] <= 1.5e-5
