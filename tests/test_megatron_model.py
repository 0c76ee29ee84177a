"""`looprl.model.megatron_model`: the three families built from Megatron-core parts against looprl's native models on the CPU
in FP32 (logits, critic values, gradients), each equality with a twin that breaks one part; names and bit-exact native
round trips; recompute; tensor parallelism over two gloo processes; the errors. The Megatron tests run only where
megatron-core imports (0.16.1 on Python 3.11 here); the rest everywhere."""
import importlib.util, os, socket, subprocess, sys
from pathlib import Path
import pytest
import torch
import torch.nn.functional as F

from looprl.model.config import tiny_config
from looprl.model.megatron import MegatronLayoutError, from_megatron, megatron_names
from looprl.model.models import build_model, init_weights
import looprl.model.megatron_model as MM

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("huginn_raven", "ouro", "nanbeige")
HAVE_MEGATRON = importlib.util.find_spec("megatron") is not None and importlib.util.find_spec("megatron.core") is not None
needs_megatron = pytest.mark.skipif(not HAVE_MEGATRON, reason="megatron-core is not importable")


# ---- what runs without megatron-core ------------------------------------------------------------------------------

def test_import_needs_no_megatron():
    code = "import looprl, looprl.model.megatron_model, sys; print(sorted(m for m in sys.modules if m.split('.')[0] == 'megatron'))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_missing_megatron_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(MM, "megatron_core_version", lambda: None)
    for call in (MM.init_megatron_parallel, lambda: MM.build_megatron_model(tiny_config("huginn_raven"))):
        with pytest.raises(ImportError, match="needs megatron-core: install it with `pip install megatron-core"):
            call()


def _tp_param(dim, shape):
    p = torch.nn.Parameter(torch.zeros(shape))
    p.tensor_model_parallel, p.partition_dim = True, dim
    return p


@pytest.mark.parametrize("name,dim", [("decoder.layers.3.mlp.linear_fc1.weight", 0), ("decoder.layers.0.self_attention.linear_qkv.weight", 0),
                                      ("coda.layers.1.mlp.linear_fc2.weight", 1), ("decoder.layers.0.self_attention.qk_bias", 2)])
