# resume equality with trainer and engine in one process on the GPU (publications on the
# device), mid-size Huginn FP16: 3 updates eager vs --stop-after 2 with CUDA graphs + --resume; compare.
source benchmarks/gpu/setup.sh
timeout 90 python3 benchmarks/gpu/make_checkpoints.py mid
for alg in grpo flow-dppo; do
  C="--model /tmp/hmid --algorithm $alg --device cuda --updates 3 --ray-address local --no-progress --keep-checkpoints 1"
  timeout 100 python3 -m looprl.train $C --output /tmp/l-$alg-a 2>&1 | tail -1
  timeout 100 python3 -m looprl.train $C --output /tmp/l-$alg-b --stop-after 2 --cuda-graphs 2>&1 | tail -1
  timeout 100 python3 -m looprl.train --output /tmp/l-$alg-b --resume --no-progress --keep-checkpoints 1 2>&1 | tail -1
  timeout 60 python3 -m looprl.compare /tmp/l-$alg-a /tmp/l-$alg-b --json > $OUT/compare-$alg-mid-fp16-1gpu-local.json; echo "$alg compare exit $?"
done
