"""The JSON files of the scripts in benchmarks/gpu/: each holds the exact command that made it, the script's command line
(`script`, from $LOOPRL_SCRIPT) and where it ran (`environment`: looprl.bench.environment, commit, torch, GPUs).
usage: python3 benchmarks/gpu/record.py stamp FILE                   add `script` to a file written by python -m looprl.bench
       python3 benchmarks/gpu/record.py json FILE TIMEOUT_S CMD...   run CMD (stdout: one JSON object); write it with command,
                                                                     script and environment; exit with CMD's status
       python3 benchmarks/gpu/record.py check FILE TIMEOUT_S CMD...  run CMD, its output streaming; add its command, exit
                                                                     status, seconds and last lines to FILE's `steps`
       python3 benchmarks/gpu/record.py run FILE RUN_DIR COMMANDS    a training run (the last of COMMANDS): its metrics and
                                                                     summary, with the commands
       python3 benchmarks/gpu/record.py beside FILE PROBE                 the probe's rows (huginn_decode_probe.py's JSON) beside
                                                                     the decode rows of FILE, with the ratios per B
       python3 benchmarks/gpu/record.py rows FILE PART...            the results of several bench files (PART) as one file's
                                                                     rows, each with its command
       python3 benchmarks/gpu/record.py resume FILE CASE A B COMPARE COMMANDS   resume equality of runs A and B (looprl.compare
                                                                     --json output in COMPARE); prints a summary line
       python3 benchmarks/gpu/record.py rebuild FILE FIRST SECOND    two warm starts of one command (model directories):
                                                                     which files (sha256) and record fields are equal
COMMANDS is a file of the command lines that made the runs, one a line."""
import collections, json, os, shlex, signal, subprocess, sys, threading, time
from pathlib import Path

def stamped(doc: dict) -> dict:
    "`doc` with the script's command line and, if it has none, the environment."
    from looprl.bench import environment
    return {**doc, "script": os.environ.get("LOOPRL_SCRIPT"), "environment": doc.get("environment") or environment()}

def run_cmd(cmd: list[str], timeout_s: float, capture: bool):
    "Run `cmd` in its own process group, killed with it after `timeout_s`; stream (or capture) stdout. (exit status, lines)"
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None if capture else subprocess.STDOUT, text=True, start_new_session=True)
    expired = []
    def kill():
        expired.append(True)
        try: os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError: pass
    timer = threading.Timer(timeout_s, kill); timer.start()
    lines = []
    for line in p.stdout:
        lines.append(line)
        if not capture: print(line, end="", flush=True)
    rc = p.wait(); timer.cancel()
    if expired: print(f"record.py: {shlex.join(cmd)} killed after {timeout_s:.0f} s", file=sys.stderr, flush=True)
    return (124 if expired else rc), lines

def record_json(path, timeout_s, *cmd):
    rc, lines = run_cmd(list(cmd), float(timeout_s), capture=True)
    try: result = json.loads("".join(lines))
    except json.JSONDecodeError: sys.exit(f"record.py: {shlex.join(cmd)} exited with status {rc} without a JSON report; {path} not written")
    Path(path).write_text(json.dumps(stamped({"command": shlex.join(cmd), **result}), indent=1))
    print(f"wrote {path} ({shlex.join(cmd)} exited with status {rc})"); sys.exit(rc)

def record_check(path, timeout_s, *cmd):
    t0 = time.perf_counter()
    rc, lines = run_cmd(list(cmd), float(timeout_s), capture=False)
    seconds = round(time.perf_counter() - t0, 1)
    p = Path(path)
    doc = json.loads(p.read_text()) if p.exists() else stamped({"command": os.environ.get("LOOPRL_SCRIPT"), "steps": []})
    doc["steps"].append(dict(command=shlex.join(cmd), exit_status=rc, seconds=seconds,
                             last_lines=[l.rstrip("\n") for l in lines[-15:]]))
    p.write_text(json.dumps(doc, indent=1)); sys.exit(rc)

def record_run(path, run_dir, commands):
    from looprl.core.state import read_metrics
    lines = Path(commands).read_text().splitlines()
    doc = stamped(dict(command=lines[-1], commands=lines, metrics=read_metrics(run_dir),
                       summary=json.loads((Path(run_dir) / "summary.json").read_text())))
    Path(path).write_text(json.dumps(doc, indent=1)); print(f"wrote {path}")

