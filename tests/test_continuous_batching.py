"""Continuous batching and block KV in the native engine (looprl.rollout.batching): a completion's tokens, log-probs
and latent trace do not depend on when it entered, which row it used, the engine batch size, the block size or its
neighbours, bit for bit on the CPU in FP32; the twin (a refilled row keeps a stale KV block) breaks it."""
import pytest
import torch
from looprl.model.config import tiny_config
from looprl.model.models import build_model, init_weights
from looprl.model.hf import save_checkpoint
from looprl.rollout.records import Request
from looprl.rollout.engine import Engine
from looprl.rollout.batching import BlockKV, kv_bytes_for
FAMILIES = ("huginn_raven", "ouro", "nanbeige", "hrm_text")

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("batching-ckpts")
    return {f: save_checkpoint(init_weights(build_model(tiny_config(f)), seed=11, perturb_norms=True), root / f)
            for f in FAMILIES}


def requests(n=14, seed=0):
    "Prompts of 2…25 tokens and long-tailed budgets (most short, a few long), temperatures 0.7…1.3, one greedy."
    g = torch.Generator().manual_seed(seed)
    budgets = [2, 3, 41, 4, 2, 5, 3, 30, 2, 6, 3, 2, 22, 4][:n]
    return [Request(torch.randint(3, 1024, (int(torch.randint(2, 26, (1,), generator=g)),), generator=g).tolist(),
                    seed=1000 + 7 * i, max_new_tokens=m, temperature=0.0 if i == 3 else 0.7 + 0.05 * i)
            for i, m in enumerate(budgets)]


def same(a, b) -> bool:
    "Bit for bit: tokens, log-probs (float equality), depths, traces, finish reasons, in request order."
    return len(a) == len(b) and all(x.tokens == y.tokens and x.logprobs == y.logprobs and x.trace == y.trace
                                    and x.depths == y.depths and x.finish_reason == y.finish_reason
                                    for x, y in zip(a, b))


def layouts(ckpt, reqs):
    "The same requests under other orders, engine batch sizes, block sizes, pools and neighbours, back in order."
    n, out = len(reqs), {}
    perm = list(torch.randperm(n, generator=torch.Generator().manual_seed(5)))
    got = Engine.from_checkpoint(ckpt, max_batch=3, max_len=80, block_size=4).generate([reqs[i] for i in perm])
    out["permuted, max_batch 3, blocks of 4"] = [got[perm.index(i)] for i in range(n)]
    out["reversed, max_batch 5, blocks of 16"] = Engine.from_checkpoint(ckpt, max_batch=5, max_len=80).generate(
        reqs[::-1])[::-1]
    # a pool of 12 blocks of 8 for 4 rows: rows are preempted and redone
    tight = Engine.from_checkpoint(ckpt, max_batch=4, max_len=80, block_size=8, kv_blocks=12)
    out["tight pool (preemptions)"] = tight.generate(reqs)
    assert tight.stats["preemptions"] > 0 and tight.cache.peak <= 12
    # each request alone, and among strangers (other prompts and seeds) at another place in the queue
    one = Engine.from_checkpoint(ckpt, max_batch=1, max_len=80)
    out["one row"] = [one.generate([r])[0] for r in reqs]
    strangers = requests(14, seed=9)
    mixed = Engine.from_checkpoint(ckpt, max_batch=4, max_len=80, block_size=8)
    got = mixed.generate([x for pair in zip(strangers, reqs) for x in pair])
    out["interleaved with strangers"] = got[1::2]
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_completion_independent_of_order_rows_batch_and_neighbours(ckpts, family):
    reqs = requests()
    ref = Engine.from_checkpoint(ckpts[family], max_batch=4, max_len=80, batching="static").generate(reqs)
    assert len({len(c.tokens) for c in ref}) > 5 and any(c.finish_reason == "length" for c in ref)
    cont = Engine.from_checkpoint(ckpts[family], max_batch=4, max_len=80)
    assert cont.batching == "continuous" and isinstance(cont.cache, BlockKV)
    assert same(cont.generate(reqs), ref)
    for name, got in layouts(ckpts[family], reqs).items():
        assert same(got, ref), name
    # the layouts are not all the same schedule: continuous batching refilled rows and kept them busier
    static = Engine.from_checkpoint(ckpts[family], max_batch=4, max_len=80, batching="static")
    static.generate(reqs)
    assert cont.stats["row_steps"] < static.stats["row_steps"]
    assert cont.stats["tokens"] == static.stats["tokens"] == sum(len(c.tokens) for c in ref)


