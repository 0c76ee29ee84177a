"""Tile size and warps of the flash-decoding kernel at Huginn-0125 shapes (55 heads × 96, 256 keys, FP16): TB/s of keys
and values read, per configuration and batch; then the whole decode step (CUDA graph) with the best tile at B=64.
Writes OUT_DIR/attention-sweep.json (every configuration, the best per batch) and OUT_DIR/rollout-huginn-0125-tile.json.
usage: python3 benchmarks/gpu/attention_tile_sweep.py OUT_DIR"""
import json, os, shlex, sys, torch
from looprl.model import kernels as K
from looprl.bench import environment
if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]): sys.exit(f"attention_tile_sweep.py: OUT_DIR must be a directory, got {sys.argv[1:]}\n{__doc__}")
H, D, T, out_dir = 55, 96, 256, sys.argv[1]
command, script = "python3 " + shlex.join(sys.argv), os.environ.get("LOOPRL_SCRIPT")
rows = []
for B in (1, 8, 32, 64):
    k = torch.randn(B, H, T, D, device="cuda", dtype=torch.float16); v = torch.randn_like(k)
    q = torch.randn(B, H, D, device="cuda", dtype=torch.float16); pos = torch.full((B,), T - 1, device="cuda", dtype=torch.int32)
    ref = K.decode_attention(q, k, v, pos, 64, 4)
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
    del k, v
best = {B: max((r for r in rows if r["B"] == B), key=lambda r: r["tb_s"]) for B in (1, 8, 32, 64)}
env = environment()
json.dump(dict(command=command, script=script, environment=env, rows=rows, best=best),
          open(f"{out_dir}/attention-sweep.json", "w"), indent=1)
print("best", best, flush=True)
K.DECODE_ATTENTION_TILE = dict(block_t=best[64]["block_t"], num_warps=best[64]["num_warps"])
from looprl.bench.rollout import bench_rollout
res = bench_rollout("huginn-0125", batch_sizes=(1, 8, 32, 64), context=256, dtype=torch.float16, cuda_graphs=True, device="cuda")
json.dump(dict(command=f"{command}  (bench_rollout with DECODE_ATTENTION_TILE={K.DECODE_ATTENTION_TILE})", script=script,
               environment=env, result=res), open(f"{out_dir}/rollout-huginn-0125-tile.json", "w"), indent=1)
for r in res: print({k: r[k] for k in ("B", "graph_ms", "bound_ms", "graph_over_bound")})
