"""The fused decode kernels (looprl.model.kernels) against the plain PyTorch path of the same modules.

On a GPU they run in this process; without one they run in Triton's CPU interpreter in a subprocess
(TRITON_INTERPRET=1 must be set before Triton is imported); without Triton the tests skip."""
import os, subprocess, sys
import pytest
import torch

CUDA = torch.cuda.is_available()


def _checks(device: str):
    from looprl.model import kernels as K
    from looprl.model.config import tiny_config
    from looprl.model.models import build_model, init_weights, RMSNorm, Ctx, _attend, KVCache
    from looprl.model.rope import rope_interleaved, rope_half
    from looprl.testing import decode_logits
    from looprl.model.latents import sequence_latents
    assert K.fused_available(device)
    g = torch.Generator().manual_seed(0)
    for dt, tol in ((torch.float32, 1e-5), (torch.float16, 2e-3)):
        # norms with and without the residual and the second norm
        E = 160
        n1, n2 = RMSNorm(E, 1e-6).to(device, dt), RMSNorm(E, 1e-5).to(device, dt)
        with torch.no_grad():
            n1.weight.copy_(1 + 0.1 * torch.randn(E, generator=g)); n2.weight.copy_(1 + 0.1 * torch.randn(E, generator=g))
        a, x = (torch.randn(3, 1, E, generator=g).to(device, dt) for _ in range(2))
        with torch.no_grad():
            y, z = K.add_rmsnorm(a, x, n1, then=n2)
            torch.testing.assert_close(y, n1(a + x), atol=tol, rtol=tol)
            torch.testing.assert_close(z, n2(n1(a + x)), atol=tol, rtol=tol)
            torch.testing.assert_close(K.rmsnorm(a, n2), n2(a), atol=tol, rtol=tol)
            up = torch.randn(3, 1, 2 * 70, generator=g).to(device, dt)
            ga, ub = up.chunk(2, -1)
            torch.testing.assert_close(K.silu_mul(ga, ub), torch.nn.functional.silu(ga) * ub, atol=tol, rtol=tol)
    # attention with the cache, both RoPE layouts, GQA, biases, ragged positions: fused vs SDPA
    for rope, H, KVH, D, bias in ((rope_interleaved, 4, 4, 32, True), (rope_half, 6, 2, 64, False)):
        B, T = 3, 70
        cache_a = KVCache(type("C", (), dict(kv_planes=2, n_kv_heads=KVH, head_dim=D))(), B, T, torch.float32, device)
        cache_b = KVCache(type("C", (), dict(kv_planes=2, n_kv_heads=KVH, head_dim=D))(), B, T, torch.float32, device)
        for c in (cache_a, cache_b):
            c.k.copy_(torch.randn(c.k.shape, generator=torch.Generator().manual_seed(1)))
            c.v.copy_(torch.randn(c.v.shape, generator=torch.Generator().manual_seed(2)))
        pos = torch.tensor([[0], [33], [69]], device=device)
        ang = torch.rand(B, 1, D // 2, generator=g).to(device) * 6
        q = torch.randn(B, 1, H, D, generator=g).to(device)
        k, v = (torch.randn(B, 1, KVH, D, generator=g).to(device) for _ in range(2))
        qb, kb = (torch.randn(H, D, generator=g).to(device), torch.randn(KVH, D, generator=g).to(device)) if bias else (None, None)
        ref = _attend(q, k, v, Ctx(pos, ang.cos()[:, :, None], ang.sin()[:, :, None], cache_a), 1, rope, qb, kb)
        got = _attend(q, k, v, Ctx(pos, ang.cos()[:, :, None], ang.sin()[:, :, None], cache_b, fused=True), 1, rope, qb, kb)
        torch.testing.assert_close(got, ref, atol=2e-5, rtol=2e-5)
        torch.testing.assert_close(cache_b.k, cache_a.k, atol=1e-6, rtol=1e-6)
        assert torch.equal(cache_b.v, cache_a.v)
    # a long plane (70 tiles of 16: the combine kernel with 128 slots and more warps) and other tiles: vs softmax attention
    B, H, T, D = 2, 3, 1111, 32
    q, kp, vp = torch.randn(B, H, D, generator=g).to(device), *(torch.randn(B, H, T, D, generator=g).to(device) for _ in range(2))
    pos = torch.tensor([1100, 17], device=device)
    for tile in ((None, None), (64, 4), (256, 8)):
        got = K.decode_attention(q, kp, vp, pos, *tile)
        for b in range(B):
            w = torch.softmax((kp[b, :, :pos[b] + 1] @ q[b, :, :, None]).squeeze(-1) * D ** -0.5, -1)
            torch.testing.assert_close(got[b, 0], (w[:, None, :] @ vp[b, :, :pos[b] + 1]).squeeze(1).flatten(), atol=2e-5, rtol=2e-5)
    # whole models, FP32: decode through the kernels vs the plain path, and twice the same bits
    for fam in ("huginn_raven", "ouro", "nanbeige"):
        cfg = tiny_config(fam)
        m = init_weights(build_model(cfg, device=device), seed=3, perturb_norms=True).eval()
        ids = torch.randint(0, cfg.vocab_size, (2, 9), generator=g).to(device)
        lat = m.sequence_states([5, 6], [9, 9], torch.float32, device)
        with torch.no_grad():
            m.fused_decode = False; plain = decode_logits(m, ids, lat, prefill=4)
            m.fused_decode = True; fused = decode_logits(m, ids, lat, prefill=4); again = decode_logits(m, ids, lat, prefill=4)
        assert torch.equal(fused, again), fam
        err = (fused - plain).abs().max().item()
        assert err < 2e-5, (fam, err)
    # FP16 Huginn through every kernel (the streaming product included): close to the plain path, deterministic
    cfg = tiny_config("huginn_raven")
    m = init_weights(build_model(cfg, device=device, dtype=torch.float16), seed=4).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 7), generator=g).to(device)
    lat = torch.stack([sequence_latents(cfg.hidden_size, s, 7) for s in (1, 2)]).to(device, torch.float16)
    with torch.no_grad():
        m.fused_decode = False; plain = decode_logits(m, ids, lat, prefill=3)
        m.fused_decode = True; fused = decode_logits(m, ids, lat, prefill=3)
        assert torch.equal(fused, decode_logits(m, ids, lat, prefill=3))
    err = (fused - plain).abs().max().item()
    assert err < 0.05, err
    print("kernel checks passed on", device)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device (the interpreter test covers CPU-only machines)")
