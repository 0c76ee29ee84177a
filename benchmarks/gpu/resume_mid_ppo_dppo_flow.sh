# PPO, DPPO and Flow-DPPO on the mid-size Huginn (FP16, loss scale 128) on CUDA:
# 3 updates eager vs --stop-after 2 + --resume with CUDA graphs, fresh processes; then the publication benchmark again.
source benchmarks/gpu/setup.sh
[ -d /tmp/hmid ] || timeout 60 python3 benchmarks/gpu/make_checkpoints.py mid
for alg in ppo dppo flow-dppo; do
  C="--model /tmp/hmid --algorithm $alg --precision fp16 --device cuda --updates 3 --ray-address local --no-progress"
  rm -rf /tmp/m-$alg-a /tmp/m-$alg-b
  timeout 100 python3 -m looprl.train $C --output /tmp/m-$alg-a 2>&1 | tail -6
  timeout 100 python3 -m looprl.train $C --output /tmp/m-$alg-b --stop-after 2 --cuda-graphs > /dev/null 2>&1
  timeout 100 python3 -m looprl.train --output /tmp/m-$alg-b --resume --ray-address local --no-progress > /dev/null 2>&1
  timeout 60 python3 -m looprl.compare /tmp/m-$alg-a /tmp/m-$alg-b --json > $OUT/compare-$alg-mid-fp16.json; echo "$alg compare exit $?"
  cp /tmp/m-$alg-a/metrics.jsonl $OUT/$alg-mid-fp16-metrics.jsonl
done
timeout 120 python3 -m looprl.bench publication --preset huginn-0125 --src cuda:0 --dst cuda:0 --out $OUT/publication-huginn-0125.json 2>&1 | grep -E "memory_s|bytes"
