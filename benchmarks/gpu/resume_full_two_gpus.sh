# Runs for two GPUs (nvidia-h200-x2), one per call, back to back so that /tmp survives between them:
#   bash benchmarks/gpu/resume_full_two_gpus.sh dppo        # ~7 min: checkpoint + 3 runs + compare
#   bash benchmarks/gpu/resume_full_two_gpus.sh flow-dppo   # ~7 min
#   bash benchmarks/gpu/resume_full_two_gpus.sh phases      # twice: ~2 min a run, six runs; the ledger continues
# Call with carry [".whl", ".raysplit/ray-slim.tar.xz"] and LOOPRL_COMMIT exported.
source benchmarks/gpu/setup.sh
[ -f /tmp/h0125/config.json ] || timeout 150 python3 benchmarks/gpu/make_checkpoints.py full
if [ "$1" = phases ]; then
  timeout ${PHASE_BUDGET:-560} python3 -m looprl.bench phases --model /tmp/h0125 --algorithm grpo --max-runs 6 \
    --train-args "--transport nccl --checkpoint-every 3" --out $OUT/phases-grpo-h0125.json 2>&1 | grep -E '"(runs_done|phase_s|warm_rollout_s|phase_eager_over_graph|graph_fallbacks|graph_recaptures_after_warmup)"'
  cp /tmp/looprl-phases/runs.jsonl $OUT/phases-ledger.jsonl
else
  bash benchmarks/gpu/resume_runs.sh "$1"
fi
