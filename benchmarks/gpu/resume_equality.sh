# Resume equality on runs that learn. Per case: 3 updates uninterrupted (eager decode) against --stop-after 2 (CUDA graphs)
# then --resume in a fresh process, compared field by field by looprl.compare. FP16 with loss scale 128, random weights and
# the synthetic reward looprl.tasks.rewards:even_token_share (random weights earn mixed rewards from it, so every update changes
# the state).
#   bash benchmarks/gpu/resume_equality.sh SIZE ALGORITHM... [-- SIZE ALGORITHM...]
#     SIZE mid: a mid-size Huginn (n_embd 1024, 8 heads of 128, 8 recurrences), AdamW at 1e-4;
#          task: the warm-started task model in MODEL (python -m looprl.warmstart DIR --preset mid), on its train split
#          with the task's reward and the mid learning preset's settings (lr 5e-6, 32 prompts x 8, micro-batch 128);
#          full: Huginn-0125 shapes (3.5B parameters), SGD at 1e-5 (no optimizer state), activation recompute.
#     ALGORITHM: ppo, grpo, dppo, flow-dppo. A group "SIZE ALGORITHM..." starts only while BUDGET_S (default 540) s have
#     not passed since the script started.
#   e.g. bash benchmarks/gpu/resume_equality.sh mid ppo grpo dppo flow-dppo
#        bash benchmarks/gpu/resume_equality.sh full grpo
#        STAGE=a bash benchmarks/gpu/resume_equality.sh full ppo; STAGE=b ...; STAGE=resume+compare ...
# Settings (environment):
#   WORKERS   local (default): trainer and engine in one process on one GPU; ray: one GPU each, placed by Ray (two GPUs).
#   TRANSPORT memory, disk or nccl: how publications reach the engine (looprl.train's default when unset).
#   REWARD    the reward function (default looprl.tasks.rewards:even_token_share).
#   BACKEND   the trainer backend, torch (default) or megatron (--backend megatron; megatron-core installed or its wheel
#             in .whl/).
#   STAGE     all (default), or a comma-separated list of: checkpoint (write the random checkpoint of SIZE), a (the
#             uninterrupted run), b (the run stopped after 2 updates), resume+compare (resume b, compare a with b, write
#             the JSON, remove both runs). Stages a and b write the checkpoint when it is missing. The runs and the
#             checkpoints live in /tmp (the stopped run of a full-size algorithm with a critic in /dev/shm), so stages run
#             as separate commands need a machine that keeps /tmp and /dev/shm between them.
#   STEP_TIMEOUT_S  time limit of each training process (default 300).
#   DIST_OPT  1: --distributed-optimizer (with BACKEND=megatron; the mid size trains with AdamW).
#   TWIN      a part of the state (LOOPRL_SKIP_RESTORE, looprl.core.state.RESTORABLE), e.g. optimizer: a copy of the stopped run
#             is also resumed with that part left out, and compared with the uninterrupted run; that comparison must say
#             DIFFERENT, or the case fails. Its JSON: the case's name with -twin-<part>.
# Writes $OUT/resume-learning-<algorithm>-<size>-fp16<layout>.json (<layout> is empty with local workers and no TRANSPORT,
# else -<workers>-<transport>; -megatron is added with BACKEND=megatron): the case's command, the commands of its runs, looprl.compare's report, the run contract and
# both runs' metrics. The output streams, and is appended as it goes to $OUT/resume-learning-log.txt.
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
source benchmarks/gpu/setup.sh
script_command "$@"

STAGES=${STAGE:-all}; [ "$STAGES" = all ] && STAGES=checkpoint,a,b,resume+compare
for s in ${STAGES//,/ }; do
  case $s in checkpoint|a|b|resume+compare) ;; *) echo "$0: unknown STAGE '$s' (all, or a list of checkpoint, a, b, resume+compare)" >&2; exit 2;; esac
done
workers=${WORKERS:-local}
case $workers in local|ray) ;; *) echo "$0: unknown WORKERS '$workers' (local or ray)" >&2; exit 2;; esac
layout=""; [ "$workers" = ray ] || [ -n "${TRANSPORT:-}" ] && layout="-$workers-${TRANSPORT:-memory}"
backend=${BACKEND:-torch}
case $backend in torch) ;; megatron) layout="$layout-megatron";; *) echo "$0: unknown BACKEND '$backend' (torch or megatron)" >&2; exit 2;; esac
[ "${DIST_OPT:-}" = 1 ] && layout="$layout-distopt"
size=""
for arg in "$@"; do       # the arguments are checked before anything runs
  if [ "$arg" = "--" ]; then size=""; elif [ -z "$size" ]; then size=$arg
    case $size in mid|full) ;; task) [ -f "${MODEL:-}/warmstart.json" ] || { echo "$0: SIZE task needs MODEL, a warm-started model directory (no warmstart.json in '${MODEL:-}')" >&2; exit 2; };;
      *) echo "$0: unknown SIZE '$size' (mid, full or task)" >&2; exit 2;; esac
  else case $arg in ppo|grpo|dppo|flow-dppo) ;; *) echo "$0: unknown ALGORITHM '$arg' (ppo, grpo, dppo, flow-dppo)" >&2; exit 2;; esac; fi
