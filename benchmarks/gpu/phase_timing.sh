# Complete runs, eager decoding against CUDA graphs: looprl.bench phases runs python -m looprl.train in fresh processes
# (startup, 3 updates of rollout, reward, training and publication, one checkpoint) on a random Huginn-0125-shaped
# checkpoint (make_checkpoints.py full), GRPO, eager and graph alternating AB, BA, AB; the median of each mode.
#   bash benchmarks/gpu/phase_timing.sh [local|nccl]
#   local (default)  trainer and engine in one process on one GPU (--ray-address local) → $OUT/phases-grpo-h0125-1gpu.json
#   nccl             trainer and engine on two GPUs, publications over NCCL             → $OUT/phases-grpo-h0125.json
# Each finished run is appended to a ledger (/tmp/looprl-phases-<layout>/runs.jsonl, copied to $OUT/phases-ledger-<layout>.jsonl);
# a call makes at most MAX_RUNS (default 6) new runs within PHASE_BUDGET s (default 540), and a later call on the same
# machine continues the ledger, so the six runs can be spread over several calls. RESET=1 starts a new ledger.
# The output streams, and is appended as it goes to $OUT/phase-timing-log.txt.
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
source benchmarks/gpu/setup.sh
script_command "$@"
layout=${1:-local}
case $layout in
  local) extra="--ray-address local --checkpoint-every 3"; out=phases-grpo-h0125-1gpu ;;
  nccl)  extra="--transport nccl --checkpoint-every 3"; out=phases-grpo-h0125
         [ "$NGPUS" -ge 2 ] || { echo "$0: nccl needs two GPUs; this machine has $NGPUS" >&2; exit 2; } ;;
  *) echo "$0: unknown layout '$layout' (local or nccl)" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "$0: one layout at most" >&2; exit 2; }
main() {
  local work=/tmp/looprl-phases-$layout
  [ "${RESET:-0}" = 1 ] && rm -rf "$work"
  [ -f /tmp/h0125/config.json ] || step 150 python3 benchmarks/gpu/make_checkpoints.py full
  bench $out "${PHASE_BUDGET:-540}" phases --model /tmp/h0125 --algorithm grpo --max-runs "${MAX_RUNS:-6}" --workdir "$work" --train-args "$extra"
  [ -f "$work/runs.jsonl" ] && cp "$work/runs.jsonl" "$OUT/phases-ledger-$layout.jsonl" && wc -l "$OUT/phases-ledger-$layout.jsonl"
  df -h /tmp | tail -1
  finish
}
logged phase-timing main
