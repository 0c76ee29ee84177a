# sweep the flash-decoding tile (keys per program × warps) at Huginn-0125 shapes, then
# time the whole decode step with the best tile at B=64; kernel tests with the default tile.
source benchmarks/gpu/setup.sh
timeout 240 python3 benchmarks/gpu/attn_sweep.py $OUT 2>&1 | grep -E "^best|'B'|graph_ms" | tail -12
timeout 150 python3 -m pytest -q tests/test_kernels.py 2>&1 | tail -3
