"""The batch-invariant kernels (looprl.model.invariant) against today's path at Huginn-0125 shapes (E 5280, 55 heads ×
96, MLP 17920, vocabulary 65536), FP16, on one GPU: each product at the decode batches (M = 1, 8, 32, 64 rows) and
the training batch (16 × 176 = 2816 rows) against F.linear (cuBLAS), with a few candidate tiles; attention: one query
per row over 256 keys against the fused decode kernel (`today_equal`: whether that kernel equals SDPA's last query),
and 16 sequences of 176 against SDPA; RMSNorm against the module; torch's log_softmax over the vocabulary, FP32 (is it
per-row invariant as it is?). Per case: µs (median of 5 timings of 20 launches, CUDA events), and whether row i / the
last query is the same bits computed alone as in the large call (`invariant`, and `torch_invariant` / `sdpa_invariant`
for today's path); a product's `tile{j}_us` is its time with the file's `tiles[j]` (tiles[0]: MATMUL_TILE).
Writes OUT_DIR/invariant-huginn-0125.json. usage: python3 benchmarks/gpu/invariant_bench.py OUT_DIR"""
import json, os, shlex, statistics, sys, torch
import torch.nn.functional as F
from looprl.model import invariant as I, kernels as K
from looprl.model.models import RMSNorm
from looprl.bench import environment
if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
    sys.exit(f"invariant_bench.py: OUT_DIR must be a directory, got {sys.argv[1:]}\n{__doc__}")
E, H, D, FF, V, dt, dev = 5280, 55, 96, 17920, 65536, torch.float16, "cuda"
DECODE, TRAIN = (1, 8, 32, 64), 16 * 176
g = torch.Generator(device=dev).manual_seed(0)
rnd = lambda *s, scale=1.0: (torch.randn(*s, generator=g, device=dev) * scale).to(dt)

def us(fn, reps=20) -> float:
    "Median over 5 timings of `reps` calls, µs per call."
    fn(); torch.cuda.synchronize()
    times = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); [fn() for _ in range(reps)]; e.record(); torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1000 / reps)
    return statistics.median(times)

rows = []
def row(**r): rows.append(r); print(r, flush=True)

TILES = [I.MATMUL_TILE, dict(block_m=16, block_n=128, block_k=64, num_warps=4),
         dict(block_m=32, block_n=64, block_k=64, num_warps=4), dict(block_m=64, block_n=128, block_k=64, num_warps=8)]
for name, N, Kd in (("Wqkv", 3 * E, E), ("attn.proj", E, E), ("mlp.fc", 2 * FF, E), ("mlp.proj", E, FF),
                    ("adapter", E, 2 * E), ("lm_head", V, E)):
    w, x = rnd(N, Kd, scale=Kd ** -0.5), rnd(TRAIN, Kd)
    big_t, big_i = F.linear(x, w), I.matmul(x, w)
    for M in (*DECODE, TRAIN):
        a = x[:M].contiguous()
        r = dict(kind="matmul", layer=name, N=N, K=Kd, M=M, torch_us=us(lambda: F.linear(a, w)),
                 torch_invariant=torch.equal(F.linear(a, w), big_t[:M]),
                 invariant=torch.equal(I.matmul(a, w), big_i[:M]))
        for j, t in enumerate(TILES): r[f"tile{j}_us"] = us(lambda: I.matmul(a, w, tile=t))
        row(**r)
    del w, x, big_t, big_i

T = 256                                                   # decode: one query per row at position 255
for B in DECODE:
    k, v, q = rnd(B, H, T, D), rnd(B, H, T, D), rnd(B, H, T, D)
    pos = torch.full((B,), T - 1, device=dev, dtype=torch.int32)
    full, one = I.attention(q, k, v), I.attention(q[:, :, -1:], k, v, pos[:, None])
    q1 = q[:, :, -1].contiguous()
    row(kind="attention-decode", B=B, keys=T, fused_us=us(lambda: K.decode_attention(q1, k, v, pos)),
        us=us(lambda: I.attention(q[:, :, -1:], k, v, pos[:, None])), invariant=torch.equal(one, full[:, :, -1:]),
        today_equal=torch.equal(K.decode_attention(q1, k, v, pos).view(B, H, D),   # today: engine vs trainer
                                F.scaled_dot_product_attention(q, k, v, is_causal=True)[:, :, -1]))
Bt, S = 16, 176                                           # training: 16 sequences of 176
q, k, v = rnd(Bt, H, S, D), rnd(Bt, H, S, D), rnd(Bt, H, S, D)
sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
last = torch.full((Bt, 1), S - 1, device=dev)
row(kind="attention-train", B=Bt, S=S, sdpa_us=us(sdpa), us=us(lambda: I.attention(q, k, v)),
    invariant=torch.equal(I.attention(q[:, :, -1:], k, v, last), I.attention(q, k, v)[:, :, -1:]),
    sdpa_invariant=torch.equal(F.scaled_dot_product_attention(q[:, :, -1:], k, v), sdpa()[:, :, -1:]))

norm = RMSNorm(E, 1e-6).to(dev, dt)
x = rnd(TRAIN, E)
for M in (*DECODE, TRAIN):
    a = x[:M].contiguous()
    with torch.no_grad():
        row(kind="rmsnorm", M=M, torch_us=us(lambda: norm(a)), fused_us=us(lambda: K.rmsnorm(a, norm)),
            us=us(lambda: I.rmsnorm(a, norm.weight, norm.eps)), torch_invariant=torch.equal(norm(a), norm(x)[:M]),
            invariant=torch.equal(I.rmsnorm(a, norm.weight, norm.eps), I.rmsnorm(x, norm.weight, norm.eps)[:M]))

logits = torch.randn(TRAIN, V, generator=g, device=dev) * 4     # FP32 logits: is today's log_softmax per-row invariant?
full = torch.log_softmax(logits, -1)
for M in (*DECODE, TRAIN):
    a = logits[:M].contiguous()
    row(kind="log_softmax", M=M, torch_us=us(lambda: torch.log_softmax(a, -1)),
        torch_invariant=torch.equal(torch.log_softmax(a, -1), full[:M]))              # no kernel of ours: recorded

out = f"{sys.argv[1]}/invariant-huginn-0125.json"
json.dump(dict(command="python3 " + shlex.join(sys.argv), script=os.environ.get("LOOPRL_SCRIPT"),
               environment=environment(), tiles=TILES, rows=rows), open(out, "w"), indent=1)
bad = [r for r in rows if not r.get("invariant", True)]    # log_softmax rows: torch's, recorded only
print(f"{len(rows)} rows, {len(bad)} not invariant; written to {out}", flush=True)
sys.exit(1 if bad else 0)
