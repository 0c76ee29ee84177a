# Speed of the engine's decode step at Huginn-0125 shapes (3.5B parameters, FP16, 256-token context, random weights).
#   bash benchmarks/gpu/decode_speed.sh [PART...]     (default: every part)
#   rollout        one decode step eager and as a CUDA graph against the memory-bandwidth bound, B = 1, 8, 32, 64,
#                  fused kernels (looprl.model.kernels)                                   → $OUT/rollout-huginn-0125.json
#   rollout-plain  the same with the plain PyTorch decode path (--plain)            → $OUT/rollout-huginn-0125-plain.json
#   profile        every kernel of one eager step, plain and fused, B = 1 and 64    → $OUT/decode-profile-huginn-0125.json
#   matmuls        cuBLAS bandwidth of each weight product of the step, and of a device copy → $OUT/matmuls-huginn-0125.json
#   gemv-probe     a Triton GEMV against cuBLAS on the step's product shapes, B = 1..64 → $OUT/gemv-probe.json
#   bandwidth      how fast the GPU reads (a reduction, one core layer's products at B = 1, eager and as a graph)
#                  against the maker's figure the bound uses (read_bandwidth.py)            → $OUT/read-bandwidth.json
# The output streams, and is appended as it goes to $OUT/decode-speed-log.txt.
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
source benchmarks/gpu/setup.sh
script_command "$@"
KNOWN="rollout rollout-plain profile matmuls gemv-probe bandwidth"
check_parts "$KNOWN" "$@"; PARTS=${*:-$KNOWN}
main() {
  want rollout && bench rollout-huginn-0125 200 rollout --preset huginn-0125 --cuda-graphs
  want rollout-plain && bench rollout-huginn-0125-plain 150 rollout --preset huginn-0125 --cuda-graphs --plain
  want profile && bench decode-profile-huginn-0125 200 decode-profile --batch-sizes 1,64
  want matmuls && bench matmuls-huginn-0125 120 matmuls
  want gemv-probe && step 150 python3 benchmarks/gpu/gemv_probe.py "$OUT/gemv-probe.json"
  want bandwidth && step 150 python3 benchmarks/gpu/record.py json "$OUT/read-bandwidth.json" 140 python3 benchmarks/gpu/read_bandwidth.py
  finish
}
logged decode-speed main