@pytest.mark.parametrize("size", [1, 2, 4])
def test_tensor_parallel_shares_reassemble(name, dim, size):
    full = torch.randn(8, 8, 8, 3)
    p = _tp_param(dim, full.shape)
    shares = [MM.tp_share(full, p, name, r, size) for r in range(size)]
    assert all(s.shape[dim] == full.shape[dim] // size for s in shares)
    assert torch.equal(MM.tp_unshare(shares, p, name), full)
    assert not torch.equal(MM.tp_unshare(shares[::-1], p, name), full) or size == 1      # the order matters


def test_gated_share_holds_gate_then_up():
    full = torch.arange(8.)[:, None]                                # rows: gate 0-3 | up 4-7
    p = _tp_param(0, full.shape)
    assert MM.tp_share(full, p, "decoder.layers.0.mlp.linear_fc1.weight", 1, 2).flatten().tolist() == [2, 3, 6, 7]
    assert MM.tp_share(full, p, "output_layer.weight", 1, 2).flatten().tolist() == [4, 5, 6, 7]
    with pytest.raises(MegatronLayoutError, match="linear_fc1.weight: 8 rows along dim 0 do not split over 3"):
        MM.tp_share(full, p, "decoder.layers.0.mlp.linear_fc1.weight", 0, 3)


# ---- Megatron models on the CPU -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def megatron():
    if not HAVE_MEGATRON: pytest.skip("megatron-core is not importable")
    torch.set_num_threads(1)
    MM.init_megatron_parallel(tp=1, device="cpu")
    return MM


def native(cfg, role="actor", seed=3, dtype=None):
    m = init_weights(build_model(cfg, role), seed=seed, perturb_norms=True)
    return m.to(dtype) if dtype is not None else m


def batch(cfg, B=2, S=12):
    g = torch.Generator().manual_seed(0)
    ids, tgt = torch.randint(3, cfg.vocab_size, (B, S), generator=g), torch.randint(3, cfg.vocab_size, (B, S), generator=g)
    lat = torch.randn(B, S, cfg.hidden_size, generator=g) if cfg.family == "huginn_raven" else None
    return ids, tgt, lat


def native_grads(model):
    "A Megatron model's gradients under native names (zeros for frozen parameters)."
    return from_megatron({n: p.grad if p.grad is not None else torch.zeros_like(p) for n, p in model.named_parameters()},
                         model.cfg, spec="local")


def parity(cfg, sabotage=None, role="actor"):
    "max |Δ output| (logits, or a critic's values) and max over parameters of max|Δ grad| / max|grad|, Megatron vs native."
    nat = native(cfg, role)
    mg = MM.build_megatron_model(cfg, role, state_dict=nat.state_dict())
    if sabotage: sabotage(mg)
    ids, tgt, lat = batch(cfg)
    outs = []
    for m in (nat, mg):
        h = m(ids, latents=lat)
        if role == "actor":
            out = m.logits(h); loss = F.cross_entropy(out.flatten(0, 1), tgt.flatten())
        else:
            out = m.values(h); loss = out.square().mean()
        loss.backward(); outs.append(out)
    gm = native_grads(mg)
    rel = max(((gm[n] - p.grad).abs().max() / p.grad.abs().max()).item() for n, p in nat.named_parameters() if p.grad is not None)
    return (outs[1] - outs[0]).abs().max().item(), rel


@pytest.mark.parametrize("role", ["actor", "critic"])
@pytest.mark.parametrize("family", FAMILIES)
def test_names_are_megatron_names(megatron, family, role):
    cfg = tiny_config(family)
    m = megatron.build_megatron_model(cfg, role)
    names = [n for n, _ in m.named_parameters()]
    assert sorted(names) == sorted(set(megatron_names(cfg, role, spec="local").values()))
    extra = set(m.state_dict()) - set(names)
    assert extra and all(n.endswith("._extra_state") and m.state_dict()[n] is None for n in extra)


def test_untied_head_follows_the_native_model(megatron):
    "A Llama-family config that says tie_word_embeddings still has a head of its own natively, and so here."
    cfg = tiny_config("nanbeige", tie_word_embeddings=True)
    assert cfg.tie_embeddings and "lm_head.weight" in native(cfg).state_dict()
    want = native(cfg).state_dict()
    m = megatron.build_megatron_model(cfg, state_dict=want)
    assert m.output_layer.weight is not None
    back = megatron.native_state(m)
    assert all(torch.equal(back[n], want[n]) for n in want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("role", ["actor", "critic"])
@pytest.mark.parametrize("family", FAMILIES)
def test_native_round_trip_is_bit_exact(megatron, family, role, dtype):
    cfg = tiny_config(family)
    want = native(cfg, role, dtype=dtype).state_dict()
    m = megatron.build_megatron_model(cfg, role, dtype=dtype, state_dict=want)
    assert all(p.dtype == dtype for p in m.parameters())
    back = megatron.native_state(m)
    assert list(back) == list(want)
    assert all(back[n].dtype == want[n].dtype and torch.equal(back[n], want[n]) for n in want)
    # the twin: one flipped bit in one parameter is seen
    p = dict(m.named_parameters())["decoder.layers.0.self_attention.linear_qkv.weight"]
    with torch.no_grad(): p.view(torch.int16 if dtype == torch.float16 else torch.int32)[0, 0] ^= 1
    back = megatron.native_state(m)
    assert [n for n in want if not torch.equal(back[n], want[n])] != []


def test_default_weights_are_looprl_init(megatron):
    cfg = tiny_config("huginn_raven")
    back = megatron.native_state(megatron.build_megatron_model(cfg, seed=7))
    want, other = init_weights(build_model(cfg), seed=7).state_dict(), init_weights(build_model(cfg), seed=8).state_dict()
    assert all(torch.equal(back[n], want[n]) for n in want)
    assert not all(torch.equal(back[n], other[n]) for n in want)


@pytest.mark.parametrize("role", ["actor", "critic"])
@pytest.mark.parametrize("family", FAMILIES)
def test_forward_and_backward_equal_native(megatron, family, role):
    d_out, d_grad = parity(tiny_config(family), role=role)
    print(f"{family} {role}: max |Δ {'logit' if role == 'actor' else 'value'}| {d_out:.2e}, max relative |Δ grad| {d_grad:.2e}")
    assert d_out < 1e-5 and d_grad < 1e-4


def _layers(m):
    return [l for stack in ("prelude", "decoder", "coda") if hasattr(m, stack) for l in getattr(m, stack).layers]


def _identity(module): module.forward = lambda x: x


def _swap_kv(m):
    "Swap the key and value rows of one layer's fused linear_qkv (per query group)."
    att = m.decoder.layers[0].self_attention
    G, D = m.cfg.n_kv_heads, m.cfg.head_dim
    with torch.no_grad():
        w = att.linear_qkv.weight.view(G, -1, D, m.cfg.hidden_size)
        k, v = w[:, -2].clone(), w[:, -1].clone()
        w[:, -2], w[:, -1] = v, k


def _rope_halves(m):
    "RoPE frequencies laid out in halves while the rotation pairs neighbours."
    m.rotary_pos_emb.rotary_interleaved = not m.rotary_pos_emb.rotary_interleaved
    type(m.rotary_pos_emb).forward.cache_clear()


SABOTAGES = {
    "huginn_raven": {"no norm_4": lambda m: _identity(m.decoder.layers[1].mlp_residual_layernorm),
                     "no norm_2": lambda m: _identity(m.coda.layers[0].self_attn_residual_layernorm),
                     "no qk_bias": lambda m: m.prelude.layers[0].self_attention.qk_bias.data.zero_(),
                     "k and v swapped": _swap_kv, "RoPE in halves": _rope_halves,
                     "no embedding scale": lambda m: setattr(m, "emb_scale", 1.0),
                     "one recurrence less": lambda m: setattr(m, "cfg", m.cfg.with_depth(m.cfg.depth - 1))},
    "ouro": {"no attention post-norm": lambda m: _identity(m.decoder.layers[2].self_attention.linear_proj.post_layernorm),
             "no MLP post-norm": lambda m: _identity(m.decoder.layers[0].mlp.linear_fc2.post_layernorm),
             "k and v swapped": _swap_kv},
    "nanbeige": {"k and v swapped": _swap_kv, "RoPE interleaved": _rope_halves,
                 "no loop-final norm": lambda m: _identity(m.decoder.final_layernorm),
                 "one loop less": lambda m: setattr(m, "cfg", m.cfg.with_depth(m.cfg.depth - 1))},
}


@pytest.mark.parametrize("family,broken", [(f, b) for f, bs in SABOTAGES.items() for b in bs])
def test_each_part_is_seen(megatron, family, broken):
    "The twins of the parity test: one part broken, and the logits move far past the parity bound."
    d_out, _ = parity(tiny_config(family), sabotage=SABOTAGES[family][broken])
    print(f"{family} with {broken}: max |Δ logit| {d_out:.2e}")
    assert d_out > 1e-3, f"{family} with {broken}: max |Δ logit| {d_out:.2e}"


def test_recompute_gives_the_same_gradients(megatron):
    cfg = tiny_config("huginn_raven")
    ids, tgt, lat = batch(cfg)
    grads, calls = [], []
    for recompute in (False, True):
        m = megatron.build_megatron_model(cfg, state_dict=native(cfg).state_dict())
        m.recompute = recompute
        n, acc = [0], [0]
        m.decoder.layers[0].register_forward_hook(lambda *a: n.__setitem__(0, n[0] + 1))
        m.decoder.layers[0].mlp.linear_fc1.weight.register_post_accumulate_grad_hook(lambda p: acc.__setitem__(0, acc[0] + 1))
        F.cross_entropy(m.logits(m(ids, latents=lat)).flatten(0, 1), tgt.flatten()).backward()
        grads.append({k: p.grad.clone() for k, p in m.named_parameters()}); calls.append((n[0], acc[0]))
    # recomputed: each core application runs again in the backward; a looped weight still accumulates its gradient once
    assert calls == [(cfg.depth, 1), (2 * cfg.depth, 1)]
    assert all(torch.equal(grads[0][k], grads[1][k]) for k in grads[0])


def test_bad_input_is_refused(megatron):
    h, n = tiny_config("huginn_raven"), tiny_config("nanbeige")
    mh, mn = megatron.build_megatron_model(h), megatron.build_megatron_model(n)
    ids, _, lat = batch(h)
    with pytest.raises(ValueError, match="Huginn needs its initial recurrent state"): mh(ids)
    with pytest.raises(ValueError, match="nanbeige has no random initial state"): mn(ids, latents=lat)
    with pytest.raises(ValueError, match="positions 0 … S-1"): mh(ids, positions=torch.arange(1, 13).expand(2, 12), latents=lat)
    with pytest.raises(ValueError, match="keeps no KV cache"): mh(ids, latents=lat, cache=object())
    with pytest.raises(ValueError, match="beyond the model's 256 positions"): mn(torch.zeros(1, 257, dtype=torch.long))
    critic = native(h, "critic").state_dict()
    with pytest.raises(MegatronLayoutError, match="value_head.weight: in the native tensors, not in the model \\(the model is the actor\\)"):
        megatron.load_native(mh, critic)
    sd = native(h).state_dict(); sd.pop("transformer.coda.1.norm_4.weight")
    with pytest.raises(MegatronLayoutError, match="missing tensor transformer.coda.1.norm_4.weight"):
        megatron.load_native(mh, sd)
    with pytest.raises(ValueError, match="role must be 'actor' or 'critic'"): megatron.build_megatron_model(h, "judge")


@needs_megatron
def test_building_before_init_is_refused():
    code = ("import looprl.model.megatron_model as M; from looprl.model.config import tiny_config\n"
            "try: M.build_megatron_model(tiny_config('nanbeige'))\nexcept RuntimeError as e: print(e)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert "call init_megatron_parallel() first" in r.stdout, r.stderr[-2000:]


# ---- tensor parallelism: two gloo processes on the CPU -------------------------------------------------------------

def _tp_worker(rank, port, family, queue):
    try:
        torch.set_num_threads(1)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank))
        MM.init_megatron_parallel(tp=2, device="cpu")
        cfg = tiny_config(family)
        nat = native(cfg)
        m = MM.build_megatron_model(cfg, state_dict=nat.state_dict())
        ids, tgt, lat = batch(cfg)
        lm, ln = m.logits(m(ids, latents=lat)), nat.logits(nat(ids, latents=lat))
        for lg in (lm, ln): F.cross_entropy(lg.flatten(0, 1), tgt.flatten()).backward()
        import torch.distributed as dist
        grads = {}
        for n, p in m.named_parameters():
            g = p.grad.contiguous()
            shares = [torch.empty_like(g) for _ in range(2)] if getattr(p, "tensor_model_parallel", False) else [g]
            if len(shares) == 2: dist.all_gather(shares, g)
            grads[n] = MM.tp_unshare(shares, p, n)
        gn = from_megatron(grads, cfg, spec="local")
        rel = max(((gn[n] - p.grad).abs().max() / p.grad.abs().max()).item() for n, p in nat.named_parameters() if p.grad is not None)
        back, want = MM.native_state(m), nat.state_dict()
        bias = m.sharded_state_dict()["decoder.layers.0.self_attention.qk_bias"] if family == "huginn_raven" else None
        queue.put(dict(rank=rank, dlogit=(lm - ln).abs().max().item(), dgrad=rel,
                       same=list(back) == list(want) and all(torch.equal(back[n], want[n]) for n in want),
                       heads=m.decoder.layers[0].self_attention.num_attention_heads_per_partition,
                       bias=None if bias is None else (tuple(bias.global_shape), tuple(bias.axis_fragmentations))))
    except BaseException as e:
        queue.put(dict(rank=rank, error=f"{type(e).__name__}: {e}"))


@needs_megatron
@pytest.mark.parametrize("family", ["huginn_raven", "nanbeige"])
def test_tensor_parallel_two_ranks(family):
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_tp_worker, args=(r, port, family, queue)) for r in range(2)]
    for p in procs: p.start()
    try: results = sorted((queue.get(timeout=240) for _ in procs), key=lambda r: r["rank"])
    finally:
        for p in procs: p.join(timeout=30)
        for p in procs:
            if p.is_alive(): p.kill()
    assert not any("error" in r for r in results), results
    cfg = tiny_config(family)
    for r in results:
        print(f"{family} TP=2 rank {r['rank']}: max |Δ logit| {r['dlogit']:.2e}, max relative |Δ grad| {r['dgrad']:.2e}")
        assert r["dlogit"] < 1e-5 and r["dgrad"] < 1e-4 and r["same"] and r["heads"] == cfg.n_heads // 2
        if family == "huginn_raven":                                     # the q/k bias is a head-sharded checkpoint tensor
            assert r["bias"] == ((cfg.n_core, 2, 1, cfg.n_heads, cfg.head_dim), (cfg.n_core, 1, 1, 2, 1))
