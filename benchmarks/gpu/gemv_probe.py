"""Can a Triton GEMV beat cuBLAS on the decode step's weight products? Bandwidth per Huginn-0125 product shape (FP16),
B = 1, 8, 32, 64: cuBLAS, and the fastest of a grid of Triton tile configurations (Triton's do_bench, L2 flushed between
calls). usage: python3 benchmarks/gpu/gemv_probe.py OUT_FILE"""
import json, os, shlex, sys, torch, triton, triton.language as tl
from triton.testing import do_bench
from looprl.bench import environment
if len(sys.argv) != 2: sys.exit(__doc__)

@triton.jit
def gemv(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    m = tl.arange(0, BLOCK_M)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + n[:, None].to(tl.int64) * K + k[None, :], mask=(n[:, None] < N) & (k[None, :] < K), other=0.0)
        x = tl.load(x_ptr + m[:, None] * K + k[None, :], mask=(m[:, None] < M) & (k[None, :] < K), other=0.0)
        acc += tl.dot(x, tl.trans(w))
    tl.store(y_ptr + m[:, None] * N + n[None, :], acc.to(y_ptr.dtype.element_ty), mask=(m[:, None] < M) & (n[None, :] < N))

shapes = [(15840, 5280), (5280, 5280), (35840, 5280), (5280, 17920), (5280, 10560), (65536, 5280)]
rows = []
for N, K in shapes:
    w = torch.randn(N, K, device="cuda", dtype=torch.float16)
    for B in (1, 8, 32, 64):
        x = torch.randn(B, K, device="cuda", dtype=torch.float16)
        ref = torch.nn.functional.linear(x, w)
        t_cublas = do_bench(lambda: torch.nn.functional.linear(x, w), warmup=20, rep=100)
        best = None
        for BN in (16, 32, 64):
            for BK in (128, 256, 512):
                for nw in (4, 8):
                    for ns in (3, 4):
                        BM = max(16, triton.next_power_of_2(B))
                        if BM * BK + BN * BK > 64 * 1024: continue
                        y = torch.empty(B, N, device="cuda", dtype=torch.float16)
                        f = lambda: gemv[(triton.cdiv(N, BN),)](x, w, y, B, N, K, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, num_warps=nw, num_stages=ns)
                        try:
                            f(); torch.cuda.synchronize()
                            err = (y.float() - ref.float()).abs().max().item()
                            t = do_bench(f, warmup=10, rep=50)
                        except Exception as e:
                            continue
                        if best is None or t < best[0]: best = (t, dict(BN=BN, BK=BK, nw=nw, ns=ns, err=err))
        gb = N * K * 2 / 1e9
        rows.append(dict(N=N, K=K, B=B, cublas_ms=t_cublas, cublas_GBps=gb / t_cublas * 1e3,
                         triton_ms=best[0], triton_GBps=gb / best[0] * 1e3, triton_cfg=best[1]))
        print(json.dumps(rows[-1]), flush=True)
json.dump(dict(command="python3 " + shlex.join(sys.argv), script=os.environ.get("LOOPRL_SCRIPT"), environment=environment(), result=rows),
          open(sys.argv[1], "w"), indent=1)
