# Engine vs trainer log-prob parity in FP32 on CUDA: looprl.verify generates 8 completions of up to 32 tokens from a
# mid-size Huginn with random weights (n_embd 1024, 8 recurrences; make_checkpoints.py mid) and replays them with a
# freshly loaded model; the largest |Δ log-prob| against its bound.
#   bash benchmarks/gpu/logprob_parity.sh            → $OUT/verify-mid-fp32-cuda.json (looprl.verify's report, with the command)
# The output streams, and is appended as it goes to $OUT/logprob-parity-log.txt.
[ -f benchmarks/gpu/setup.sh ] || { echo "$0: run it from the repository root" >&2; exit 2; }
source benchmarks/gpu/setup.sh
script_command "$@"
[ $# -eq 0 ] || { echo "$0: takes no arguments" >&2; exit 2; }
main() {
  step 120 python3 benchmarks/gpu/make_checkpoints.py mid
  step 150 python3 benchmarks/gpu/record.py json "$OUT/verify-mid-fp32-cuda.json" 120 \
    python3 -m looprl.verify /tmp/hmid --device cuda --precision fp32 --samples 8 --max-response-tokens 32
  finish
}
logged logprob-parity main
