# The GPU tests: the pytest files that need CUDA (fused decode kernels against the plain path, the engine's CUDA graphs
# against eager decoding for every family and at Huginn-0125 shapes, continuous batching through block tables against
# static batches, the GPU digest against the CPU one), then every
# notebook that holds '#| gpu' cells under nbdev-test --flags gpu, one process each.
#   bash benchmarks/gpu/gpu_tests.sh [pytest] [notebooks]    (default both)   → $OUT/gpu-tests.json
# gpu-tests.json holds each command with its exit status, seconds and last lines; the whole output streams, and is
# appended as it goes to $OUT/gpu-tests-log.txt.
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
source benchmarks/gpu/setup.sh
script_command "$@"
KNOWN="pytest notebooks"
check_parts "$KNOWN" "$@"; PARTS=${*:-$KNOWN}
main() {
  local doc=$OUT/gpu-tests.json nb; rm -f "$doc"
  if want pytest; then
    step 600 python3 benchmarks/gpu/record.py check "$doc" 540 python3 -m pytest -q tests/test_kernels.py tests/test_engine_gpu.py tests/test_continuous_batching.py tests/test_gpu_digest.py
  fi
  if want notebooks; then
    for nb in $(grep -l '#| gpu' nbs/*.ipynb); do
      step 600 python3 benchmarks/gpu/record.py check "$doc" 540 nbdev-test --flags gpu "$nb"
    done
  fi
  finish
}
logged gpu-tests main
