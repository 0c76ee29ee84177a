# The batch-invariant kernels (looprl.model.invariant) on one GPU: their tests (rows and queries the same bits for any
# number of rows or queries, with the twins that break it; a tiny Huginn's sequence forward equal to its decode), then
# each kernel's time against today's path at Huginn-0125 shapes, FP16.
#   bash benchmarks/gpu/invariant.sh       → $OUT/invariant-tests.json (pytest's steps), $OUT/invariant-huginn-0125.json
# The output streams, and is appended as it goes to $OUT/invariant-log.txt.
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
source benchmarks/gpu/setup.sh
script_command "$@"
[ $# -eq 0 ] || { echo "$0: takes no arguments" >&2; exit 2; }
main() {
  step 300 python3 benchmarks/gpu/record.py check "$OUT/invariant-tests.json" 280 \
    python3 -m pytest -q -p no:cacheprovider tests/test_invariant_kernels.py
  step 420 python3 benchmarks/gpu/invariant_bench.py "$OUT"
  finish
}
logged invariant main
