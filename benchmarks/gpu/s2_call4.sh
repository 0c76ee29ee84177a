# Session 2, call 4 (2 H200s): the remaining resume-equality runs at Huginn-0125 shapes, then eager vs CUDA-graph
# complete 3-update phases (AB/BA/AB, fresh processes) on the mid-size Huginn.
source benchmarks/gpu/setup.sh
[ -d /tmp/h0125 ] || timeout 120 python3 benchmarks/gpu/make_checkpoints.py full
SECONDS=0
bash benchmarks/gpu/resume_runs.sh ${ALGS:-flow-dppo}
echo "runs done after $SECONDS s"
timeout 60 python3 benchmarks/gpu/make_checkpoints.py mid
timeout 400 python3 -m looprl.bench phases --model /tmp/hmid --algorithm grpo --train-args "--precision fp16 --transport nccl" --out $OUT/phases-grpo-hmid.json 2>&1 | grep -E '"(phase_s|warm_rollout_s|phase_eager_over_graph|warm_rollout_eager_over_graph|graph_fallbacks)"'
