# One H200 (warm, after phases_pairs_start.sh): the remaining runs of the matched pairs, continuing the ledger.
source benchmarks/gpu/setup.sh
timeout ${PHASE_BUDGET:-540} python3 -m looprl.bench phases --model /tmp/h0125 --algorithm grpo --max-runs 6 \
  --train-args "--ray-address local --checkpoint-every 3" --out $OUT/phases-grpo-h0125-1gpu.json 2>&1 | grep -E '"(phase_s|warm_rollout_s|phase_eager_over_graph|warm_rollout_eager_over_graph|graph_fallbacks|graph_recaptures_after_warmup|runs_done)"'
cp /tmp/looprl-phases/runs.jsonl $OUT/phases-ledger.jsonl; wc -l $OUT/phases-ledger.jsonl