done
[ $# -gt 0 ] || { echo "usage: bash $0 SIZE ALGORITHM... [-- SIZE ALGORITHM...]  (SIZE mid or full)" >&2; exit 2; }

has() { [[ ",$STAGES," == *",$1,"* ]]; }
model_of() { case $1 in mid) echo /tmp/hmid;; task) echo "$MODEL";; *) echo /tmp/h0125;; esac; }
checkpoint() {   # SIZE: its random checkpoint (make_checkpoints.py)
  if [ "$1" = task ]; then return 0; elif [ "$1" = mid ]; then step 120 python3 benchmarks/gpu/make_checkpoints.py mid; else step 200 python3 benchmarks/gpu/make_checkpoints.py full; fi
}
run_logged() {   # COMMANDS_FILE CMD...: the command line appended to the case's commands, then run as a step
  local file=$1; shift; echo "$*" >> "$file"; step "${STEP_TIMEOUT_S:-300}" "$@"
}

case_run() {   # SIZE ALGORITHM: the stages of one case
  local size=$1 alg=$2 model opt root=/tmp
  model=$(model_of "$size")
  local data="--data looprl/assets/data/arithmetic-prompts.jsonl --reward ${REWARD:-looprl.tasks.rewards:even_token_share}"
  if [ "$size" = task ]; then opt="--lr 5e-6 --rollout-batch-size 32 --n-samples-per-prompt 8 --micro-batch-size 128"
       data="--data $model/splits/train.jsonl${REWARD:+ --reward $REWARD}"
  elif [ "$size" = mid ]; then opt="--optimizer adamw --lr 1e-4 --rollout-batch-size 4 --micro-batch-size 16 --max-response-tokens 16"
  else opt="--optimizer sgd --lr 1e-5 --warmup-steps 0 --minibatches 1 --rollout-batch-size 4 --micro-batch-size 4 --recompute --max-response-tokens 16"
       [ "$alg" != grpo ] && root=/dev/shm; fi         # with a critic the checkpoint is 28 GB: the stopped run in memory
  local a=/tmp/l-$alg-a b=$root/l-$alg-b cmds=/tmp/l-$alg-commands.txt report=/tmp/l-$alg-compare.json
  local C="--model $model --algorithm $alg --device cuda --workers $workers --precision fp16 --updates 3
     $data --no-eval --no-progress
     --keep-checkpoints 1 $opt${TRANSPORT:+ --transport $TRANSPORT}${BACKEND:+ --backend $BACKEND}"
  [ "${DIST_OPT:-}" = 1 ] && C="$C --distributed-optimizer"
  local case="bash $0 $size $alg" v t0=$SECONDS
  for v in MODEL REWARD TRANSPORT WORKERS BACKEND DIST_OPT TWIN; do [ -n "${!v:-}" ] && case="$v=${!v} $case"; done
  echo "== $size $alg: stages $STAGES"
  if has a; then
    [ -f $model/config.json ] || checkpoint "$size"
    rm -rf $a; echo "python3 benchmarks/gpu/make_checkpoints.py $size" > $cmds
    run_logged $cmds python3 -m looprl.train $C --output $a --checkpoint-every 3
  fi
  if has b; then
    [ -f $model/config.json ] || checkpoint "$size"
    rm -rf $b; run_logged $cmds python3 -m looprl.train $C --output $b --stop-after 2 --cuda-graphs
    if [ -n "${TWIN:-}" ]; then rm -rf $b-twin; cp -r $b $b-twin; fi
  fi
  if has resume+compare; then
    run_logged $cmds python3 -m looprl.train --output $b --resume --no-progress --keep-checkpoints 1
    echo "python3 -m looprl.compare $a $b --json" >> $cmds
    echo "\$ python3 -m looprl.compare $a $b --json > $report"
    timeout 200 python3 -m looprl.compare $a $b --json > $report; local rc=$?
    echo "$size $alg compare exit $rc after $(( SECONDS - t0 )) s"
    [ $rc -eq 0 ] || FAILED+=("$size $alg: looprl.compare exit $rc")
    python3 benchmarks/gpu/record.py resume "$OUT/resume-learning-$alg-$size-fp16$layout.json" "$case" $a $b $report $cmds \
      || FAILED+=("$size $alg: record.py resume")
    if [ -n "${TWIN:-}" ]; then
      local twin=$b-twin twin_report=/tmp/l-$alg-compare-twin.json
      echo "LOOPRL_SKIP_RESTORE=$TWIN python3 -m looprl.train --output $twin --resume --no-progress --keep-checkpoints 1" >> $cmds
      LOOPRL_SKIP_RESTORE=$TWIN step "${STEP_TIMEOUT_S:-300}" python3 -m looprl.train --output $twin --resume --no-progress --keep-checkpoints 1
      echo "python3 -m looprl.compare $a $twin --json" >> $cmds
      timeout 200 python3 -m looprl.compare $a $twin --json > $twin_report; rc=$?
      echo "$size $alg twin ($TWIN not restored): compare exit $rc (DIFFERENT is 1)"
      [ $rc -eq 1 ] || FAILED+=("$size $alg twin $TWIN: looprl.compare exit $rc, not 1 (DIFFERENT)")
      python3 benchmarks/gpu/record.py resume "$OUT/resume-learning-$alg-$size-fp16$layout-twin-$TWIN.json" "$case" $a $twin \
        $twin_report $cmds || FAILED+=("$size $alg twin: record.py resume")
      rm -rf $twin $twin_report
    fi
    rm -rf $a $b $report $cmds
  fi
}

main() {
  df -h /tmp /dev/shm | tail -2
  local size="" arg
  for arg in "$@"; do
    if [ "$arg" = "--" ]; then size=""; continue; fi
    if [ -z "$size" ]; then
      size=$arg
      if [ $SECONDS -gt ${BUDGET_S:-540} ]; then echo "skipping $size: $SECONDS s passed (BUDGET_S ${BUDGET_S:-540})"; size=skip; continue; fi
      has checkpoint && checkpoint "$size"
      continue
    fi
    [ "$size" = skip ] && continue
    case_run "$size" "$arg"
  done
  finish
}
logged resume-learning main "$@"
