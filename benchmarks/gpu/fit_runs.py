"""The plan against the device: python -m looprl.train on a random Huginn-0125-shaped checkpoint (make_checkpoints.py
full) with no setting beyond the model, the device, the placement, the algorithm, 3 updates and, at Huginn-0125 shapes,
SGD at 1e-5 (AdamW's moments do not fit beside the engine on one 80 GiB card, and the plan never changes the optimizer
itself: without it the run is refused, naming SGD), GRPO and PPO; the same
GRPO run writing its checkpoints in the update's time (--sync-checkpoints: the write before background checkpoints); a
GRPO run at the mid size. Each run's chosen-settings line, its plan, its measured peak GPU memory, its timing and the
share of it waiting on checkpoints go into one JSON.
usage: python3 benchmarks/gpu/fit_runs.py OUT.json [BUDGET_S [RUN,RUN...]]   (runs: see RUNS; default all, in order)
FIT_EXTRA: more flags for every run (e.g. --no-eval: the phase without held-out evaluation)."""
import json, os, shutil, subprocess, sys, time
from pathlib import Path

GiB = 2**30
out_json, budget = Path(sys.argv[1]), float(sys.argv[2]) if sys.argv[2:] else 420
t_end = time.monotonic() + budget
BASE = ["--device", os.environ.get("FIT_DEVICE", "cuda"), "--workers", "local", "--no-progress"]

def free_gib(p): return shutil.disk_usage(p).free / GiB

def train(name, model, algorithm, updates, out_root="/tmp/fit", extra=()):
    out = Path(out_root) / name
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "looprl.train", "--model", model, *BASE, "--algorithm", algorithm, "--updates", str(updates),
           "--output", str(out), *extra, *os.environ.get("FIT_EXTRA", "").split()]
    left = t_end - time.monotonic()
    rec = dict(name=name, command=" ".join(["python"] + cmd[1:]), disk_free_gib_before=free_gib(Path(out_root).parent))
    if left < 45: return {**rec, "skipped": f"{left:.0f} s of the script's budget left"}
    t0 = time.monotonic()
    try: p = subprocess.run(cmd, capture_output=True, text=True, timeout=left - 5); rc, err, so = p.returncode, p.stderr, p.stdout
    except subprocess.TimeoutExpired as e: rc, err, so = 124, (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or ""), ""
    lines = [l for l in err.splitlines() if l.strip()]
    rec.update(exit=rc, wall_s=time.monotonic() - t0, looprl_lines=[l for l in lines if l.startswith("looprl.")], stderr_tail=lines[-4:],
               summary_table=so.splitlines()[-8:])
    s = out / "summary.json"
    if s.exists():
        s = json.loads(s.read_text())
        ups = s["updates"]
        waits = sum(u["time"].get("checkpoint_wait_s", 0) for u in ups) + s.get("last_checkpoint_wait_s", 0)
        plan = s.get("plan", {})
        dev = max(plan.get("memory", {"": {}}), key=lambda d: sum(plan["memory"][d].values())) if plan.get("memory") else None
        planned = sum(plan["memory"][dev].values()) if dev else None
        evals = sum(u["time"].get("eval_s", 0) for u in ups)
        rec.update(total_s=s["total_s"], startup_s=s["startup_s"], checkpoint_wait_s=waits, checkpoint_wait_share=waits / s["total_s"],
                   eval_s=evals, checkpoint_wait_share_of_updates=waits / (s["total_s"] - s["startup_s"] - evals),
                   checkpoints_skipped=s.get("checkpoints_skipped"), checkpoint_writes=s.get("checkpoint_writes"),
                   checkpoint_s=sum(u["time"].get("checkpoint_s", 0) for u in ups), last_checkpoint_wait_s=s.get("last_checkpoint_wait_s"),
                   per_update_time=[u["time"] for u in ups], settings=plan.get("settings"),
                   plan_gib={k: round(v / GiB, 3) for k, v in plan["memory"][dev].items()} if dev else None,
                   plan_total_gib=planned / GiB if dev else None, plan_disk_gib={k: round(v / GiB, 3) for k, v in plan.get("disk", {}).items()},
                   peak_allocated_gib=s.get("peak_allocated_bytes", 0) / GiB, peak_reserved_gib=s.get("peak_reserved_bytes", 0) / GiB,
                   peak_reserved_over_plan=(s.get("peak_reserved_bytes", 0) / planned) if planned else None,
                   checkpoints=sorted(p.name for p in (out / "checkpoints").iterdir()))
    rec["disk_free_gib_after"] = free_gib(Path(out_root).parent)
    shutil.rmtree(out, ignore_errors=True)
    return rec

from looprl.bench import environment
results = dict(environment=environment(), purpose=__doc__.split("usage")[0].strip(), disk=dict(tmp_free_gib=free_gib("/tmp"),
               shm_free_gib=free_gib("/dev/shm") if os.path.exists("/dev/shm") else None), runs=[])
def save(): out_json.write_text(json.dumps(results, indent=1)); print(json.dumps(results["runs"][-1], indent=1), flush=True)

MID = os.environ.get("FIT_MID_MODEL", "/tmp/hmid")    # FIT_DEVICE / FIT_MID_MODEL: a check of this script on the CPU
SGD = ("--optimizer", "sgd", "--lr", "1e-5")
RUNS = {"grpo-h0125": ("/tmp/h0125", "grpo", SGD), "grpo-h0125-sync": ("/tmp/h0125", "grpo", SGD + ("--sync-checkpoints",)),
        "grpo-h0125-noskip": ("/tmp/h0125", "grpo", SGD + ("--no-skip-busy-checkpoints",)),
        "ppo-h0125": ("/tmp/h0125", "ppo", SGD), "grpo-mid": (MID, "grpo", ()), "grpo-mid-sync": (MID, "grpo", ("--sync-checkpoints",)), "ppo-mid": (MID, "ppo", ())}
for name in (sys.argv[3].split(",") if sys.argv[3:] else list(RUNS)):
    model, alg, extra = RUNS[name]
    results["runs"].append(train(name, model, alg, 3, extra=extra)); save()
    r = results["runs"][-1]
    if name.startswith("ppo") and r.get("exit") == 2 and (results["disk"]["shm_free_gib"] or 0) > 70:   # refused for the disk: a larger one
        results["runs"].append(train(name + "-shm", model, alg, 3, out_root="/dev/shm/fit")); save()
