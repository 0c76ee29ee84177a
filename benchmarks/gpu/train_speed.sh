# Speed of the actor's training step at Huginn-0125 shapes (FP16, loss scale 128, B = 4 sequences of 176 tokens,
# activation recompute, 3 steps): step time, tokens per second, model-FLOPs utilisation, peak memory.
#   bash benchmarks/gpu/train_speed.sh                                → $OUT/train-huginn-0125.json
# The output streams, and is appended as it goes to $OUT/train-speed-log.txt.
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
source benchmarks/gpu/setup.sh
script_command "$@"
[ $# -eq 0 ] || { echo "$0: takes no arguments" >&2; exit 2; }
main() {
  bench train-huginn-0125 150 train --preset huginn-0125
  finish
}
logged train-speed main
