"""The exact mode's short GRPO runs side by side (benchmarks/gpu/invariant.sh run): per update of each run its parity_max
and seconds (rollout, train, the whole update), and the ratio of the median update times (exact / ordinary).
usage: python3 benchmarks/gpu/exact_runs.py FILE EXACT_RUN ORDINARY_RUN COMMANDS   (COMMANDS: the runs' command lines)"""
import json, statistics, sys
from pathlib import Path

if len(sys.argv) != 5: sys.exit(__doc__)
path, exact, ordinary, commands = sys.argv[1:]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import stamped
from looprl.core.state import read_metrics

def run(d):
    "Each update's parity and seconds in run directory `d` (none when it has no metrics)."
    if not (Path(d) / "metrics.jsonl").exists(): return dict(run=str(d), updates=[])
    ups = [l for l in read_metrics(d) if l["kind"] == "update"]
    rows = [dict(update=u["update"], parity_max=u["parity_max"], parity_mean=u["parity_mean"], digest=u["digest"],
                 reward_mean=u["reward_mean"], rollout_s=u["time"]["rollout_s"], train_s=u["time"]["train_s"],
                 update_s=sum(u["time"].values())) for u in ups]
    after_first = [r["update_s"] for r in rows[1:]] or [r["update_s"] for r in rows]    # the first compiles, captures
    return dict(run=str(d), updates=rows, parity_max=max((r["parity_max"] for r in rows), default=None),
                all_parity_zero=bool(rows) and all(r["parity_max"] == 0 for r in rows),
                digests_change=all(a["digest"] != b["digest"] for a, b in zip(rows, rows[1:])),
                median_update_s=statistics.median(after_first) if after_first else None)

e, o = run(exact), run(ordinary)
ratio = e["median_update_s"] / o["median_update_s"] if e["median_update_s"] and o["median_update_s"] else None
doc = stamped(dict(commands=Path(commands).read_text().splitlines(), exact=e, ordinary=o,
                   exact_over_ordinary_update_s=ratio))
Path(path).write_text(json.dumps(doc, indent=1))
print(f"wrote {path}: exact parity_max {e['parity_max']} (all zero: {e.get('all_parity_zero')}), ordinary "
      f"{o['parity_max']}; median update {e['median_update_s']} s vs {o['median_update_s']} s (ratio {ratio})")
