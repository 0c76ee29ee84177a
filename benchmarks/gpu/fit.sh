# The memory and disk plan on one GPU (looprl.run.plan): python -m looprl.train with no setting but the model, the device,
# the placement, the algorithm and 3 updates (and SGD at Huginn-0125 shapes: see fit_runs.py), on a random
# Huginn-0125-shaped checkpoint, GRPO and PPO, with the settings line the plan prints, its figures against the measured
# peak memory, and the GRPO phase with checkpoints written in the background against the same run writing them in the
# update's time (--sync-checkpoints); a mid-size GRPO run.
#   [RUNS=grpo-mid,...] bash benchmarks/gpu/fit.sh   → $OUT/fit-runs.json (BUDGET_S: seconds for the runs, default 420; RUNS: fit_runs.py's)
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
source benchmarks/gpu/setup.sh
script_command "$@"
main() {
  df -h /tmp /dev/shm | sed 's/^/  /'
  local runs=${RUNS:-grpo-h0125,grpo-h0125-sync,ppo-h0125,grpo-mid,grpo-mid-sync,ppo-mid} sizes=""
  [[ $runs == *h0125* && ! -f /tmp/h0125/config.json ]] && sizes+=" full"
  [[ $runs == *mid* && ! -f /tmp/hmid/config.json ]] && sizes+=" mid"
  [ -z "$sizes" ] || step 200 python3 benchmarks/gpu/make_checkpoints.py $sizes
  step "${BUDGET_S:-420}" python3 benchmarks/gpu/fit_runs.py "$OUT/fit-runs.json" "$(( ${BUDGET_S:-420} - 10 ))" "$runs"
  python3 benchmarks/gpu/record.py stamp "$OUT/fit-runs.json"
  finish
}
logged fit main
