# Resume equality on runs that learn, on one H200: trainer and engine in one process (--workers local), FP16 with loss
# scale 128, the synthetic reward looprl.rewards:even_token_share (random weights earn mixed rewards from it, so every
# update changes the state). Per case: 3 updates uninterrupted (eager decode) vs --stop-after 2 (CUDA graphs) + --resume
# in a fresh process; looprl.compare on the two; both runs' metrics, in $OUT/resume-learning-<algorithm>-<size>-fp16.json.
#   bash benchmarks/gpu/learning_resume.sh mid ppo grpo dppo flow-dppo     # mid-size Huginn (n_embd 1024, 8 recurrences)
#   bash benchmarks/gpu/learning_resume.sh full grpo                       # Huginn-0125 shapes (SGD: no optimizer state)
# Several "SIZE ALGORITHMS..." groups may follow one another, separated by "--"; a group starts only while
# ${BUDGET_S:-540} s have not passed.
source benchmarks/gpu/setup.sh
df -h /tmp /dev/shm | tail -2
case_run() {   # size alg
  local size=$1 alg=$2 model opt root=/tmp
  if [ "$size" = mid ]; then model=/tmp/hmid; opt="--optimizer adamw --lr 1e-4 --rollout-batch-size 4 --micro-batch-size 16 --max-response-tokens 16"
  else model=/tmp/h0125; opt="--optimizer sgd --lr 1e-5 --warmup-steps 0 --minibatches 1 --rollout-batch-size 4 --micro-batch-size 4 --recompute --max-response-tokens 16"
       [ "$alg" != grpo ] && root=/dev/shm; fi                       # PPO's 28 GB checkpoints: one run in memory
  local a=/tmp/l-$alg-a b=$root/l-$alg-b; rm -rf $a $b
  local C="--model $model --algorithm $alg --device cuda --workers local --precision fp16 --updates 3 --reward looprl.rewards:even_token_share
     --data looprl/assets/data/arithmetic-prompts.jsonl --no-eval --no-progress --keep-checkpoints 1 $opt"
  local t0=$(date +%s)
  timeout 300 python3 -m looprl.train $C --output $a --checkpoint-every 3 2>&1 | tail -1
  timeout 300 python3 -m looprl.train $C --output $b --stop-after 2 --cuda-graphs 2>&1 | tail -1
  timeout 300 python3 -m looprl.train --output $b --resume --no-progress --keep-checkpoints 1 2>&1 | tail -1
  timeout 200 python3 -m looprl.compare $a $b --json > /tmp/compare-$alg.json; echo "$size $alg compare exit $? after $(( $(date +%s) - t0 )) s"
  python3 - "$alg" "$size" "$a" "$b" <<'PY'
import json, os, sys
from looprl.state import read_metrics
from looprl.bench import environment
alg, size, a, b = sys.argv[1:]
doc = dict(command=f"bash benchmarks/gpu/learning_resume.sh {size} {alg}", environment=environment(),
           compare=json.load(open(f"/tmp/compare-{alg}.json")), contract=json.load(open(f"{a}/run.json"))["contract"],
           uninterrupted=read_metrics(a), resumed=read_metrics(b))
json.dump(doc, open(os.path.join(os.environ["OUT"], f"resume-learning-{alg}-{size}-fp16.json"), "w"), indent=1)
ups = [l for l in doc["uninterrupted"] if l["kind"] == "update"]
print(alg, size, doc["compare"]["verdict"], "| grad_norm", [round(u["grad_norm"], 4) for u in ups], "| digests", [u["digest"][7:15] for u in ups],
      "| reward", [round(u["reward_mean"], 4) for u in ups])
PY
  rm -rf $a $b
}
size=""
for arg in "$@"; do
  if [ "$arg" = "--" ]; then size=""; continue; fi
  if [ -z "$size" ]; then
    size=$arg
    if [ $SECONDS -gt ${BUDGET_S:-540} ]; then echo "skipping $size: $SECONDS s passed"; size=skip; continue; fi
    if [ "$size" = mid ]; then timeout 120 python3 benchmarks/gpu/make_checkpoints.py mid; else timeout 200 python3 benchmarks/gpu/make_checkpoints.py full; fi
    continue
  fi
  [ "$size" = skip ] && continue
  case_run $size $arg
done
