"""Where a Huginn-0125 checkpoint's time goes on this machine: the FP32 masters of the actor (one tensor per trained
parameter, the shapes of the real layout; 13.3 GiB, what a GRPO checkpoint with plain SGD holds beside 0.05 GiB of
buffers) snapshotted from the GPU and written to disk, each way timed once:
  snapshot: into page-locked buffers allocated now (the run's first checkpoint), the same buffers again (every later
            one), and into pageable memory allocated now;
  write:    torch.save of the snapshot (what a checkpoint does) to the run's disk and to /dev/shm (serialisation alone),
            then fsync (atomic_dir syncs every file before the rename); and the same bytes as raw files written by 1 and
            by 4 threads, each fsynced.
  python3 benchmarks/gpu/checkpoint_io.py OUT.json [DIR]   (DIR: where the files go, default /tmp/ckio; removed after)"""
import json, os, shutil, sys, threading, time
from pathlib import Path
import torch
from looprl.bench import environment
from looprl.model.config import real_config
from looprl.model.models import build_model
from looprl.run.checkpoint_writer import HostStaging, to_host

GiB = 1 << 30

def timed(f):
    t0 = time.perf_counter(); out = f(); torch.cuda.synchronize(); return out, time.perf_counter() - t0

def fsync_all(d: Path) -> float:
    t0 = time.perf_counter()
    for f in d.iterdir():
        with open(f, "rb") as fh: os.fsync(fh.fileno())
    return time.perf_counter() - t0

def raw_write(tensors, d: Path, threads: int) -> float:
    "Each thread writes its share of the tensors' bytes into a file of its own; seconds until all are written."
    shares = [tensors[i::threads] for i in range(threads)]
    def write(i):
        with open(d / f"part-{i}.bin", "wb") as f:
            for t in shares[i]: f.write(t.numpy().view("uint8").data)
    t0 = time.perf_counter()
    ts = [threading.Thread(target=write, args=(i,)) for i in range(threads)]
    for t in ts: t.start()
    for t in ts: t.join()
    return time.perf_counter() - t0

def main(out: str, where: str = "/tmp/ckio"):
    model = build_model(real_config("huginn-0125"), device="meta")
    shapes = [p.shape for p in model.parameters()]
    masters = [torch.empty(s, dtype=torch.float32, device="cuda").normal_() for s in shapes]
    nbytes = sum(t.numel() * 4 for t in masters)
    r = dict(tensors=len(masters), gib=nbytes / GiB)
    staging = HostStaging()
    _, r["snapshot_pinned_first_s"] = timed(lambda: to_host(masters, staging, ("m",)))
    snap, r["snapshot_pinned_again_s"] = timed(lambda: to_host(masters, staging, ("m",)))
    _, r["snapshot_pageable_s"] = timed(lambda: to_host(masters))
    for name, d in (("disk", Path(where)), ("shm", Path("/dev/shm/ckio"))):
        shutil.rmtree(d, ignore_errors=True); d.mkdir(parents=True)
        t0 = time.perf_counter(); torch.save({"master": snap}, d / "trainer.pt")
        r[f"torch_save_{name}_s"] = time.perf_counter() - t0
        r[f"fsync_{name}_s"] = fsync_all(d); shutil.rmtree(d)
    d = Path(where)
    for threads in (1, 4):
        d.mkdir(parents=True)
        r[f"raw_{threads}_threads_s"] = raw_write(snap, d, threads)
        r[f"raw_{threads}_threads_fsync_s"] = fsync_all(d); shutil.rmtree(d)
    for k in ("torch_save_disk", "torch_save_shm", "raw_1_threads", "raw_4_threads"):   # the write until it is durable
        r[k + "_with_fsync_s"] = r[k + "_s"] + r[(k.replace("torch_save", "fsync") if "save" in k else k + "_fsync") + "_s"]
    for k in [k for k in r if k.endswith("_s") and not k.startswith("fsync") and not k.endswith("fsync_s")]:
        r[k.removesuffix("_s") + "_gib_per_s"] = r["gib"] / r[k]
    r["disk"] = where
    doc = dict(command=" ".join(["python3", *sys.argv]), environment=environment(), result=r)
    Path(out).write_text(json.dumps(doc, indent=1)); print(json.dumps(r, indent=1))

if __name__ == "__main__": main(*sys.argv[1:])