def record_resume(path, case, a, b, compare, commands):
    from looprl.core.state import read_metrics
    doc = stamped(dict(command=case, commands=Path(commands).read_text().splitlines(), compare=json.loads(Path(compare).read_text()),
                       contract=json.loads((Path(a) / "run.json").read_text())["contract"],
                       uninterrupted=read_metrics(a), resumed=read_metrics(b)))
    Path(path).write_text(json.dumps(doc, indent=1))
    ups = [l for l in doc["uninterrupted"] if l["kind"] == "update"]
    status = collections.Counter(f["status"] for f in doc["compare"]["fields"])
    print(case, "|", doc["compare"]["verdict"], "|", dict(status), "| grad_norm", [round(u["grad_norm"], 4) for u in ups],
          "| digests", [u["digest"][7:15] for u in ups], "| reward", [round(u["reward_mean"], 4) for u in ups], f"| wrote {path}")

def rebuild(path, first, second):
    import hashlib
    def sha(f): return hashlib.sha256(f.read_bytes()).hexdigest()
    a, b = (json.loads((Path(d) / "warmstart.json").read_text()) for d in (first, second))
    files = sorted(f.name for f in Path(first).iterdir() if f.is_file() and f.name != "warmstart.json")
    shas = {f: [sha(Path(first) / f), sha(Path(second) / f) if (Path(second) / f).is_file() else None] for f in files}
    doc = stamped(dict(command=a["command"], first=a, second=b, files_sha256=shas,
                       files_equal=all(x == y for x, y in shas.values()),
                       fields_that_differ=sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k)),
                       heldout_equal_but_eval_s=all(a["heldout"].get(k) == b["heldout"].get(k) for k in
                                                    a["heldout"].keys() | b["heldout"].keys() if k != "eval_s")))
    Path(path).write_text(json.dumps(doc, indent=1))
    print(f"rebuild: files equal {doc['files_equal']}, held-out equal {doc['heldout_equal_but_eval_s']}, fields that "
          f"differ {doc['fields_that_differ']} | wrote {path}")

def stamp(path):
    p = Path(path); p.write_text(json.dumps(stamped(json.loads(p.read_text())), indent=1))

def beside(path, probe):
    """Put the probe's rows (same run, same machine) into FILE as `probe`, and on each decode row the probe's times and
    ratios (against the row's bound, at the device's bandwidth: the probe divides by the H200's)."""
    p = Path(path); doc, rows = json.loads(p.read_text()), json.loads(Path(probe).read_text())
    by_b = {r["B"]: r for r in rows}
    for r in doc["result"]:
        q = by_b.get(r["B"])
        if q is None: continue
        r.update(probe_graph_ms=q["graph_ms"], probe_eager_ms=q["eager_ms"], probe_graph_over_bound=q["graph_ms"] / r["bound_ms"],
                 default_over_probe_graph=r["default_ms"] / q["graph_ms"], eager_over_probe_eager=r["eager_ms"] / q["eager_ms"])
    doc["probe"] = dict(script="benchmarks/gpu/huginn_decode_probe.py", rows=rows)
    p.write_text(json.dumps(doc, indent=1))
    for r in doc["result"]:
        print(" ".join(f"{k}={r.get(k):.3f}" if isinstance(r.get(k), float) else f"{k}={r.get(k)}" for k in
                       ("B", "default_ms", "default_over_bound", "graph_over_bound", "eager_ms", "probe_graph_ms", "probe_eager_ms",
                        "eager_over_probe_eager")))

def rows(path, *parts):
    "One file whose `rows` are the results of the bench files `parts` (each with its command), the first's environment."
    docs = [json.loads(Path(p).read_text()) for p in parts]
    out = dict(command="; ".join(d["command"] for d in docs), environment=docs[0].get("environment"),
               rows=[dict(command=d["command"], **d["result"]) for d in docs])
    Path(path).write_text(json.dumps(stamped(out), indent=1))

if __name__ == "__main__":
    verbs = dict(stamp=(stamp, 1), beside=(beside, 2), json=(record_json, None), check=(record_check, None), run=(record_run, 3), resume=(record_resume, 6), rows=(rows, None),
             rebuild=(rebuild, 3))
    if len(sys.argv) < 2 or sys.argv[1] not in verbs: sys.exit(__doc__)
    f, n = verbs[sys.argv[1]]
    args = sys.argv[2:]
    if (n is not None and len(args) != n) or (n is None and len(args) < (2 if f is rows else 3)): sys.exit(f"record.py {sys.argv[1]}: wrong arguments\n{__doc__}")
    f(*args)
