"""Tile size and warps of the flash-decoding kernel at Huginn-0125 shapes (55 heads × 96, 256 keys, FP16):
GB/s of keys and values read, per configuration and batch. usage: python3 benchmarks/gpu/attn_sweep.py OUT.json"""
import json, sys, torch
from looprl import kernels as K
H, D, T = 55, 96, 256
rows = []
for B in (1, 8, 32, 64):
    k = torch.randn(B, H, T, D, device="cuda", dtype=torch.float16); v = torch.randn_like(k)
    q = torch.randn(B, H, D, device="cuda", dtype=torch.float16); pos = torch.full((B,), T - 1, device="cuda", dtype=torch.int32)
    ref = K.decode_attention(q, k, v, pos)
    for bt in (16, 32, 64, 128, 256):
        for nw in (1, 2, 4, 8):
            out = K.decode_attention(q, k, v, pos, bt, nw)
            err = (out.float() - ref.float()).abs().max().item()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(20): K.decode_attention(q, k, v, pos, bt, nw)
            g.replay(); torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); [g.replay() for _ in range(10)]; e.record(); torch.cuda.synchronize()
            us = s.elapsed_time(e) * 1000 / 200
            rows.append(dict(B=B, block_t=bt, num_warps=nw, us=us, tb_s=2 * k.numel() * 2 / us / 1e6, max_err=err))
            print(rows[-1], flush=True)
best = {B: max((r for r in rows if r["B"] == B), key=lambda r: r["tb_s"]) for B in (1, 8, 32, 64)}
json.dump(dict(command="python3 benchmarks/gpu/attn_sweep.py", rows=rows, best=best), open(sys.argv[1], "w"), indent=1)
print("best", best)
