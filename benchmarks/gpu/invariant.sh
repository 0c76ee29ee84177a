# The batch-invariant kernels (looprl.model.invariant) on one GPU: their tests (rows and queries the same bits for any
# number of rows or queries, with the twins that break it; tiny Huginn, Nanbeige and Ouro: a whole sequence's logits
# equal to prefill+decode, a row alone equal to it in a batch), then each kernel's time against today's path at
# Huginn-0125 shapes, FP16; and (part run) the exact mode in a run: a short GRPO run on the mid Huginn
# (make_checkpoints.py mid: n_embd 1024, 8 recurrences) in FP16 with CUDA graphs, with --exact-kernels and without, under
# the reward even_token_share (random weights earn mixed rewards from it, so the weights change at every update).
#   bash benchmarks/gpu/invariant.sh [tests] [bench] [run]   (default: all three)
#     tests → $OUT/invariant-tests.json, $OUT/exact-mode-tests.json (pytest's outcomes: the kernels; exact mode in the
#             engine and the trainer, tests/test_exact_mode.py)
#     bench → $OUT/invariant-huginn-0125.json
#     run   → $OUT/invariant-run-mid.json: each update's parity_max and seconds in both runs, the ratio of the median
#             update times (UPDATES: updates per run, default 6)
# The output streams, and is appended as it goes to $OUT/invariant-log.txt.
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
source benchmarks/gpu/setup.sh
SETTINGS="$SETTINGS UPDATES"
script_command "$@"
KNOWN="tests bench run"
check_parts "$KNOWN" "$@"; PARTS=${*:-$KNOWN}
[[ ${UPDATES:-6} =~ ^[1-9][0-9]*$ ]] || { echo "$0: UPDATES must be a whole number ≥ 1, got '$UPDATES'" >&2; exit 2; }
exact_runs() {   # the mid Huginn's GRPO run with --exact-kernels and without, then both side by side
  local n=${UPDATES:-6} cmds=/tmp/looprl-exact-commands.txt mode dir
  [ -f /tmp/hmid/config.json ] || step 120 python3 benchmarks/gpu/make_checkpoints.py mid || return 1
  : > $cmds
  for mode in exact ordinary; do
    dir=/tmp/looprl-exact-$mode; rm -rf $dir
    local c="python3 -m looprl.train --model /tmp/hmid --output $dir --device cuda --workers local --precision fp16
      --cuda-graphs --algorithm grpo --updates $n --rollout-batch-size 4 --micro-batch-size 16 --max-response-tokens 16
      --optimizer adamw --lr 1e-4 --data looprl/assets/data/arithmetic-prompts.jsonl
      --reward looprl.tasks.rewards:even_token_share --no-eval --no-progress --keep-checkpoints 1"
    [ $mode = exact ] && c="$c --exact-kernels"
    echo $c >> $cmds
    step 280 $c
  done
  step 60 python3 benchmarks/gpu/exact_runs.py "$OUT/invariant-run-mid.json" /tmp/looprl-exact-exact \
    /tmp/looprl-exact-ordinary $cmds
}
main() {
  want tests && step 260 python3 benchmarks/gpu/record.py check "$OUT/invariant-tests.json" 250 \
    python3 -m pytest -q -p no:cacheprovider tests/test_invariant_kernels.py
  want tests && step 300 python3 benchmarks/gpu/record.py check "$OUT/exact-mode-tests.json" 290 \
    python3 -m pytest -q -p no:cacheprovider tests/test_exact_mode.py
  want bench && step 320 python3 benchmarks/gpu/invariant_bench.py "$OUT"
  want run && exact_runs
  finish
}
logged invariant main
