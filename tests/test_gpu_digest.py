"""Content digests in 64 KiB blocks: the CPU path against a plain hashlib reimplementation of the tree,
the SHA-256 Triton kernel (looprl.core.gpu_digest) in Triton's CPU interpreter against hashlib (a subprocess:
TRITON_INTERPRET=1 must be set before Triton is imported; skipped without Triton), the engine's routing
of CUDA tensors to the GPU hash, and, on a CUDA device, GPU leaves equal to CPU leaves."""
import hashlib, json, os, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import pytest
import torch
from looprl.core import gpu_digest
from looprl.bench import digest as bench
from looprl.core.digest import DIGEST_BLOCK, DIGEST_RUN, tensor_leaf, digest_from_leaves, submit_blocks, gather_blocks, leaf_from_blocks
from looprl.model.hf import state_digest, tensor_leaves, read_tensors
from looprl.make_tiny import make_tiny_checkpoint

ROOT = Path(__file__).resolve().parents[1]
CUDA = torch.cuda.is_available()
SIZES = [0, 4, 52, 56, 60, 64, 120, 65532, 65536, 65540, 3 * 65536 + 12]


def tree_leaf(name, t, block=65536):
    "The leaf, written out with hashlib only."
    raw = t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
    blocks = b"".join(hashlib.sha256(raw[i:i + block]).digest() for i in range(0, max(len(raw), 1), block))
    return hashlib.sha256(f"{name}\0{str(t.dtype)[6:]}\0{json.dumps(list(t.shape))}\0".encode() + blocks).digest()


def tree_digest(tensors):
    return "sha256:" + hashlib.sha256(b"".join(n.encode() + b"\0" + tree_leaf(n, t) for n, t in sorted(tensors.items()))).hexdigest()