def test_blocks_are_returned_and_the_peak_is_what_the_rows_held(ckpts):
    reqs = requests()
    e = Engine.from_checkpoint(ckpts["huginn_raven"], max_batch=4, max_len=80, block_size=8)
    comps = e.generate(reqs)
    kv = e.cache
    assert kv.held == 0 and len(kv.free) == kv.blocks and int(kv.table.abs().sum()) == 0   # all returned, unbound
    # never more than 4 rows of their own positions (prompt + tokens, ≤ 80 each) at once
    lengths = sorted((len(r.prompt_ids) + len(c.tokens) for r, c in zip(reqs, comps)), reverse=True)
    assert 0 < kv.peak * kv.block_nbytes <= kv_bytes_for(e.cfg, lengths[:4], 8) + 4 * kv.block_nbytes
    assert kv.peak < kv.blocks                                  # less than a static cache of 4 × 80 positions


def test_twin_a_refilled_row_that_keeps_a_stale_block_breaks_equality(ckpts, monkeypatch):
    """The twin: `bind` that leaves a row's old entries in place (a refilled row keeps the previous sequence's
    blocks): the row reads another request's keys and the completions differ."""
    reqs = requests()
    ref = Engine.from_checkpoint(ckpts["huginn_raven"], max_batch=4, max_len=80, batching="static").generate(reqs)
    real = BlockKV.bind
    def stale_bind(self, row, blocks):
        old = self.table[row].clone()
        real(self, row, blocks)
        keep = old != 0
        self.table[row][keep] = old[keep]                    # the stale entries survive the refill
    monkeypatch.setattr(BlockKV, "bind", stale_bind)
    got = Engine.from_checkpoint(ckpts["huginn_raven"], max_batch=4, max_len=80, block_size=8).generate(reqs)
    assert not same(got, ref)
    assert [c.tokens for c in got] != [c.tokens for c in ref]
    monkeypatch.setattr(BlockKV, "bind", real)              # and with the real bind, the same run is equal again
    assert same(Engine.from_checkpoint(ckpts["huginn_raven"], max_batch=4, max_len=80, block_size=8).generate(reqs),
                ref)


def test_adaptive_exits_run_static_batches_under_continuous_batching(ckpts):
    reqs = [Request(r.prompt_ids, seed=r.seed, max_new_tokens=r.max_new_tokens, exit_threshold=0.6)
            for r in requests(6)]
    ref = Engine.from_checkpoint(ckpts["ouro"], max_batch=4, max_len=80, batching="static").generate(reqs)
    e = Engine.from_checkpoint(ckpts["ouro"], max_batch=4, max_len=80)
    assert same(e.generate(reqs), ref) and e.stats["prefills"] == 2           # two static batches of 4 and 2
    assert any(d < e.cfg.depth for c in ref for d in c.depths)               # the exits did leave early


@pytest.mark.parametrize("kw, needle", [
    (dict(batching="dynamic"), "batching: one of continuous, static, got 'dynamic'"),
    (dict(block_size=0), "block_size must be an int ≥ 1, got 0"),
    (dict(block_size=16, kv_blocks=2), "kv_blocks must be an int ≥ 4"),
])
def test_engine_batching_arguments(kw, needle):
    with pytest.raises(ValueError) as ei:
        Engine(tiny_config("huginn_raven"), max_batch=2, max_len=64, **kw)
    assert needle in str(ei.value)


