# Source on the GPU machine: install the carried wheels (no registry there), unpack the slimmed Ray
# (.raysplit/ray-slim.tar.xz: the 2.60 wheel without jars, rllib, data, tune, train, serve, llm) and put looprl on the path.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
[ -f .raysplit/ray-slim.tar.xz ] && [ ! -d /tmp/site/ray ] && tar xJf .raysplit/ray-slim.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