def test_kernels_cuda():
    _checks("cuda")


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_direct_launch_same_bits_cuda(monkeypatch):
    "Kernels launched directly once compiled (kernels.launch) give the bits of the JIT launcher's launches, FP32 and FP16."
    from looprl.model import kernels as K
    from looprl.model.config import tiny_config
    from looprl.model.models import build_model, init_weights
    from looprl.testing import decode_logits
    from looprl.model.latents import sequence_latents
    for dt in (torch.float32, torch.float16):
        cfg = tiny_config("huginn_raven")
        m = init_weights(build_model(cfg, device="cuda", dtype=dt), seed=5, perturb_norms=True).eval()
        ids = torch.randint(0, cfg.vocab_size, (3, 8), generator=torch.Generator().manual_seed(1)).cuda()
        lat = torch.stack([sequence_latents(cfg.hidden_size, s, 8) for s in (1, 2, 3)]).to("cuda", dt)
        out = {}
        with torch.no_grad():
            for direct in (False, True):
                monkeypatch.setattr(K, "DIRECT_LAUNCH", direct); K._COMPILED.clear()
                out[direct] = decode_logits(m, ids, lat, prefill=3)
                assert (len(K._COMPILED) > 0) == direct          # with it on, later launches of each key went direct
            m.fused_decode = False; plain = decode_logits(m, ids, lat, prefill=3)
        assert torch.equal(out[True], out[False]) and not torch.equal(out[True], torch.zeros_like(plain))
        assert (out[True] - plain).abs().max().item() < (2e-5 if dt == torch.float32 else 0.05)


@pytest.mark.skipif(CUDA, reason="the CUDA test runs the kernels themselves")
def test_kernels_interpreter():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    code = "import sys; sys.path.insert(0, %r); import test_kernels; test_kernels._checks('cpu')" % os.path.dirname(__file__)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "kernel checks passed" in r.stdout
