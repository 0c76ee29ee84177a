# The flash-decoding attention tile at Huginn-0125 shapes (55 heads × 96, 256 keys, FP16): keys per program (16..256)
# × warps (1..8), B = 1, 8, 32, 64, TB/s of keys and values read; then the whole decode step with the best tile at B = 64.
#   bash benchmarks/gpu/attention_tile_sweep.sh      → $OUT/attention-sweep.json, $OUT/rollout-huginn-0125-tile.json
# The engine's tile is looprl.model.kernels.DECODE_ATTENTION_TILE; gpu_tests.sh checks the kernels with it. The output streams,
# and is appended as it goes to $OUT/attention-tile-sweep-log.txt.
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
source benchmarks/gpu/setup.sh
script_command "$@"
[ $# -eq 0 ] || { echo "$0: takes no arguments" >&2; exit 2; }
main() {
  step 300 python3 benchmarks/gpu/attention_tile_sweep.py "$OUT"
  finish
}
logged attention-tile-sweep main