CUDA = torch.cuda.is_available()


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device (the fused decode kernels)")
def test_gpu_fused_kernels_through_a_block_table_equal_contiguous_rows():
    """The fused rope/cache-write and decode-attention kernels over a block pool, rows scattered over shuffled
    blocks, write the same keys and return the same attention, bit for bit, as over contiguous rows."""
    from looprl.model import kernels as K
    from looprl.model.models import KVCache
    g = torch.Generator(device="cuda").manual_seed(0)
    B, H, Hkv, D, T, bs = 3, 8, 2, 64, 80, 16
    cols = T // bs
    kc, vc = (torch.randn(B, Hkv, T, D, device="cuda", generator=g) for _ in range(2))
    perm = torch.randperm(B * cols, generator=torch.Generator().manual_seed(1)).cuda() + 1
    table = perm.view(B, cols)
    kp, vp = (torch.zeros(B * cols + 1, Hkv, bs, D, device="cuda") for _ in range(2))
    for b in range(B):
        for c in range(cols):
            kp[table[b, c]], vp[table[b, c]] = kc[b, :, c * bs:(c + 1) * bs], vc[b, :, c * bs:(c + 1) * bs]
    q, k, v = (torch.randn(B, 1, n, D, device="cuda", generator=g) for n in (H, Hkv, Hkv))
    cos, sin = torch.randn(B, D // 2, device="cuda", generator=g), torch.randn(B, D // 2, device="cuda", generator=g)
    pos = torch.tensor([5, 37, 79], device="cuda")
    qa = K.rope_cache_write(q, k, v, cos, sin, pos, kc, vc, True)
    qb = K.rope_cache_write(q, k, v, cos, sin, pos, kp, vp, True, table=table)
    assert torch.equal(qa, qb)
    for b in range(B):
        blk, off = table[b, int(pos[b]) // bs], int(pos[b]) % bs
        assert torch.equal(kp[blk, :, off], kc[b, :, int(pos[b])]) and torch.equal(vp[blk, :, off], vc[b, :, int(pos[b])])
    oa = K.decode_attention(qa, kc, vc, pos)
    ob = K.decode_attention(qb, kp, vp, pos, table=table)
    assert torch.equal(oa, ob)
    # the twin: a table with one block swapped reads other keys
    bad = table.clone(); bad[1, 0], bad[1, 1] = table[1, 1], table[1, 0]
    assert not torch.equal(K.decode_attention(qb, kp, vp, pos, table=bad), oa)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device (CUDA graphs)")
@pytest.mark.parametrize("family", ["huginn_raven", "nanbeige"])
def test_gpu_continuous_batching_with_graphs(ckpts, family):
    """On a GPU (FP32, graphs on): continuous batching gives the static engine's tokens; graph and eager decoding of
    the continuous engine agree bit for bit (the same rows at every step); another engine batch gives the same
    tokens."""
    reqs = requests()
    kw = dict(device="cuda", max_len=80)
    ref = Engine.from_checkpoint(ckpts[family], max_batch=4, batching="static", **kw).generate(reqs)
    e = Engine.from_checkpoint(ckpts[family], max_batch=4, block_size=8, batching="continuous", **kw)
    got = e.generate(reqs)
    assert e.cuda_graphs and e.stats["replays"] > 0 and e.stats["capture_failures"] == 0, e.stats
    assert [c.tokens for c in got] == [c.tokens for c in ref]
    assert max(abs(a - b) for x, y in zip(got, ref) for a, b in zip(x.logprobs, y.logprobs)) < 1e-4
    e.cuda_graphs = False
    assert same(e.generate(reqs), got)
    other = Engine.from_checkpoint(ckpts[family], max_batch=3, block_size=16, batching="continuous",
                                   **kw).generate(reqs[::-1])[::-1]
    assert [c.tokens for c in other] == [c.tokens for c in ref]


@pytest.mark.parametrize("args, needle", [
    (["--lengths", "lognormal:200"], "--lengths: lognormal:MEDIAN:CAP[:SIGMA] or fixed:N, got 'lognormal:200'"),
    (["--lengths", "lognormal:20:400"], "--lengths: the cap 400 + --prompt-tokens 16 is beyond the model's 256"),
    (["--lengths", "fixed:4", "--requests", "0"], "--requests: must be ≥ 1, got 0"),
    (["--lengths", "fixed:4", "--kv-blocks", "1"], "--kv-blocks: at least 2 (one row of 20 positions"),
    (["--lengths", "fixed:4", "--seed", "-3"], "--seed: must be ≥ 0, got -3"),
    (["--lengths", "fixed:4", "--engine", "native"], "--lengths: compares the native engine's batching modes"),
])
def test_bench_rollout_lengths_bad_input(args, needle, tmp_path, capsys):
    "Bad arguments of `bench rollout --lengths`: one line naming the flag, exit 2, no file written."
    from looprl.bench import main
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit) as ei: main(["rollout", *args, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert ei.value.code == 2 and len(err) == 1 and needle in err[0], err
    assert not out.exists()


def test_bench_rollout_lengths_cpu(tmp_path, capsys):
    "The benchmark's JSON: both modes on the same requests, equal bit for bit, continuous keeping every row-step."
    import json
    from looprl.bench import main
    out = tmp_path / "r.json"
    main(["rollout", "--lengths", "lognormal:4:12", "--requests", "10", "--engine-batch", "3", "--prompt-tokens", "4",
          "--repeats", "1", "--out", str(out)])
    doc = json.loads(out.read_text())
    r = doc["result"]
    assert doc["command"].startswith("python -m looprl.bench rollout --lengths lognormal:4:12")
    assert {"commit", "torch"} <= set(doc["environment"]) and r["bitwise_equal"] and r["same_tokens"]
    s, c = r["modes"]["static"], r["modes"]["continuous"]
    assert s["tokens"] == c["tokens"] == r["response_tokens"]["total"] and c["kept_share"] == 1.0 > s["kept_share"]
