# FP32 parity on CUDA (mid-size Huginn); GRPO at Huginn-0125 shapes (FP16, loss scale 128):
# 3 updates eager vs --stop-after 2 + --resume with CUDA graphs, in fresh processes; compare.
source benchmarks/gpu/setup.sh
timeout 120 python3 benchmarks/gpu/make_checkpoints.py full mid
timeout 60 python3 -m looprl.verify /tmp/hmid --device cuda --dtype fp32 --samples 8 --max-new-tokens 32 > $OUT/verify-mid-fp32-cuda.json; tail -c 600 $OUT/verify-mid-fp32-cuda.json
C="--model /tmp/h0125 --algorithm grpo --device cuda --updates 3 --ray-address local --no-progress --keep-checkpoints 1"
timeout 200 python3 -m looprl.train $C --output /tmp/ga 2>&1 | tail -7
timeout 150 python3 -m looprl.train $C --output /tmp/gb --stop-after 2 --cuda-graphs 2>&1 | tail -5
timeout 100 python3 -m looprl.train --output /tmp/gb --resume --ray-address local --no-progress --keep-checkpoints 1 2>&1 | tail -5
cp /tmp/ga/metrics.jsonl $OUT/grpo-h0125-eager-metrics.jsonl; cp /tmp/gb/metrics.jsonl $OUT/grpo-h0125-graph-resumed-metrics.jsonl
timeout 120 python3 -m looprl.compare /tmp/ga /tmp/gb --json > $OUT/compare-grpo-h0125.json; echo "compare exit $?"; head -c 1500 $OUT/compare-grpo-h0125.json
