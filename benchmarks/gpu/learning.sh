# The GPU's standard demonstration: the mid task model (looprl.run.task_model: Huginn's layout, width 1024, 2 + 4 × 8 + 2
# layers, over 100M parameters, its own BPE tokenizer, reasoning-gym chain_sum) warm-started on the GPU, then improved by
# RL with every looprl.train setting at its GPU default (FP16 with loss scale 128, CUDA graphs, compiled blocks), trainer
# and engine on the one GPU; held-out accuracy before and after each run (python -m looprl.bench learning --preset mid).
#   bash benchmarks/gpu/learning.sh                      → $OUT/learning-mid-cuda.json, $OUT/warmstart-mid.json
# A machine without reasoning-gym reads the splits from a folder: write them first where reasoning-gym is installed:
#   python -m looprl.warmstart runs/mid-splits --preset mid --write-splits
# Settings: ALGORITHMS (default grpo), SEEDS (default 42), TRAIN_ARGS (extra looprl.train arguments), SPLITS (default
# runs/mid-splits), MODEL (a mid model already warm-started: no warm start), BUDGET_S (default 570), PARALLEL=1 (each
# algorithm and seed in its own process, all at once on the one GPU, after one warm start: $OUT/learning-mid-cuda-A-S.json
# each; a run's wall time is then measured while it shares the GPU with the others), REBUILD=1 (with PARALLEL=1 and no
# MODEL: the same warm start command once more, after the runs, into another directory; $OUT/warmstart-mid-rebuild.json
# says which of its files and record fields equal the first's).
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
[ $# -eq 0 ] || { echo "$0: takes no arguments (settings: ALGORITHMS, SEEDS, TRAIN_ARGS, SPLITS, MODEL, BUDGET_S)" >&2; exit 2; }
source benchmarks/gpu/setup.sh
SETTINGS="$SETTINGS ALGORITHMS SEEDS TRAIN_ARGS SPLITS MODEL PARALLEL REBUILD"
script_command "$@"
main() {
  local splits=${SPLITS:-runs/mid-splits} model=${MODEL:-}
  ALGORITHMS=${ALGORITHMS:-grpo} SEEDS=${SEEDS:-42}
  [ -n "$model" ] || [ -f "$splits/heldout.jsonl" ] || { echo "$0: no splits in $splits (see the comment at the top)" >&2; return 2; }
  if [ "${PARALLEL:-0}" = 1 ]; then
    if [ -z "$model" ]; then
      model=/tmp/looprl-learning-mid/mid-model
      step "${BUDGET_S:-570}" python3 -m looprl.warmstart "$model" --preset mid --device cuda --splits "$splits" || return 1
    fi
    local a s pids=()
    for a in ${ALGORITHMS//,/ }; do for s in ${SEEDS//,/ }; do
      bench "learning-mid-cuda-$a-$s" "${BUDGET_S:-570}" learning --preset mid --device cuda --algorithms "$a" --seeds "$s" \
        --workdir "/tmp/looprl-learning-mid/$a-$s-run" --train-args "${TRAIN_ARGS:-}" --model "$model" &
      pids+=($!)
    done; done
    for p in "${pids[@]}"; do wait "$p" || FAILED+=("run $p"); done
    if [ "${REBUILD:-0}" = 1 ] && [ -z "${MODEL:-}" ]; then
      local again=/tmp/looprl-learning-mid/mid-model-again
      step "${BUDGET_S:-570}" python3 -m looprl.warmstart "$again" --preset mid --device cuda --splits "$splits" >/dev/null \
        && python3 benchmarks/gpu/record.py rebuild "$OUT/warmstart-mid-rebuild.json" "$model" "$again" \
        || FAILED+=("rebuild")
    fi
  else
    bench learning-mid-cuda "${BUDGET_S:-570}" learning --preset mid --device cuda --algorithms "${ALGORITHMS:-grpo}" \
      --seeds "${SEEDS:-42}" --workdir /tmp/looprl-learning-mid --train-args "${TRAIN_ARGS:-}" \
      $([ -n "$model" ] && echo "--model $model" || echo "--splits $splits")
  fi
  [ -f /tmp/looprl-learning-mid/mid-model/warmstart.json ] && cp /tmp/looprl-learning-mid/mid-model/warmstart.json "$OUT/warmstart-mid.json"
  for m in /tmp/looprl-learning-mid/*/metrics.jsonl /tmp/looprl-learning-mid/*-run/*/metrics.jsonl; do     # each run's metrics, also when the benchmark ran out of time
    [ -f "$m" ] && cp "$m" "$OUT/metrics-$(basename "$(dirname "$m")").jsonl"
  done
  finish
}
logged learning main
