# One H200: GPU tests with the swept attention tile (16 keys, one warp) and the long-plane check; the decode step at
# Huginn-0125 shapes with the package defaults; one complete GRPO run with trainer and engine in one process on the GPU,
# publications staying on the device (compare publication_s with the phases ledger).
source benchmarks/gpu/setup.sh
timeout 200 python3 -m pytest -q tests/test_kernels.py tests/test_engine_gpu.py tests/test_gpu_digest.py 2>&1 | tail -15 | tee $OUT/gpu-tests-attention-tile.txt
timeout 150 python3 -m looprl.bench rollout --preset huginn-0125 --cuda-graphs --out $OUT/rollout-huginn-0125.json 2>&1 | grep -E '"(B|graph_ms|eager_ms|graph_over_bound|peak_memory_gib)"'
timeout 150 python3 benchmarks/gpu/make_checkpoints.py full
timeout 220 python3 -m looprl.train --model /tmp/h0125 --algorithm grpo --device cuda --updates 3 --ray-address local --cuda-graphs \
  --checkpoint-every 3 --keep-checkpoints 1 --output /tmp/g1 --no-progress 2>&1 | tail -4
cp /tmp/g1/metrics.jsonl $OUT/grpo-h0125-1gpu-local-metrics.jsonl; cp /tmp/g1/summary.json $OUT/grpo-h0125-1gpu-local-summary.json
