# The engine's default GPU path and the actor's training step at Huginn-0125 shapes (FP16, random weights), beside the
# reference probe (benchmarks/gpu/huginn_decode_probe.py) measured in the same run.
#   bash benchmarks/gpu/fast_path.sh [PART...]     (default: every part)
#   rollout        python -m looprl.bench rollout with its defaults (what `looprl.train --device cuda` decodes with: CUDA
#                  graphs, fused kernels), then the probe; the probe's rows are merged beside the bench rows
#                                                                              → $OUT/rollout-huginn-0125-default.json
#   rollout-plain  the same with the plain PyTorch decode path (--plain)      → $OUT/rollout-huginn-0125-default-plain.json
#   eager-profile  host time of one eager step (cProfile) and of one launch of each kind → $OUT/eager-profile-huginn-0125.json
#   train          python -m looprl.bench train --batch 16 (FP16, loss scale 128, recompute, 176 tokens a sequence)
#                                                                              → $OUT/train-huginn-0125-b16.json
# The output streams, and is appended as it goes to $OUT/fast-path-log.txt.
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
source benchmarks/gpu/setup.sh
script_command "$@"
KNOWN="rollout rollout-plain eager-profile train"
check_parts "$KNOWN" "$@"; PARTS=${*:-$KNOWN}
main() {
  if want rollout; then
    bench rollout-huginn-0125-default 200 rollout --preset huginn-0125
    mkdir -p "$OUT/probe" && step 150 env OUT="$OUT/probe" python3 benchmarks/gpu/huginn_decode_probe.py
    step 30 python3 benchmarks/gpu/record.py beside "$OUT/rollout-huginn-0125-default.json" "$OUT/probe/huginn_decode_roofline.json"
  fi
  want rollout-plain && bench rollout-huginn-0125-default-plain 200 rollout --preset huginn-0125 --plain
  want eager-profile && step 200 python3 benchmarks/gpu/eager_profile.py "$OUT/eager-profile-huginn-0125.json"
  want train && bench train-huginn-0125-b16 300 train --preset huginn-0125 --batch 16
  finish
}
logged fast-path main
