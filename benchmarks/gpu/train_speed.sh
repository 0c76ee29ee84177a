# Speed of the actor's training step at Huginn-0125 shapes (FP16, loss scale 128, B = 4 sequences of 176 tokens,
# activation recompute, 3 steps): step time, tokens per second, model-FLOPs utilisation, peak memory.
#   bash benchmarks/gpu/train_speed.sh [single] [sharded]
#     single:  looprl.training.trainer.Trainer                                            → $OUT/train-huginn-0125.json
#     sharded: the FSDP2 trainer of --trainer-processes as one trainer process (NCCL) and the single-process trainer,
#              in one run, with the ratio of their tokens/s                      → $OUT/train-huginn-0125-sharded-vs-single.json
# The output streams, and is appended as it goes to $OUT/train-speed-log.txt.
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
source benchmarks/gpu/setup.sh
script_command "$@"
check_parts "single sharded" "$@"
PARTS=${*:-single sharded}
main() {
  want single && bench train-huginn-0125 150 train --preset huginn-0125
  want sharded && bench train-huginn-0125-sharded-vs-single 400 train --preset huginn-0125 --trainer both
  finish
}
logged train-speed main
