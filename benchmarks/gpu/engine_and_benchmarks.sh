# engine graph/eager equality, rollout, publication and training benchmarks.
source benchmarks/gpu/setup.sh
[ -f .raysplit/ray.part.aa ] && cp .raysplit/ray.part.aa /tmp/
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 - <<'PY' > $OUT/env.txt 2>&1
import importlib.util, torch
print(torch.__version__, torch.cuda.device_count())
for m in "click jsonschema msgpack google.protobuf yaml requests aiohttp aiohappyeyeballs aiosignal frozenlist multidict propcache yarl attrs filelock packaging tqdm sympy fastcore math_verify".split():
    print(m, bool(importlib.util.find_spec(m)))
PY
cat $OUT/env.txt
timeout 240 python3 -m pytest -q -x tests/test_engine_gpu.py 2>&1 | tail -25 | tee $OUT/engine_gpu_tests.txt
timeout 150 python3 -m looprl.bench rollout --preset huginn-0125 --cuda-graphs --out $OUT/rollout-huginn-0125.json 2>&1 | tail -4
timeout 90 python3 -m looprl.bench publication --preset huginn-0125 --src cuda:0 --dst cuda:$(( $(nvidia-smi -L | wc -l) - 1 )) --out $OUT/publication-huginn-0125.json 2>&1 | tail -12
timeout 90 python3 -m looprl.bench train --preset huginn-0125 --out $OUT/train-huginn-0125.json 2>&1 | tail -14
