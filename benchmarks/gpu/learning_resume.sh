# Resume equality on runs that learn, on one H200: trainer and engine in one process (--workers local), FP16 with loss
# scale 128, the synthetic reward looprl.rewards:even_token_share (random weights earn mixed rewards from it, so every
# update changes the state). Per case: 3 updates uninterrupted (eager decode) vs --stop-after 2 (CUDA graphs) + --resume
# in a fresh process; looprl.compare on the two; both runs' metrics. Usage: learning_resume.sh mid|full [algorithms...]
source benchmarks/gpu/setup.sh
size=$1; shift
df -h /tmp /dev/shm | tail -2
if [ "$size" = mid ]; then model=/tmp/hmid; timeout 120 python3 benchmarks/gpu/make_checkpoints.py mid
  opt="--optimizer adamw --lr 1e-4 --rollout-batch-size 8 --micro-batch-size 8 --max-response-tokens 32"
else model=/tmp/h0125; timeout 200 python3 benchmarks/gpu/make_checkpoints.py full
  opt="--optimizer sgd --lr 1e-5 --warmup-steps 0 --minibatches 1 --rollout-batch-size 4 --micro-batch-size 4 --recompute --max-response-tokens 32"
fi
for alg in "$@"; do
  root=/tmp; [ "$size" = full ] && [ "$alg" != grpo ] && root=/dev/shm        # PPO's two 28 GB checkpoints do not fit the disk twice
  a=/tmp/l-$alg-a; b=$root/l-$alg-b; rm -rf $a $b
  C="--model $model --algorithm $alg --device cuda --workers local --precision fp16 --updates 3 --reward looprl.rewards:even_token_share
     --data looprl/assets/data/arithmetic-prompts.jsonl --no-eval --no-progress --keep-checkpoints 1 $opt"
  t0=$(date +%s)
  timeout 400 python3 -m looprl.train $C --output $a --checkpoint-every 3 2>&1 | tail -2
  timeout 400 python3 -m looprl.train $C --output $b --stop-after 2 --cuda-graphs 2>&1 | tail -2
  timeout 400 python3 -m looprl.train --output $b --resume --no-progress --keep-checkpoints 1 2>&1 | tail -2
  timeout 200 python3 -m looprl.compare $a $b --json > /tmp/compare-$alg.json; echo "$alg compare exit $? after $(( $(date +%s) - t0 )) s"
  python3 - "$alg" "$size" "$a" "$b" <<'PY'
import json, os, sys
from looprl.state import read_metrics
alg, size, a, b = sys.argv[1:]
doc = dict(command=f"bash benchmarks/gpu/learning_resume.sh {size} {alg}", compare=json.load(open(f"/tmp/compare-{alg}.json")),
           uninterrupted=read_metrics(a), resumed=read_metrics(b), run=json.load(open(f"{a}/run.json")))
from looprl.bench import environment
doc["environment"] = environment()
out = os.path.join(os.environ["OUT"], f"resume-learning-{alg}-{size}-fp16.json")
json.dump(doc, open(out, "w"), indent=1)
ups = [l for l in doc["uninterrupted"] if l["kind"] == "update"]
print(alg, size, doc["compare"]["verdict"], "grad_norm", [round(u["grad_norm"], 4) for u in ups], "digests", [u["digest"][7:15] for u in ups])
PY
  rm -rf $a $b
done
