# Synchronous against asynchronous rollouts (--async) on one GPU: looprl.bench async runs python -m looprl.train in fresh
# processes, the same GRPO run without and with --async, in matched pairs (AB, BA, …), on a random Huginn-0125-shaped
# checkpoint (make_checkpoints.py full), trainer and engine on the one GPU (--ray-address local: the engine decodes in a
# thread of the trainer's process, on a CUDA stream of its own, while the trainer trains); updates/s of each and the ratio.
#   bash benchmarks/gpu/async.sh                                        → $OUT/async-grpo-h0125-1gpu.json
# Settings: PAIRS (default 1), UPDATES (default 4), TOKENS (--max-response-tokens, default 256), ASYNC_BUDGET (s, default 580).
# The defaults aim at one pair within ten minutes on an H200 (an estimate from the two-GPU phase times, not a
# measurement); UPDATES=3 shortens it. CPU_CHECK=1 runs the same script on the CPU with the tiny shipped model and two updates (a check of its logic).
# The output streams, and is appended as it goes to $OUT/async-log.txt.
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
[ $# -eq 0 ] || { echo "$0: takes no arguments (settings: PAIRS, UPDATES, TOKENS, ASYNC_BUDGET, CPU_CHECK)" >&2; exit 2; }
source benchmarks/gpu/setup.sh
SETTINGS="$SETTINGS PAIRS UPDATES TOKENS ASYNC_BUDGET CPU_CHECK"
script_command "$@"
if [ "${CPU_CHECK:-0}" = 1 ]; then
  model=looprl/assets/tiny-huginn; device=cpu; updates=${UPDATES:-2}; tokens=${TOKENS:-8}; out=async-grpo-tiny-cpu-check
  eval="--eval-limit 8 --eval-samples 1"
else
  model=/tmp/h0125; device=cuda; updates=${UPDATES:-4}; tokens=${TOKENS:-256}; out=async-grpo-h0125-1gpu
  eval="--eval-limit 32 --eval-samples 1"       # random weights: the accuracy is 0; the evaluation is timed apart
fi
main() {
  [ "$device" = cpu ] || [ -f /tmp/h0125/config.json ] || step 150 python3 benchmarks/gpu/make_checkpoints.py full
  local args="--model $model --algorithm grpo --device $device --ray-address local --updates $updates --max-response-tokens $tokens
    --optimizer sgd --checkpoint-every $updates --keep-checkpoints 1 $eval"     # sgd: a 21 GB checkpoint, not 49 GB
  bench $out "${ASYNC_BUDGET:-580}" async --pairs "${PAIRS:-1}" --workdir /tmp/looprl-async --train-args "$(echo $args)"
  [ -f "$OUT/$out.json" ] && python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))['result']['summary']
print(f\"sync {s['sync']['updates_per_s']:.4f} updates/s, async {s['async']['updates_per_s']:.4f} updates/s, \"
      f\"async/sync {s['async_over_sync_updates_per_s']:.3f}\")" "$OUT/$out.json"
  df -h /tmp | tail -1
  finish
}
logged async main
