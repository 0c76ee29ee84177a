# One H200: the GPU tests, a random FP16 Huginn-0125 checkpoint, then the first runs of the eager-vs-graph matched
# pairs of complete 3-update GRPO phases with trainer and engine sharing the GPU in one process (phases_pairs_continue.sh
# continues the ledger).
source benchmarks/gpu/setup.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 200 python3 -m pytest -q tests/test_kernels.py tests/test_engine_gpu.py tests/test_gpu_digest.py 2>&1 | tail -15 | tee $OUT/gpu-tests-attention-tile.txt
timeout 150 python3 benchmarks/gpu/make_checkpoints.py full
rm -rf /tmp/looprl-phases
timeout ${PHASE_BUDGET:-300} python3 -m looprl.bench phases --model /tmp/h0125 --algorithm grpo --max-runs 6 \
  --train-args "--ray-address local --checkpoint-every 3" --out $OUT/phases-grpo-h0125-1gpu.json 2>&1 | tail -3
cp /tmp/looprl-phases/runs.jsonl $OUT/phases-ledger.jsonl; wc -l $OUT/phases-ledger.jsonl; df -h /tmp | tail -1
