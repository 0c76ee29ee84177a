# Two H200s: fused decode kernels — tests, cuBLAS bandwidth per product, profile plain vs fused,
# rollout bench fused and plain; FP32 parity on CUDA (mid-size Huginn); a Triton GEMV probe.
source benchmarks/gpu/setup.sh
cp .raysplit/ray.part.aa /tmp/ 2>/dev/null
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 300 python3 -m pytest -q -x tests/test_kernels.py tests/test_engine_gpu.py 2>&1 | tail -15 | tee $OUT/gpu_tests.txt
timeout 120 python3 -m looprl.bench matmuls --out $OUT/matmuls-huginn-0125.json > /dev/null 2>$OUT/err_mm.txt; tail -2 $OUT/err_mm.txt
timeout 200 python3 -m looprl.bench decode-profile --batch-sizes 1,64 --out $OUT/decode-profile-huginn-0125.json 2>&1 | grep -E '"(B|fused|graph_ms|eager_ms|kernel_ms|gaps_ms|kernels)"' 
timeout 200 python3 -m looprl.bench rollout --preset huginn-0125 --cuda-graphs --out $OUT/rollout-huginn-0125.json 2>&1 | grep -E '"(B|graph_ms|eager_ms|graph_over_bound|peak_memory_gib)"'
timeout 150 python3 -m looprl.bench rollout --preset huginn-0125 --cuda-graphs --plain --out $OUT/rollout-huginn-0125-plain.json 2>&1 | grep -E '"(B|graph_ms|graph_over_bound)"'
timeout 90 python3 benchmarks/gpu/make_checkpoints.py mid
timeout 60 python3 -m looprl.verify /tmp/hmid --device cuda --dtype fp32 --samples 8 --max-new-tokens 32 > $OUT/verify-mid-fp32-cuda.json; tail -c 400 $OUT/verify-mid-fp32-cuda.json
timeout 150 python3 benchmarks/gpu/gemv_probe.py $OUT/gemv-probe.json 2>&1 | tail -30
