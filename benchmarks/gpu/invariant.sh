# The batch-invariant kernels (looprl.model.invariant) on one GPU: their tests (rows and queries the same bits for any
# number of rows or queries, with the twins that break it; tiny Huginn, Nanbeige and Ouro: a whole sequence's logits
# equal to prefill+decode, a row alone equal to it in a batch), then each kernel's time against today's path at
# Huginn-0125 shapes, FP16.
#   bash benchmarks/gpu/invariant.sh [tests] [bench]   (default: both)
#     tests → $OUT/invariant-tests.json (pytest's outcome)     bench → $OUT/invariant-huginn-0125.json
# The output streams, and is appended as it goes to $OUT/invariant-log.txt.
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
source benchmarks/gpu/setup.sh
script_command "$@"
KNOWN="tests bench"
check_parts "$KNOWN" "$@"; PARTS=${*:-$KNOWN}
main() {
  want tests && step 260 python3 benchmarks/gpu/record.py check "$OUT/invariant-tests.json" 250 \
    python3 -m pytest -q -p no:cacheprovider tests/test_invariant_kernels.py
  want bench && step 320 python3 benchmarks/gpu/invariant_bench.py "$OUT"
  finish
}
logged invariant main
