# Sourced by every script in benchmarks/gpu/, which run from the repository root on a machine with a CUDA GPU.
# Puts looprl on the path; where the tree holds wheels (.whl/*.whl) or a slimmed Ray (.raysplit/ray-slim.tar.xz: the
# 2.60 wheel without jars, rllib, data, tune, train, serve, llm) it installs them into /tmp/site, for a machine without
# a package index; elsewhere install looprl with its dependencies first. Sets OUT (default ./out, made absolute), where
# each script writes its JSON files and its log, and LOOPRL_SCRIPT, the script's command line that record.py stores.
[ -f looprl/__init__.py ] && [ -f benchmarks/gpu/setup.sh ] || { echo "benchmarks/gpu: run the scripts from the repository root" >&2; exit 2; }
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
fi
if [ -f .raysplit/ray-slim.tar.xz ] && [ ! -d /tmp/site/ray ]; then mkdir -p /tmp/site && tar xJf .raysplit/ray-slim.tar.xz -C /tmp/site; fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1     # no NVLink multicast
OUT=$(mkdir -p "${OUT:-out}" && cd "${OUT:-out}" && pwd) || { echo "benchmarks/gpu: OUT=${OUT:-out} is not a writable directory" >&2; exit 2; }
export OUT
NGPUS=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null) || NGPUS=0
[ "${NGPUS:-0}" -gt 0 ] || [ "${CPU_CHECK:-0}" = 1 ] || { echo "benchmarks/gpu: no CUDA device (torch.cuda.device_count() is 0, or torch does not import)" >&2; exit 2; }

# The settings the scripts read from the environment; LOOPRL_SCRIPT names those that are set.
SETTINGS="STAGE WORKERS TRANSPORT BACKEND REWARD BUDGET_S STEP_TIMEOUT_S MAX_RUNS PHASE_BUDGET RESET RUNS FIT_EXTRA"
script_command() {   # ARGS...: sets LOOPRL_SCRIPT to "[SETTING=value ...] bash <this script> ARGS..."
  local s="" v
  for v in $SETTINGS; do [ -n "${!v:-}" ] && s+="$v=$(printf %q "${!v}") "; done
  LOOPRL_SCRIPT="${s}bash $0"; [ $# -gt 0 ] && LOOPRL_SCRIPT+=$(printf ' %q' "$@")
  export LOOPRL_SCRIPT
}

logged() {   # NAME FUNCTION ARGS...: runs FUNCTION, its output streaming and appended as it goes to $OUT/NAME-log.txt
  local log=$OUT/$1-log.txt; shift
  { echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $LOOPRL_SCRIPT"
    python3 -c "from looprl.bench import environment; print(environment())"; "$@"; } 2>&1 | tee -a "$log"
  return "${PIPESTATUS[0]}"
}

FAILED=()
step() {   # TIMEOUT_S CMD...: prints the command and runs it under that time limit; a failure is counted, the script goes on
  local limit=$1 t0=$SECONDS rc; shift
  echo "\$ $*"
  timeout "$limit" "$@"; rc=$?
  echo "exit $rc after $(( SECONDS - t0 )) s$([ $rc -eq 124 ] && echo " (time limit $limit s)")"
  [ $rc -eq 0 ] || FAILED+=("$*")
  return $rc
}

bench() {   # NAME TIMEOUT_S ARGS...: python -m looprl.bench ARGS --out $OUT/NAME.json, then the script's command line added to it
  local name=$1 limit=$2; shift 2
  step "$limit" python3 -m looprl.bench "$@" --out "$OUT/$name.json" && python3 benchmarks/gpu/record.py stamp "$OUT/$name.json"
}

finish() {   # the script's exit status: 1 when a step failed (listed), else 0
  if [ ${#FAILED[@]} -gt 0 ]; then echo "${#FAILED[@]} step(s) failed:"; printf '  %s\n' "${FAILED[@]}"; return 1; fi
  echo "every step passed; results in $OUT"
}

check_parts() {   # "KNOWN..." WANTED...: exits 2 naming the first WANTED word that is not a known part
  local known=$1 w; shift
  for w in "$@"; do [[ " $known " == *" $w "* ]] || { echo "$0: unknown part '$w' (known: $known)" >&2; exit 2; }; done
}
want() { [[ " $PARTS " == *" $1 "* ]]; }   # PART: whether PARTS (the parts asked for) holds it
