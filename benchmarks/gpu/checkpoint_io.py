"""Where a Huginn-0125 checkpoint's time goes on this machine, and what the background writer costs the run: the FP32
masters of the actor (one tensor per trained parameter, the shapes of the real layout; 13.3 GiB, what a GRPO checkpoint
with plain SGD holds beside 0.05 GiB of buffers), each way timed once:
  copies:  the masters copied into pageable host buffers allocated now (the run's first checkpoint), into the same
           buffers again (every later one), from 1 thread and from 8;
  writes:  torch.save of the host copy (`save_state`, what a checkpoint did) and `write_state` (the same file, its
           bytes written by 8 threads), each to the run's disk and then fsynced (atomic_dir syncs every file);
  a whole checkpoint as the writer makes it (`DeferredSnapshot` + `write_state`: copies and writes overlapped, then
           fsync), into fresh buffers and into reused ones; the file read back and compared with the masters bit for bit;
  the run's GPU work beside it: replays of a captured graph of FP16 products (bandwidth-bound, like a decode step),
           timed alone and while a whole checkpoint is made in the background; a graph captured meanwhile; and what a
           publication does (each tensor copied to FP16, a sum read back), alone and beside a checkpoint, its copies
           alone and its writes alone; the removal of a checkpoint's file (the oldest goes after each write);
  write_state with 2, 4 and 16 threads (8 is the default).
  python3 benchmarks/gpu/checkpoint_io.py OUT.json [DIR [bounce]]   (DIR: where the files go, default /tmp/ckio;
  removed after. bounce: only the copies through page-locked pieces, a publication's work beside them, a checkpoint)"""
import json, os, shutil, sys, threading, time
from pathlib import Path
import torch
from looprl.bench import environment
from looprl.core.state import save_state
from looprl.core.state_file import write_state
from looprl.model.config import real_config
from looprl.model.models import build_model
from looprl.rollout.engine import GRAPH_CAPTURES
from looprl.run.checkpoint_writer import DeferredSnapshot, HostStaging, to_host

GiB = 1 << 30

def timed(f):
    torch.cuda.synchronize(); t0 = time.perf_counter(); out = f(); torch.cuda.synchronize()
    return out, time.perf_counter() - t0

def fsynced(path: Path) -> float:
    t0 = time.perf_counter()
    with open(path, "rb") as fh: os.fsync(fh.fileno())
    return time.perf_counter() - t0

def copies(masters, staging, threads: int):
    "The masters copied into `staging`'s buffers by `threads` threads (the writer's fill, without the writes)."
    sources = {}; snap = DeferredSnapshot(to_host(masters, staging, sources, ("m",)), sources, staging.bounce())
    shares = [snap.tree[i::threads] for i in range(threads)]
    ts = [threading.Thread(target=lambda s=s: [snap.fill(b) for b in s]) for s in shares]
    for t in ts: t.start()
    for t in ts: t.join()
    return snap.tree

def checkpoint(masters, staging, path: Path) -> dict:
    "A whole checkpoint as the writer makes it: snapshot, copies overlapped with the writes, fsync."
    t0 = time.perf_counter()
    sources = {}; snap = DeferredSnapshot(to_host(masters, staging, sources, ("m",)), sources, staging.bounce())
    write_state(snap.tree, path, snap.fill); written = time.perf_counter() - t0
    return dict(copied_s=snap.copied_at - t0, written_s=written, fsync_s=fsynced(path), total_s=time.perf_counter() - t0)

def gpu_work(n: int = 4000):
    "A captured graph of 8 FP16 products [64 × 5280] × [5280 × 17920] (bandwidth-bound), replayed `n` times."
    x = torch.randn(64, 5280, device="cuda", dtype=torch.float16)
    w = torch.randn(5280, 17920, device="cuda", dtype=torch.float16) / 80
    def run():
        y = x
        for _ in range(8): y = (y @ w)[:, :5280]
        return y
    side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side): run()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with GRAPH_CAPTURES.capturing(), torch.cuda.graph(g): run()
    def replay():
        for _ in range(n): g.replay()
    return replay

def publication_like(masters):
    "Roughly what a publication does on the GPU: each tensor copied (FP16) and a sum of it read back (a stream sync)."
    dst = [torch.empty_like(m, dtype=torch.float16) for m in masters]
    def run():
        for a, m in zip(dst, masters): a.copy_(m); a.view(-1)[:4096].float().sum().item()
    return run

