# Two GPUs: Ray places the trainer on one GPU and the engine on the other.
# PPO on the mid-size Huginn (FP16): 3 updates vs --stop-after 2 + --resume in fresh processes; publication between the GPUs.
source benchmarks/gpu/setup.sh
cat /tmp/ray.part.aa .raysplit/ray.part.ab > /tmp/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl 2>&1 | tail -1
nvidia-smi -L
timeout 60 python3 benchmarks/gpu/make_checkpoints.py mid
C="--model /tmp/hmid --algorithm ppo --precision fp16 --device cuda --updates 3 --no-progress"
timeout 110 python3 -m looprl.train $C --output /tmp/r-a 2>&1 | tail -6
timeout 100 python3 -m looprl.train $C --output /tmp/r-b --stop-after 2 > /dev/null 2>&1
timeout 80 python3 -m looprl.train --output /tmp/r-b --resume --no-progress 2>&1 | tail -3
timeout 30 python3 -m looprl.compare /tmp/r-a /tmp/r-b --json > $OUT/compare-ppo-mid-fp16-ray-2gpu.json; echo "compare exit $?"
cp /tmp/r-a/metrics.jsonl $OUT/ppo-mid-fp16-ray-2gpu-metrics.jsonl
timeout 100 python3 -m looprl.bench publication --preset huginn-0125 --src cuda:0 --dst cuda:1 --repeats 2 --out $OUT/publication-huginn-0125-2gpu.json 2>&1 | grep -E "memory_s|bytes"
