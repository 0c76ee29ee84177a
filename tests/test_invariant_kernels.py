"""The batch-invariant kernels (looprl.model.invariant): every row and every query computed the same way for any number
of rows or queries, and a tiny Huginn's whole-sequence forward equal to its decode, bit for bit.

On a GPU the kernels run there; without one they run in Triton's CPU interpreter, which must be chosen before Triton is
first imported (TRITON_INTERPRET=1, set here around that import and each test when CUDA is absent). Without Triton every
test skips. Each equality has a twin: the same check over an M-dependent (or decode-only) choice of the reduction's
order, seen to fail."""
import os, sys
import pytest
import torch
import torch.nn.functional as F

CUDA = torch.cuda.is_available()
_old = os.environ.get("TRITON_INTERPRET")
if not CUDA and "triton" not in sys.modules: os.environ["TRITON_INTERPRET"] = "1"   # before Triton is first imported
try:
    pytest.importorskip("triton", reason="Triton is not installed: the batch-invariant kernels cannot run")
    from looprl.model import invariant as I
finally:                        # set only around the import and (below) each test: other tests' commands run as usual
    if _old is None: os.environ.pop("TRITON_INTERPRET", None)
    else: os.environ["TRITON_INTERPRET"] = _old

DEV = "cuda" if CUDA else "cpu"
pytestmark = pytest.mark.skipif(not I.available(DEV),
                                reason="no GPU, and Triton was imported before TRITON_INTERPRET=1 could be set")
DTYPES = [torch.float32, torch.float16]


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    "Triton's interpreter reads TRITON_INTERPRET while it runs a kernel too."
    if I.INTERPRETED: monkeypatch.setenv("TRITON_INTERPRET", "1")


def split_k_for_few_rows(x, w):
    """The twin's product: split-K below 16 rows, K split at a third (not at a multiple of block_k, where in FP32 it
    would be the same sum), the two parts' products summed in the output dtype."""
    if x.reshape(-1, x.shape[-1]).shape[0] >= 16: return I.matmul(x, w)
    h = x.shape[-1] // 3
    return I.matmul(x[..., :h], w[:, :h]) + I.matmul(x[..., h:], w[:, h:])


@pytest.mark.parametrize("dt", DTYPES)
def test_matmul_rows_do_not_depend_on_m(dt):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(64, 150, generator=g).to(DEV, dt), (torch.randn(100, 150, generator=g) / 10).to(DEV, dt)
    full = I.matmul(x, w)
    torch.testing.assert_close(full.float(), x.float() @ w.float().T, atol=2e-3, rtol=2e-3)
    for M in (1, 3, 17, 64): assert torch.equal(I.matmul(x[:M], w), full[:M]), M
    b = torch.randn(100, generator=g).to(DEV, dt)
    assert torch.equal(I.matmul(x[:3], w, b), I.matmul(x, w, b)[:3])


@pytest.mark.parametrize("dt", DTYPES)
def test_matmul_twin_split_k_breaks_it(dt):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(64, 150, generator=g).to(DEV, dt), (torch.randn(100, 150, generator=g) / 10).to(DEV, dt)
    full = split_k_for_few_rows(x, w)
    assert torch.equal(full, I.matmul(x, w))                      # 64 rows: the twin takes the invariant path
    assert not torch.equal(split_k_for_few_rows(x[:3], w), full[:3])


def qkv(dt, B=2, H=4, Hkv=2, S=40, D=24, seed=1):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, S, D, generator=g).to(DEV, dt)
    return q, *(torch.randn(B, Hkv, S, D, generator=g).to(DEV, dt) for _ in range(2))


@pytest.mark.parametrize("dt", DTYPES)
def test_attention_one_query_equals_it_in_the_sequence(dt):
    q, k, v = qkv(dt)
    B, S = q.shape[0], q.shape[2]
    o = I.attention(q, k, v)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True)
    torch.testing.assert_close(o.float(), ref, atol=2e-3, rtol=2e-3)
    for s in (S - 1, 0, 31, 32):                                  # the last query, the first, both sides of a key block
        pos = torch.full((B, 1), s, device=DEV)
        assert torch.equal(I.attention(q[:, :, s:s + 1], k, v, pos), o[:, :, s:s + 1]), s
    pos = torch.arange(29, S, device=DEV).expand(B, S - 29)      # a chunk of queries (a prefill after a prompt)
    assert torch.equal(I.attention(q[:, :, 29:], k, v, pos), o[:, :, 29:])


@pytest.mark.parametrize("dt", DTYPES)
def test_attention_twin_decode_blocks_break_it(dt):
    q, k, v = qkv(dt)
    B, S = q.shape[0], q.shape[2]
    tile = dict(I.ATTENTION_TILE, block_n=16)                     # split-KV decode: other key blocks for one query
    alone = torch.cat([I.attention(q[:, :, s:s + 1], k, v, torch.full((B, 1), s, device=DEV), tile=tile)
                       for s in range(S - 8, S)], 2)                  # the last 8 queries, each decoded alone
    assert not torch.equal(alone, I.attention(q, k, v)[:, :, -8:])