def random_tensors(device="cpu"):
    g = torch.Generator().manual_seed(0)
    ts = {"run.big": torch.randn((DIGEST_BLOCK * DIGEST_RUN + 3 * DIGEST_BLOCK + 20) // 4, generator=g),  # more than one pool run, ragged
          "h.fp16": torch.randn(1000, 333, generator=g).half(),                  # 666,000 bytes: not a multiple of 64 KiB
          "exact": torch.randn(2, DIGEST_BLOCK // 4, generator=g),               # exactly two blocks
          "empty": torch.empty(0, 7), "scalar": torch.tensor(3.5), "odd": torch.randn(3, generator=g).half()}
    return {n: t.to(device) for n, t in ts.items()}


def test_cpu_tree_is_order_and_chunking_independent():
    assert (DIGEST_BLOCK, DIGEST_RUN) == (1 << 16, 1 << 8)
    ts = random_tensors()
    want = tree_digest(ts)
    assert state_digest(ts) == want
    assert state_digest(list(reversed(list(ts.items())))) == want
    items = list(ts.items())
    leaves = {}
    for i in range(0, len(items), 2): leaves.update(tensor_leaves(dict(items[i:i + 2]), threads=3))   # chunk by chunk
    assert digest_from_leaves(leaves) == want
    with ThreadPoolExecutor(4) as pool:
        for n, t in ts.items():
            assert tensor_leaf(n, t) == tensor_leaf(n, t, pool) == tree_leaf(n, t)
            assert leaf_from_blocks(n, t.dtype, t.shape, gather_blocks(submit_blocks(t, pool))) == tree_leaf(n, t)
        assert len(gather_blocks(submit_blocks(ts["run.big"], pool))) == DIGEST_RUN + 4
        assert len(gather_blocks(submit_blocks(ts["empty"], pool))) == 1
    # a non-contiguous view hashes its logical bytes
    w = torch.randn(64, 48, generator=torch.Generator().manual_seed(1))
    assert state_digest({"w": w.t()}) == tree_digest({"w": w.t().contiguous()})


def test_block_table_without_triton():
    x = {"a": torch.zeros(3 * 65536 + 12, dtype=torch.uint8), "b": torch.zeros(0), "c": torch.zeros(64, dtype=torch.float16)[1:3]}
    addrs, lens, counts, keep = gpu_digest.block_table(x)
    assert counts == [4, 1, 1] and lens.tolist() == [65536] * 3 + [12, 0, 4]
    assert addrs[-1] % 4 == 0                  # a view at an odd 2-byte offset is copied to an aligned buffer
    with pytest.raises(ValueError, match="not a multiple of 4"): gpu_digest.block_table({"odd": torch.zeros(3, dtype=torch.float16)})
    assert not gpu_digest.usable(torch.zeros(4))            # CPU tensors stay on the CPU pool


INTERP = r'''
import dataclasses, hashlib, json, sys, time, torch
import triton.runtime.interpreter as ti
try:    # the interpreter checks each 32-bit add for overflow (a no-op without debug); wrapping adds are SHA-256's arithmetic
    ti.interpreter_builder.options = dataclasses.replace(ti.interpreter_builder.options, sanitize_overflow=False)
except AttributeError: pass
from looprl.core.gpu_digest import block_digests
for block, sizes in json.loads(sys.argv[1]):
    g = torch.Generator().manual_seed(block)
    ts = {str(n): torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g) for n in sizes}
    ts["int32"] = torch.randint(-2**31, 2**31 - 1, (300,), dtype=torch.int32, generator=g)
    t0 = time.time(); got = block_digests(ts, block=block); dt = time.time() - t0
    for n, t in ts.items():
        raw = t.numpy().tobytes()
        want = [hashlib.sha256(raw[i:i + block]).digest() for i in range(0, max(len(raw), 1), block)]
        assert got[n] == want, (block, n)
    print(f"block {block}: {sum(map(len, got.values()))} blocks of {len(ts)} buffers equal hashlib ({dt:.0f} s)")
'''


def run_interpreter(jobs, timeout):
    if gpu_digest.triton is None: pytest.skip("needs Triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    r = subprocess.run([sys.executable, "-c", INTERP, json.dumps(jobs)], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    print(r.stdout)


def test_kernel_in_interpreter():
    "Every length of the list: the padding cases in 64 KiB blocks, the long ones split into 4 KiB blocks (65 chunks each)."
    run_interpreter([[DIGEST_BLOCK, SIZES[:7]], [4096, SIZES]], timeout=600)


@pytest.mark.skipif(os.environ.get("LOOPRL_SLOW_TESTS") != "1", reason="about 5 minutes in the interpreter: set LOOPRL_SLOW_TESTS=1")
def test_kernel_in_interpreter_64k():
    "The same lengths in the real 64 KiB blocks: 1025 sequential chunks per full block."
    run_interpreter([[DIGEST_BLOCK, SIZES]], timeout=1800)


def test_engine_routes_cuda_tensors_to_the_gpu_hash(tmp_path, monkeypatch):
    """Publication.receive on 'CUDA' tensors: the staged copy is queued when the dtypes agree, the tensor as sent
    otherwise, tied aliases share one entry, and the digest equals the CPU digest of what was sent. Tensors are
    made to report is_cuda and the GPU hash is replaced by hashlib, so this runs anywhere."""
    from looprl.rollout.engine import Engine
    ckpt = make_tiny_checkpoint("huginn_raven", tmp_path / "h", seed=2)
    sent32 = read_tensors(ckpt)
    sent16 = {n: (t.half() if n != "freqs_cis" else t) for n, t in sent32.items()}
    want32, want16 = state_digest(sent32), state_digest(sent16)
    hashed = []
    def fake_block_digests(tensors, block=DIGEST_BLOCK, lanes=128):
        hashed.extend((n, t.dtype) for n, t in tensors.items())
        out = {}
        for n, t in tensors.items():
            b = t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
            out[n] = [hashlib.sha256(b[i:i + block]).digest() for i in range(0, max(len(b), 1), block)]
        return out
    eng = Engine.from_checkpoint(ckpt, version=1, max_batch=1, max_len=8)
    monkeypatch.setattr(gpu_digest, "usable", lambda t: True)
    monkeypatch.setattr(gpu_digest, "block_digests", fake_block_digests)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    assert eng.publish(2, sent32) == want32
    names = [n for n, _ in hashed]
    assert len(names) == len(set(names)) == len(sent32) - 1 and {dt for _, dt in hashed} == {torch.float32}
    assert ("lm_head.weight" in names) != ("transformer.wte.weight" in names)       # one entry for the tied pair
    hashed.clear()
    assert eng.publish(3, sent16, digest=want16) == want16                  # FP16 sent to an FP32 engine: hashed as sent
    assert {dt for n, dt in hashed if n != "freqs_cis"} == {torch.float16}
    with pytest.raises(Exception, match="digest mismatch"): eng.publish(4, sent16, digest=want32)
    assert eng.committed_version == 3


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_gpu_leaves_equal_cpu_leaves():
    if gpu_digest.triton is None: pytest.skip("needs Triton")
    cpu = random_tensors()
    gpu = {n: t.cuda() for n, t in cpu.items()}
    gpu["strided"] = torch.randn(256, 96, device="cuda").t()                 # not contiguous
    gpu["offset"] = torch.randn(1001, device="cuda").half()[1:]              # 2 bytes past an aligned start
    cpu.update(strided=gpu["strided"].cpu(), offset=gpu["offset"].cpu())
    assert [n for n in gpu if not gpu_digest.usable(gpu[n])] == ["odd"]    # 6 bytes: the CPU path
    want = tensor_leaves(cpu)
    assert gpu_digest.leaves_on_device({n: t for n, t in gpu.items() if n != "odd"}) == {n: w for n, w in want.items() if n != "odd"}
    assert tensor_leaves(gpu) == want and state_digest(gpu) == state_digest(cpu) == tree_digest(cpu)
    r = bench.bench_digest(nbytes=(64 << 20) + 12, device="cuda", tensor_bytes=16 << 20, repeats=2, threads=4)
    assert r["equal"], r


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_engine_on_cuda_hashes_on_the_gpu(tmp_path):
    if gpu_digest.triton is None: pytest.skip("needs Triton")
    from looprl.rollout.engine import Engine
    ckpt = make_tiny_checkpoint("huginn_raven", tmp_path / "h", seed=3)
    sent = read_tensors(ckpt)
    eng = Engine.from_checkpoint(ckpt, version=1, device="cuda", dtype=torch.float16, max_batch=1, max_len=8)
    for v, dt in ((2, torch.float16), (3, torch.float32)):
        s = {n: (t.to(dt) if n != "freqs_cis" else t).cuda() for n, t in sent.items()}
        assert eng.publish(v, s) == state_digest({n: t.cpu() for n, t in s.items()})
