# Session 2, call 2 (2 H200s): kernels v2 (flash-decoding attention) tests, profile and rollout bench; publication over
# NCCL between two processes (GPU digest) and in one process with the disk path; Huginn-0125 checkpoint; PPO at full
# shapes placed by Ray on two GPUs with NCCL publications: 3 updates vs --stop-after 2 + --resume (graphs), compare.
source benchmarks/gpu/setup.sh
python3 -c "import ray; print('ray', ray.__version__)"
timeout 240 python3 -m pytest -q -x tests/test_kernels.py tests/test_engine_gpu.py $(ls tests/test_gpu_digest.py 2>/dev/null) 2>&1 | tail -15 | tee $OUT/gpu_tests.txt
timeout 150 python3 -m looprl.bench decode-profile --batch-sizes 1,64 --out $OUT/decode-profile-huginn-0125.json 2>&1 | grep -E '"(B|fused|graph_ms|kernel_ms|gaps_ms)"'
timeout 150 python3 -m looprl.bench rollout --preset huginn-0125 --cuda-graphs --out $OUT/rollout-huginn-0125.json 2>&1 | grep -E '"(B|graph_ms|eager_ms|graph_over_bound|peak_memory_gib)"'
timeout 150 python3 -m looprl.bench publication --transport nccl --repeats 3 --out $OUT/publication-huginn-0125-nccl.json 2>&1 | grep -E '"(total_s|stage_s|transfer_s|commit_s)"'
timeout 150 python3 -m looprl.bench publication --src cuda:0 --dst cuda:1 --repeats 2 --disk-dir /tmp/pubdisk --out $OUT/publication-huginn-0125.json 2>&1 | grep -E '"(memory_s|disk_write_s|disk_read_commit_s)"'
timeout 120 python3 benchmarks/gpu/make_checkpoints.py full
bash benchmarks/gpu/resume_runs.sh ppo