@pytest.mark.parametrize("dt", DTYPES)
def test_rmsnorm_rows_do_not_depend_on_m(dt):
    g = torch.Generator().manual_seed(2)
    w, x = (1 + torch.randn(4000, generator=g) / 10).to(DEV, dt), (3 * torch.randn(64, 4000, generator=g)).to(DEV, dt)
    y = I.rmsnorm(x, w, 1e-6)
    h = x.float()
    ref = w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dt)
    torch.testing.assert_close(y.float(), ref.float(), atol=2e-3, rtol=2e-3)
    for M in (1, 3, 17, 64): assert torch.equal(I.rmsnorm(x[:M], w, 1e-6), y[:M]), M
    # the twin: a row computed alone sums its squares in chunks of 1,024 columns
    alone = torch.cat([I.rmsnorm(x[i:i + 1], w, 1e-6, chunk=1024) for i in range(64)])
    assert not torch.equal(alone, y)


def test_backward_is_pytorchs():
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(5, 7, 40, generator=g, requires_grad=True), torch.randn(30, 40, generator=g, requires_grad=True)
    ref = torch.autograd.grad((F.linear(x, w) ** 2).sum(), (x, w))
    for a, b in zip(torch.autograd.grad((I.MatmulFn.apply(x, w) ** 2).sum(), (x, w)), ref):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    q, k, v = (torch.randn(2, 4, 9, 16, generator=g, requires_grad=True) for _ in range(3))
    ref = torch.autograd.grad((F.scaled_dot_product_attention(q, k, v, is_causal=True) ** 2).sum(), (q, k, v))
    got = torch.autograd.grad((I.AttentionFn.apply(q, k, v, torch.arange(9).expand(2, 9)) ** 2).sum(), (q, k, v))
    for a, b in zip(got, ref): torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_causal_positions_refuses_other_masks():
    pos = torch.tensor([[3, 4], [0, 1]])
    assert torch.equal(I.causal_positions(I.visible(pos, 6)), pos)
    mask = I.visible(pos, 6).clone(); mask[0, 0, 0, 5] = True          # a query that sees a later key
    with pytest.raises(ValueError, match="only causal masks"): I.causal_positions(mask)


def family_logits(family, dt, head=None):
    """Whole-sequence and prefill+decode logits of a tiny model of `family` under `exact_forward` (Huginn with 2
    recurrences and its random initial states); `head(lm_head)`: a forward that replaces the head's."""
    from looprl.model.config import tiny_config
    from looprl.model.models import build_model, init_weights
    from looprl.testing import decode_logits
    cfg = tiny_config(family, **({"mean_recurrence": 2} if family == "huginn_raven" else {}))
    ids = torch.randint(0, cfg.vocab_size, (2, 5), generator=torch.Generator().manual_seed(4)).to(DEV)
    m = init_weights(build_model(cfg, device=DEV, dtype=dt), seed=5, perturb_norms=True).eval()
    lat = m.sequence_states([1, 2], [5, 5], dt, DEV)
    with torch.no_grad(), I.exact_forward(m):
        if head is not None: m.lm_head.forward = head(m.lm_head)
        return m.logits(m(ids, latents=lat)), decode_logits(m, ids, lat, prefill=2)


# the twin's head: split-K in decode steps only (one position per row); the rest of the model stays invariant
SPLIT_HEAD = lambda lin: lambda x: split_k_for_few_rows(x, lin.weight) if x.shape[-2] == 1 else I.matmul(x, lin.weight)
CASES = [("huginn_raven", torch.float32), ("huginn_raven", torch.float16), ("nanbeige", torch.float16),
         ("ouro", torch.float16)]                                  # Nanbeige: grouped KV heads


@pytest.mark.parametrize("family,dt", CASES)
def test_tiny_model_sequence_equals_decode(family, dt):
    whole, steps = family_logits(family, dt)
    assert torch.isfinite(whole).all() and whole.std() > 0
    assert torch.equal(whole, steps)


@pytest.mark.parametrize("family,dt", CASES[:3])
def test_tiny_model_twin_one_product_split_in_decode(family, dt):
    whole, steps = family_logits(family, dt, SPLIT_HEAD)
    assert torch.equal(whole[:, :2], steps[:, :2])               # the prefill's positions: no decode step in them
    assert not torch.equal(whole, steps)


def decode_rows(rows, head=None):
    "Prefill+decode logits of a tiny FP16 Huginn for rows `rows` of one fixed batch of 3 prompts (with their latents)."
    from looprl.model.config import tiny_config
    from looprl.model.models import build_model, init_weights
    from looprl.testing import decode_logits
    cfg = tiny_config("huginn_raven", mean_recurrence=2)
    ids = torch.randint(0, cfg.vocab_size, (3, 5), generator=torch.Generator().manual_seed(6)).to(DEV)
    m = init_weights(build_model(cfg, device=DEV, dtype=torch.float16), seed=5, perturb_norms=True).eval()
    lat = m.sequence_states([1, 2, 3], [5] * 3, torch.float16, DEV)
    with torch.no_grad(), I.exact_forward(m):
        if head is not None: m.lm_head.forward = head(m.lm_head)
        return decode_logits(m, ids[rows], lat[rows], prefill=2)


def test_a_row_alone_equals_it_in_the_batch():
    assert torch.equal(decode_rows([1]), decode_rows([0, 1, 2])[1:2])


def test_a_row_alone_twin_split_for_one_row():
    # the twin's head splits K when it computes one row only (a batch of one)
    head = lambda lin: lambda x: split_k_for_few_rows(x, lin.weight) if x.shape[0] == 1 else I.matmul(x, lin.weight)
    assert not torch.equal(decode_rows([1], head), decode_rows([0, 1, 2], head)[1:2])
