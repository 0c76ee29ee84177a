# Speed of the actor's training step at Huginn-0125 shapes (FP16, loss scale 128, B = 4 sequences of 176 tokens,
# activation recompute, 3 steps): step time, tokens per second, model-FLOPs utilisation, peak memory.
#   bash benchmarks/gpu/train_speed.sh [single] [sharded] [routes] [shared]
#     single:  looprl.training.trainer.Trainer                                            → $OUT/train-huginn-0125.json
#     sharded: the FSDP2 trainer of --trainer-processes as one trainer process (NCCL) and the single-process trainer,
#              in one run, with the ratio of their tokens/s                      → $OUT/train-huginn-0125-sharded-vs-single.json
#     routes:  batch 16: blocks eager (--no-compile-blocks), the defaults (compiled blocks on CUDA), and one block
#              application in 2, 3 and 4 recomputed (--recompute-every K), one process after another
#                                                                                 → $OUT/train-huginn-0125-b16-routes.json
#     shared:  whether the replay taken from the training forward equals its own forward's, bit for bit (mid size, GRPO
#              and DPPO, eager and compiled blocks: shared_replay.py → $OUT/shared-replay-gpu.json); then batch 16 with
#              the defaults (the replay shared), --separate-replay, and (over 100 GiB) --recompute-every 3 with and without it
#                                                                                 → $OUT/train-huginn-0125-b16-shared.json
# The output streams, and is appended as it goes to $OUT/train-speed-log.txt.
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
source benchmarks/gpu/setup.sh
script_command "$@"
check_parts "single sharded routes shared" "$@"
PARTS=${*:-single sharded routes shared}
main() {
  want single && bench train-huginn-0125 150 train --preset huginn-0125
  want sharded && bench train-huginn-0125-sharded-vs-single 400 train --preset huginn-0125 --trainer both
  if want routes; then
    local a rows=()
    for a in --no-compile-blocks "" "--recompute-every 2" "--recompute-every 3" "--recompute-every 4"; do
      local name=train-b16-$(echo "x$a" | tr -cd 'a-z0-9')
      bench "$name" 150 train --preset huginn-0125 --batch 16 $a && rows+=("$OUT/$name.json")
    done
    python3 benchmarks/gpu/record.py rows "$OUT/train-huginn-0125-b16-routes.json" "${rows[@]}" && rm -f "${rows[@]}"
  fi
  if want shared; then
    step 300 python3 benchmarks/gpu/shared_replay.py "$OUT/shared-replay-gpu.json"
    python3 benchmarks/gpu/record.py stamp "$OUT/shared-replay-gpu.json"
    local a rows=() variants=("" --separate-replay)
    # one block application in 3 recomputed peaks at 78 GiB: only on a GPU with more than 100 GiB
    [ "$(python3 -c 'import torch; print(torch.cuda.get_device_properties(0).total_memory >> 30)')" -gt 100 ] &&
      variants+=("--recompute-every 3" "--recompute-every 3 --separate-replay")
    for a in "${variants[@]}"; do
      local name=train-b16-$(echo "x$a" | tr -cd 'a-z0-9')
      bench "$name" 150 train --preset huginn-0125 --batch 16 $a && rows+=("$OUT/$name.json")
    done
    python3 benchmarks/gpu/record.py rows "$OUT/train-huginn-0125-b16-shared.json" "${rows[@]}" && rm -f "${rows[@]}"
  fi
  finish
}
logged train-speed main
