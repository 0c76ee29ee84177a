# Two H200s: kernel tests (flash-decoding attention, streaming product) and GPU digest tests; decode
# profile and rollout bench (Triton product, and cuBLAS for comparison); GPU vs CPU digest; publication over NCCL between
# two processes, and in one process with the disk path; then the Huginn-0125 checkpoint for resume_full_ppo_dppo.sh.
source benchmarks/gpu/setup.sh
python3 -c "import ray; print('ray', ray.__version__)"
timeout 240 python3 -m pytest -q -x tests/test_kernels.py tests/test_engine_gpu.py tests/test_gpu_digest.py 2>&1 | tail -8 | tee $OUT/gpu_tests.txt
timeout 100 python3 -m looprl.bench digest --out $OUT/digest.json 2>&1 | grep -E '"(gpu_s|cpu_s|gpu_gbps|equal)"'
timeout 150 python3 -m looprl.bench decode-profile --batch-sizes 1,64 --out $OUT/decode-profile-huginn-0125.json 2>&1 | grep -E '"(B|fused|graph_ms|kernel_ms|gaps_ms)"'
timeout 150 python3 -m looprl.bench rollout --preset huginn-0125 --cuda-graphs --out $OUT/rollout-huginn-0125.json 2>&1 | grep -E '"(B|graph_ms|eager_ms|graph_over_bound|peak_memory_gib)"'
LOOPRL_DECODE_GEMV=cublas timeout 100 python3 -m looprl.bench rollout --preset huginn-0125 --cuda-graphs --batch-sizes 1,8 --out $OUT/rollout-huginn-0125-cublas.json 2>&1 | grep -E '"(B|graph_ms|graph_over_bound)"'
timeout 150 python3 -m looprl.bench publication --transport nccl --repeats 3 --out $OUT/publication-huginn-0125-nccl.json 2>&1 | grep -E '"(total_s|stage_s|transfer_s|commit_s)"'
timeout 150 python3 -m looprl.bench publication --src cuda:0 --dst cuda:1 --repeats 2 --disk-dir /tmp/pubdisk --out $OUT/publication-huginn-0125.json 2>&1 | grep -E '"(memory_s|disk_write_s|disk_read_commit_s)"'
rm -rf /tmp/pubdisk
timeout 120 python3 benchmarks/gpu/make_checkpoints.py full