def bounce_check(masters, d: Path) -> dict:
    """The copies through page-locked pieces: into fresh buffers and again, a publication's work beside them, and a
    whole checkpoint read back and compared with the masters."""
    r, staging, publish = {}, HostStaging(), publication_like(masters)
    _, r["bounce_first_s"] = timed(lambda: copies(masters, staging, 8))
    _, r["bounce_again_s"] = timed(lambda: copies(masters, staging, 8))
    publish(); _, r["publication_like_alone_s"] = timed(publish)
    th = threading.Thread(target=lambda: r.update(bounce_beside_publication_s=timed(lambda: copies(masters, staging, 8))[1]))
    th.start(); time.sleep(0.1); _, r["publication_like_beside_bounce_copies_s"] = timed(publish); th.join()
    r["checkpoint_bounce"] = checkpoint(masters, staging, d / "t.pt")
    back = torch.load(d / "t.pt")
    r["file_equals_masters"] = all(torch.equal(b.cuda(), m) for b, m in zip(back, masters)); (d / "t.pt").unlink()
    return r

def main(out: str, where: str = "/tmp/ckio", only: str = ""):
    model = build_model(real_config("huginn-0125"), device="meta")
    masters = [torch.empty(p.shape, dtype=torch.float32, device="cuda").normal_() for p in model.parameters()]
    d = Path(where); shutil.rmtree(d, ignore_errors=True); d.mkdir(parents=True)
    r = dict(tensors=len(masters), gib=sum(t.numel() * 4 for t in masters) / GiB, disk=where)
    if only == "bounce": r.update(bounce_check(masters, d)); return record(out, r)
    staging = HostStaging()
    host, r["copy_pageable_first_s"] = timed(lambda: copies(masters, staging, 1))
    _, r["copy_pageable_again_s"] = timed(lambda: copies(masters, staging, 1))
    _, r["copy_pageable_again_8_threads_s"] = timed(lambda: copies(masters, staging, 8))
    for name, write in (("torch_save", lambda p: save_state(host, p)), ("write_state", lambda p: write_state(host, p))):
        t0 = time.perf_counter(); write(d / "t.pt"); r[f"{name}_s"] = time.perf_counter() - t0
        r[f"{name}_fsync_s"] = fsynced(d / "t.pt"); r[f"{name}_with_fsync_s"] = r[f"{name}_s"] + r[f"{name}_fsync_s"]
        (d / "t.pt").unlink()
    for n in (2, 4, 16):
        t0 = time.perf_counter(); write_state(host, d / "t.pt", threads=n); fs = fsynced(d / "t.pt")
        r[f"write_state_{n}_threads_with_fsync_s"] = time.perf_counter() - t0; (d / "t.pt").unlink()
    r["checkpoint_fresh_buffers"] = checkpoint(masters, HostStaging(), d / "t.pt"); (d / "t.pt").unlink()
    r["checkpoint_reused_buffers"] = checkpoint(masters, staging, d / "t.pt")
    back = torch.load(d / "t.pt")
    r["file_equals_masters"] = all(torch.equal(b.cuda(), m) for b, m in zip(back, masters)); del back
    (d / "t.pt").unlink()
    replay = gpu_work()
    replay(); _, r["gpu_work_alone_s"] = timed(replay)
    th = threading.Thread(target=lambda: r.update(checkpoint_beside_gpu_work=checkpoint(masters, staging, d / "t.pt")))
    th.start(); time.sleep(0.5)
    _, r["gpu_work_beside_checkpoint_s"] = timed(replay)
    _, r["capture_beside_checkpoint_s"] = timed(gpu_work)          # a capture while the copies run
    th.join(); (d / "t.pt").unlink()
    publish = publication_like(masters)
    publish(); _, r["publication_like_alone_s"] = timed(publish)
    th = threading.Thread(target=lambda: r.update(checkpoint_beside_publication=checkpoint(masters, staging, d / "t.pt")))
    th.start(); time.sleep(0.3)
    _, r["publication_like_beside_checkpoint_s"] = timed(publish)
    th.join()
    t0 = time.perf_counter(); (d / "t.pt").unlink(); r["unlink_s"] = time.perf_counter() - t0
    (d / "small").write_text("x"); r["small_fsync_after_unlink_s"] = fsynced(d / "small")
    th = threading.Thread(target=lambda: r.update(copies_beside_publication_s=timed(lambda: copies(masters, staging, 8))[1]))
    th.start(); time.sleep(0.1); _, r["publication_like_beside_copies_s"] = timed(publish); th.join()
    th = threading.Thread(target=lambda: write_state(host, d / "t.pt"))
    th.start(); time.sleep(0.5); _, r["publication_like_beside_writes_s"] = timed(publish); th.join(); (d / "t.pt").unlink()
    r["gpu_work_slowdown"] = r["gpu_work_beside_checkpoint_s"] / r["gpu_work_alone_s"]
    shutil.rmtree(d, ignore_errors=True)
    record(out, r)

def record(out: str, r: dict):
    doc = dict(command=" ".join(["python3", *sys.argv]), environment=environment(), result=r)
    Path(out).write_text(json.dumps(doc, indent=1)); print(json.dumps(r, indent=1))

if __name__ == "__main__": main(*sys.argv[1:])
