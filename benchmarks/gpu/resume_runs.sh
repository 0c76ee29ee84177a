# Resume equality at Huginn-0125 shapes (FP16, loss scale 128), Ray placing trainer and engine on two GPUs, publications
# over NCCL: 3 updates uninterrupted (eager decode) vs --stop-after 2 (CUDA graphs) + --resume in a fresh process; compare.
for alg in "$@"; do
  C="--model /tmp/h0125 --algorithm $alg --device cuda --updates 3 --transport nccl --no-progress --keep-checkpoints 1"
  rm -rf /tmp/f-$alg-a /tmp/f-$alg-b
  timeout 280 python3 -m looprl.train $C --output /tmp/f-$alg-a --checkpoint-every 3 2>&1 | tail -6
  timeout 280 python3 -m looprl.train $C --output /tmp/f-$alg-b --stop-after 2 --checkpoint-every 2 --cuda-graphs 2>&1 | tail -4
  timeout 280 python3 -m looprl.train --output /tmp/f-$alg-b --resume --no-progress --keep-checkpoints 1 2>&1 | tail -4
  timeout 60 python3 -m looprl.compare /tmp/f-$alg-a /tmp/f-$alg-b --json > $OUT/compare-$alg-h0125-ray-nccl.json; echo "$alg compare exit $?"
  cp /tmp/f-$alg-a/metrics.jsonl $OUT/$alg-h0125-ray-nccl-metrics.jsonl
  cp /tmp/f-$alg-b/metrics.jsonl $OUT/$alg-h0125-ray-nccl-resumed-metrics.jsonl
  rm -rf /tmp/f-$alg-a /tmp/f-$alg-b
done
