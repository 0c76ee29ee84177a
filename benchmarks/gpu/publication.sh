# Publication of the policy at Huginn-0125 shapes (7.8 GB of FP16 weights, random) from trainer to engine, digests and
# checks included, and the SHA-256 digest it rests on.
#   bash benchmarks/gpu/publication.sh [PART...]   (default: every part the machine's GPU count allows)
#   digest    digest of 7.8 GB on the GPU and on the CPU threads, and whether they agree           → $OUT/digest.json
#   one-gpu   one process, cuda:0 → cuda:0                                                         → $OUT/publication-huginn-0125.json
#   two-gpus  one process, cuda:0 → cuda:1, 2 repeats; then the disk path (write shards; read, check, commit)
#                                                                                                  → $OUT/publication-huginn-0125-2gpu.json
#   nccl      trainer process on GPU 0 → engine process on GPU 1 over NCCL, 3 repeats             → $OUT/publication-huginn-0125-nccl.json
#   in-run    one complete GRPO run (3 updates, CUDA graphs) with trainer and engine in one process on one GPU: the
#             publication time of every update (make_checkpoints.py full)                         → $OUT/grpo-h0125-1gpu-local.json
# two-gpus and nccl need two GPUs. The output streams, and is appended as it goes to $OUT/publication-log.txt.
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
source benchmarks/gpu/setup.sh
script_command "$@"
KNOWN="digest one-gpu two-gpus nccl in-run"
check_parts "$KNOWN" "$@"
if [ $# -gt 0 ]; then PARTS="$*"; elif [ "$NGPUS" -ge 2 ]; then PARTS=$KNOWN; else PARTS="digest one-gpu in-run"; fi
if [ "$NGPUS" -lt 2 ] && { want two-gpus || want nccl; }; then echo "$0: two-gpus and nccl need two GPUs; this machine has $NGPUS" >&2; exit 2; fi
main() {
  want digest && bench digest 100 digest
  want one-gpu && bench publication-huginn-0125 120 publication --preset huginn-0125 --src cuda:0 --dst cuda:0
  if want two-gpus; then
    bench publication-huginn-0125-2gpu 150 publication --src cuda:0 --dst cuda:1 --repeats 2 --disk-dir /tmp/pubdisk; rm -rf /tmp/pubdisk
  fi
  want nccl && bench publication-huginn-0125-nccl 150 publication --transport nccl --repeats 3
  if want in-run; then
    [ -f /tmp/h0125/config.json ] || step 150 python3 benchmarks/gpu/make_checkpoints.py full
    local run="python3 -m looprl.train --model /tmp/h0125 --algorithm grpo --device cuda --updates 3 --ray-address local --cuda-graphs
      --checkpoint-every 3 --keep-checkpoints 1 --output /tmp/g1 --no-progress"
    rm -rf /tmp/g1; printf '%s\n' "python3 benchmarks/gpu/make_checkpoints.py full" "$(echo $run)" > /tmp/g1-commands.txt
    step 220 $run && python3 benchmarks/gpu/record.py run "$OUT/grpo-h0125-1gpu-local.json" /tmp/g1 /tmp/g1-commands.txt
    rm -rf /tmp/g1 /tmp/g1-commands.txt
  fi
  finish
}
logged publication main
