"""The bad-input matrix (issue 46): one table of bad inputs over every command that takes user input, each refused
the same way: exactly one non-empty line on stderr, `looprl.<command>: …`, naming the file, line or field; exit
status 2 for bad input, 1 for damage found mid-run; no traceback in stdout or stderr; and the output (a run directory,
a result file) as it was: absent if it was absent, else the same listing and bytes.

Most cases call the command's `main(argv)` in this process (no model is loaded before a refusal, so each takes well
under a second); a few run `python -m looprl.<command>` in a fresh process, where only the real process shows the
exit status and stderr a user sees. The twin at the end runs a command that raises, and others that break one rule
each, through the same check, and sees it fail."""
import hashlib, importlib, json, os, shutil, traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
import pytest
import torch
from conftest import run_cli

ASSETS = Path(__file__).resolve().parents[1] / "looprl" / "assets"
MODEL = ASSETS / "tiny-huginn"                     # 256 positions; its weights are read only after the checks
ROW = '{"prompt": "1+1=", "label": "2"}\n'


# --- inputs: made on demand inside the case's temporary directory --------------------------------------------------
class Inputs:
    "The files a case's arguments name, made inside `root` (a fresh temporary directory) when the arguments are built."
    def __init__(self, root: Path, base_run: Callable[[], Path]):
        self.T, self._base_run = root, base_run

    @property
    def base_run(self) -> Path: return self._base_run()   # made once per module, on the first case that needs it

    @property
    def out(self) -> Path: return self.T / "out"          # an output that does not exist

    def file(self, name: str, text: str | bytes = "x") -> Path:
        p = self.T / name
        p.write_bytes(text) if isinstance(text, bytes) else p.write_text(text)
        return p

    def busy(self) -> Path:
        "A directory holding a file of someone's."
        d = self.T / "busy"; d.mkdir(exist_ok=True); (d / "keep.txt").write_text("keep")
        return d

    def model(self, edit=None) -> Path:
        "A copy of the shipped tiny Huginn, changed by `edit(dir)`."
        d = self.T / "model"
        if not d.exists(): shutil.copytree(MODEL, d)
        if edit: edit(d)
        return d

    def run(self, edit=None) -> Path:
        "A copy of a real run stopped after its first update (one checkpoint, update-000001), changed by `edit(dir)`."
        d = self.T / "run"
        if not d.exists(): shutil.copytree(self.base_run, d, symlinks=True)
        if edit: edit(d)
        return d


def truncate(rel: str):
    "An edit cutting file `rel` to half its length."
    def edit(d):
        b = (d / rel).read_bytes(); (d / rel).write_bytes(b[:len(b) // 2])
    return edit

def write(rel: str, text: str | bytes):
    def edit(d): (d / rel).write_bytes(text) if isinstance(text, bytes) else (d / rel).write_text(text)
    return edit

def remove(rel: str):
    def edit(d): (d / rel).unlink()
    return edit

def config_key(key: str, value=None):
    "An edit setting (value given) or deleting (value None) a key of config.json."
    def edit(d):
        cfg = json.loads((d / "config.json").read_text())
        cfg.pop(key) if value is None else cfg.__setitem__(key, value)
        (d / "config.json").write_text(json.dumps(cfg))
    return edit

CKPT = "checkpoints/update-000001"


# --- the check --------------------------------------------------------------------------------------------------------
def snapshot(p: Path):
    "None for a path that does not exist; else its bytes' digest (a file), or every entry's name, kind and bytes."
    p = Path(p)
    if not os.path.lexists(p): return None
    digest = lambda f: hashlib.sha256(f.read_bytes()).hexdigest()
    if p.is_file(): return ("file", digest(p))
    entry = lambda f: ("link", os.readlink(f)) if f.is_symlink() else ("dir",) if f.is_dir() else ("file", digest(f))
    return sorted((str(f.relative_to(p)), *entry(f)) for f in p.rglob("*"))


def run_in_process(command: str, argv: list) -> int:
    """`main(argv)` of looprl.<command>, as `python -m` would end: its exit status, or 1 with the traceback on stderr
    when an exception escapes it."""
    main = importlib.import_module(f"looprl.{command}").main
    try: main([str(a) for a in argv])
    except SystemExit as e: return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:                                  # what the interpreter prints for an uncaught exception
        traceback.print_exc(); return 1
    return 0


def check_refusal(command: str, code: int, out: str, err: str, expected: int, needle: str, before, after) -> str:
    """Fails unless the command ended as a refusal must: status `expected`, no traceback, nothing on stdout, one
    non-empty stderr line `looprl.<command>: …` containing `needle`, and the output as it was. Returns the line."""
    assert "Traceback" not in out + err, err
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{err}"
    assert lines[0].startswith(f"looprl.{command}: "), lines[0]
    assert needle in lines[0], (needle, lines[0])
    assert code == expected, (code, expected, lines[0])
    assert out == "", out
    assert after == before, f"the output changed: {before} → {after}"
    return lines[0]


# --- the table --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    id: str
    command: str                                    # looprl.<command>
    argv: Callable[[Inputs], list]
    needle: str                                     # in the line: the file, line or field ({T}: the case's directory)
    code: int = 2                                   # 2 bad input, 1 damage found mid-run
    output: Callable[[Inputs], Path] = lambda w: w.out     # what must be as it was
    process: bool = False                           # run `python -m` in a fresh process
    skip: Callable[[], str | None] = lambda: None   # a reason this host cannot show the case, or None

def train(*args): return lambda w: ["--output", w.out, "--no-progress", *args]
def train_with(make): return lambda w: ["--output", w.out, "--no-progress", *make(w)]
def resume(edit=None): return lambda w: ["--output", w.run(edit), "--resume", "--no-progress"]
def data(text): return train_with(lambda w: ["--data", w.file("data.jsonl", text)])
run_dir = lambda w: w.T / "run"
as_root = lambda: ("root writes into a read-only directory, so no refusal can be seen"
                   if hasattr(os, "geteuid") and os.geteuid() == 0 else None)
with_cuda = lambda: "this host has CUDA" if torch.cuda.is_available() else None

def closed_port() -> int:
    "A local TCP port where nothing listens (bound, then closed)."
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

def read_only_dir(w) -> Path:
    d = w.T / "ro"; d.mkdir(exist_ok=True); d.chmod(0o555)
    return d

CASES = [
    # train: the model given to --model, checked before any work
    Case("train-model-truncated-safetensors", "train", train_with(lambda w: ["--model", w.model(truncate("model.safetensors"))]),
         "{T}/model/model.safetensors: truncated", process=True),
    Case("train-model-garbage-safetensors", "train",
         train_with(lambda w: ["--model", w.model(write("model.safetensors", b"\xff" * 4096))]),
         "{T}/model/model.safetensors: not a safetensors file"),
    Case("train-model-two-byte-safetensors", "train",
         train_with(lambda w: ["--model", w.model(write("model.safetensors", b"\x01\x02"))]),
         "{T}/model/model.safetensors: not a safetensors file (2 bytes"),
    Case("train-model-missing", "train", train_with(lambda w: ["--model", w.T / "nowhere"]), "--model: {T}/nowhere: no such file"),
    Case("train-model-no-config", "train", train_with(lambda w: ["--model", w.model(remove("config.json"))]),
         "{T}/model/config.json: no such file"),
    Case("train-model-config-not-json", "train", train_with(lambda w: ["--model", w.model(write("config.json", "{oops"))]),
         "{T}/model/config.json: invalid JSON at line 1"),
    Case("train-model-config-missing-key", "train", train_with(lambda w: ["--model", w.model(config_key("model_type"))]),
         "config.json: missing key 'model_type'"),
    Case("train-model-unknown-family", "train", train_with(lambda w: ["--model", w.model(config_key("model_type", "llama"))]),
         "unknown model_type 'llama'"),
    Case("train-model-revision-mismatch", "train",
         train_with(lambda w: ["--model", w.model(config_key("_revision", "aaaa")), "--model-revision", "bbbb"]),
         "does not match"),
    Case("train-model-no-tokenizer", "train", train_with(lambda w: ["--model", w.model(remove("tokenizer.json"))]),
         "--model: {T}/model: no tokenizer.json"),
    Case("train-model-tokenizer-damaged", "train", train_with(lambda w: ["--model", w.model(write("tokenizer.json", "{}"))]),
         "--model: {T}/model/tokenizer.json: not a tokenizer file"),
    # train: the output, checked before any work
    Case("train-progress-every-negative", "train", train("--progress-every", "-1"),
         "--progress-every: must be an int ≥ 0, got -1"),
    Case("train-no-signal-updates-negative", "train", train("--no-signal-updates", "-2"),
         "--no-signal-updates: must be an int ≥ 0, got -2"),
    Case("train-output-under-a-file", "train", lambda w: ["--output", w.file("afile") / "run", "--no-progress"],
         "--output: cannot create {T}/afile/run: {T}/afile is a file", output=lambda w: w.T / "afile"),
    Case("train-output-is-a-file", "train", lambda w: ["--output", w.file("afile"), "--no-progress"],
         "--output: {T}/afile exists and is not a directory", output=lambda w: w.T / "afile"),
    Case("train-output-read-only-directory", "train", lambda w: ["--output", read_only_dir(w) / "run", "--no-progress"],
         "--output: cannot write in {T}/ro (permission denied)", output=lambda w: w.T / "ro", skip=as_root),
    Case("train-output-not-empty", "train", lambda w: ["--output", w.busy(), "--no-progress"], "not empty",
         output=lambda w: w.T / "busy"),
    # train: settings against the model, numbers, enums, conflicting flags
    Case("train-prompt-beyond-positions", "train", train("--max-prompt-tokens", "700"),
         "--max-prompt-tokens 700 + --max-response-tokens 48 = 748 tokens: the model has 256 positions"),
    Case("train-response-beyond-positions", "train", train("--max-response-tokens", "300"), "the model has 256 positions"),
    Case("train-unknown-flag", "train", train("--updtes", "3"), "unrecognized arguments: --updtes"),
    Case("train-updates-not-a-number", "train", train("--updates", "abc"), "argument --updates: invalid int value: 'abc'"),
    Case("train-updates-zero", "train", train("--updates", "0"), "--updates: must be an int ≥ 1, got 0"),
    Case("train-stop-after-not-below-updates", "train", train("--updates", "3", "--stop-after", "3"), "--stop-after"),
    Case("train-lr-zero", "train", train("--lr", "0"), "--lr: must be a finite number > 0"),
    Case("train-temperature-nan", "train", train("--temperature", "nan"), "--temperature: must be a finite number > 0, got nan"),
    Case("train-exit-threshold-above-one", "train", train("--exit-threshold", "1.5"), "--exit-threshold: must be a number in (0, 1]"),
    Case("train-betas-out-of-range", "train", train("--betas", "0.9", "2"), "--betas: must be two numbers in [0, 1)"),
    Case("train-minibatches-do-not-divide", "train", train("--minibatches", "3"), "must divide into 3 equal parts"),
    Case("train-eval-every-negative", "train", train("--eval-every", "-2"), "--eval-every: must be an int ≥ 0"),
    Case("train-seed-negative", "train", train("--seed", "-1"), "--seed: must be in [0, 2**63), got -1"),
    Case("train-checkpoint-every-zero", "train", train("--checkpoint-every", "0"), "--checkpoint-every"),
    Case("train-unknown-algorithm", "train", train("--algorithm", "reinforce"), "argument --algorithm: invalid choice: 'reinforce'"),
    Case("train-unknown-engine", "train", train("--engine", "sglang"), "argument --engine: invalid choice: 'sglang'"),
    Case("train-grpo-one-sample", "train", train("--algorithm", "grpo", "--n-samples-per-prompt", "1"), "at least 2"),
    Case("train-engine-thread-without-async", "train", train("--engine-thread"), "--engine-thread: places the engine of an --async run"),
    Case("train-nccl-on-the-cpu", "train", train("--transport", "nccl"), "--transport nccl"),
    Case("train-distributed-optimizer-without-megatron", "train", train("--distributed-optimizer"),
         "--distributed-optimizer: Megatron's distributed optimizer needs backend megatron"),
    Case("train-train-env-vars-not-an-object", "train", train("--train-env-vars", "[1]"),
         "argument --train-env-vars: must be a JSON object"),
    Case("train-ray-address-not-answering", "train", lambda w: ["--output", w.out, "--no-progress",
                                                                 "--ray-address", f"127.0.0.1:{closed_port()}"],
         "--ray-address 127.0.0.1:"),
    Case("train-cuda-without-a-gpu", "train", train("--device", "cuda"), "--device cuda: this host has", skip=with_cuda),
    # train: reward specs
    Case("train-reward-no-colon", "train", train("--reward", "nocolon"), "--reward: reward 'nocolon': expected 'module:function'"),
    Case("train-reward-no-module", "train", train("--reward", "no_such_module_xyz:f"), "no module named 'no_such_module_xyz'"),
    Case("train-reward-not-callable", "train", train("--reward", "os:sep"), "--reward: reward 'os:sep': 'sep' is not callable"),
    Case("train-reward-no-function", "train", train("--reward", "looprl.tasks.rewards:no_such_reward"), "--reward:"),
    Case("train-reward-no-file", "train", train("--reward", "tests/plugins/nowhere.py:f"), "--reward:"),
    # train: prompt data, named by file and line
    Case("train-data-missing", "train", train_with(lambda w: ["--data", w.T / "nowhere.jsonl"]), "{T}/nowhere.jsonl: no such file"),
    Case("train-data-a-directory", "train", train_with(lambda w: ["--data", w.busy()]), "{T}/busy: a directory, not a JSONL file"),
    Case("train-data-row-cut-short", "train", data(ROW + '{"prompt": "2+2=", "label": \n'), "data.jsonl:2"),
    Case("train-data-no-label", "train", data('{"prompt": "1+1="}\n'), "label"),
    Case("train-data-label-a-number", "train", data('{"prompt": "1+1=", "label": 2}\n'), "label"),
    Case("train-data-prompt-a-number", "train", data('{"prompt": 5, "label": "2"}\n'), "prompt"),
    Case("train-data-empty-file", "train", data(""), "no rows"),
    Case("train-data-blank-line-counted", "train", data(ROW + '\n{"prompt": "6 × 7", "label": "42"}\n'),
         "data.jsonl:3: field 'prompt'"),
    Case("train-data-row-an-array", "train", data('["a", "b"]\n'), "data.jsonl:1: row must be a JSON object, got array"),
    Case("train-data-not-utf8", "train", data(b"\xff\xfe\x00garbage"), "data.jsonl:1: not UTF-8 text"),
    Case("train-data-empty-prompt", "train", data('{"prompt": "", "label": "2"}\n'), "data.jsonl:1: field 'prompt' is empty"),
    Case("train-eval-data-bad-row", "train", train_with(lambda w: ["--eval-data", w.file("held.jsonl", '["a"]\n')]),
         "held.jsonl:1: row must be a JSON object"),
    # train --resume: the run directory and its checkpoints
    Case("train-resume-without-output", "train", lambda w: ["--resume", "--no-progress"], "--resume needs --output"),
    Case("train-resume-empty-directory", "train", lambda w: ["--output", w.busy(), "--resume", "--no-progress"],
         "not a looprl run directory", output=lambda w: w.T / "busy"),
    Case("train-resume-only-checkpoint-trainer-truncated", "train", resume(truncate(f"{CKPT}/trainer.pt")),
         f"no whole checkpoint to resume from: {{T}}/run/{CKPT}/trainer.pt: truncated", code=1, output=run_dir, process=True),
    Case("train-resume-only-checkpoint-rng-truncated", "train", resume(truncate(f"{CKPT}/rng.pt")),
         f"{{T}}/run/{CKPT}/rng.pt: truncated", code=1, output=run_dir),
    Case("train-resume-loop-state-not-json", "train", resume(write(f"{CKPT}/loop.json", "{x")),
         f"{{T}}/run/{CKPT}/loop.json: not the loop state JSON", code=1, output=run_dir),
    Case("train-resume-latest-names-missing-update", "train", resume(write("checkpoints/latest", "update-000099")),
         "{T}/run/checkpoints/latest: names update-000099", output=run_dir),
    Case("train-resume-run-json-not-json", "train", resume(write("run.json", "{x")), "{T}/run/run.json: unreadable run file",
         output=run_dir),
    Case("train-resume-run-json-without-options", "train", resume(write("run.json", '{"contract": {}}')),
         "{T}/run/run.json: unreadable run file", output=run_dir),
    Case("train-resume-metrics-damaged", "train", resume(write("metrics.jsonl", "garbage\n")),
         "{T}/run/metrics.jsonl:1: invalid JSON", output=run_dir),
    Case("train-resume-model-truncated", "train", lambda w: [*resume()(w), "--model", w.model(truncate("model.safetensors"))],
         "--model: {T}/model/model.safetensors: truncated", output=run_dir),
    Case("train-resume-model-bytes-changed", "train",
         lambda w: [*resume()(w), "--model", w.model(write("model.safetensors", MODEL.joinpath("model.safetensors")
                                                                .read_bytes()[:-4] + b"\x00\x01\x02\x03"))],
         "{T}/run/run.json: cannot resume with different settings: model.sha256: run has", output=run_dir),
    Case("train-resume-another-algorithm", "train", lambda w: [*resume()(w), "--algorithm", "ppo"],
         "algorithm: run has 'grpo', requested 'ppo'", output=run_dir),
    # eval
    Case("eval-model-truncated-safetensors", "eval", lambda w: [w.model(truncate("model.safetensors"))],
         "{T}/model/model.safetensors: truncated"),
    Case("eval-tokenizer-damaged", "eval", lambda w: [w.model(write("tokenizer.json", "{}"))],
         "{T}/model/tokenizer.json: not a tokenizer file"),
    Case("eval-nothing-there", "eval", lambda w: [w.T / "nowhere"], "neither a checkpoint directory"),
    Case("eval-limit-zero", "eval", lambda w: [MODEL, "--eval-limit", "0"], "--eval-limit: must be ≥ 1, got 0"),
    Case("eval-temperature-negative", "eval", lambda w: [MODEL, "--temperature", "-1"], "--temperature: must be a finite number > 0"),
    Case("eval-data-bad-row", "eval", lambda w: [MODEL, "--eval-data", w.file("q.jsonl", ROW + '{"prompt": 3}\n')],
         "{T}/q.jsonl:2: field 'prompt' must be a string"),
    Case("eval-run-json-damaged", "eval", lambda w: [w.run(write("run.json", "{x"))], "{T}/run/run.json: not a readable run file",
         output=run_dir),
    Case("eval-bad-reward", "eval", lambda w: [MODEL, "--reward", "nocolon"], "reward 'nocolon'"),
    Case("eval-cuda-without-a-gpu", "eval", lambda w: [MODEL, "--device", "cuda"], "--device cuda: no CUDA device is available",
         skip=with_cuda),
    # verify
    Case("verify-model-garbage-safetensors", "verify", lambda w: [w.model(write("model.safetensors", b"\xff" * 4096))],
         "{T}/model/model.safetensors: not a safetensors file"),
    Case("verify-no-directory", "verify", lambda w: [w.T / "nowhere"], "{T}/nowhere: no such directory"),
    Case("verify-unknown-precision", "verify", lambda w: [MODEL, "--precision", "int8"], "--precision must be one of fp32, fp16, bf16"),
    Case("verify-unknown-exit-mode", "verify", lambda w: [MODEL, "--exit-mode", "x"], "--exit-mode: 'x' is not one of"),
    Case("verify-greedy", "verify", lambda w: [MODEL, "--temperature", "0"], "--temperature must be a finite number > 0, got 0.0"),
    Case("verify-temperature-negative", "verify", lambda w: [MODEL, "--temperature", "-1"], "--temperature must be a finite number > 0"),
    Case("verify-no-samples", "verify", lambda w: [MODEL, "--samples", "0"], "--samples and --max-response-tokens must be ≥ 1"),
    # inspect
    Case("inspect-model-truncated-safetensors", "inspect", lambda w: [w.model(truncate("model.safetensors"))],
         "{T}/model/model.safetensors: truncated"),
    Case("inspect-config-not-json", "inspect", lambda w: [w.file("config.json", "{oops")], "{T}/config.json: invalid JSON"),
    Case("inspect-plan-flag-without-plan", "inspect", lambda w: [MODEL, "--gpu", "h100"], "--gpu is a setting of the plan: add --plan"),
    Case("inspect-plan-negative-memory", "inspect", lambda w: [MODEL, "--plan", "--gpu-memory", "-1"], "--gpu-memory: GiB > 0"),
    Case("inspect-plan-cuda-without-a-gpu", "inspect", lambda w: [MODEL, "--plan", "--device", "cuda"],
         "--device cuda: this host has no CUDA device", skip=with_cuda),
    # compare
    Case("compare-run-json-damaged", "compare", lambda w: [w.run(write("run.json", "{x")), w.run()],
         "{T}/run/run.json: invalid JSON at line 1", output=run_dir),
    Case("compare-metrics-damaged", "compare", lambda w: [w.run(write("metrics.jsonl", "garbage\n")), w.run()],
         "{T}/run/metrics.jsonl:1: invalid JSON", output=run_dir),
    Case("compare-checkpoint-truncated", "compare", lambda w: [w.run(truncate(f"{CKPT}/trainer.pt")), w.base_run],
         f"{{T}}/run/{CKPT}/trainer.pt: unreadable", output=run_dir),
    Case("compare-unknown-field", "compare", lambda w: [w.run(), w.run(), "--ignore", "nosuch"], "--ignore: unknown field 'nosuch'",
         output=run_dir),
    Case("compare-one-run", "compare", lambda w: [w.T / "a"], "the following arguments are required: run_b"),
    Case("compare-not-runs", "compare", lambda w: [w.T / "a", w.T / "b"], "not a run directory"),
    # plots
    Case("plots-not-a-run", "plots", lambda w: [w.T / "nowhere", "--out", w.out], "{T}/nowhere: not a looprl run directory"),
    Case("plots-out-under-a-file", "plots", lambda w: [w.run(), "--out", w.file("afile") / "figs"],
         "--out: cannot create {T}/afile/figs: {T}/afile is a file", output=lambda w: w.T / "afile"),
    Case("plots-metrics-damaged", "plots", lambda w: [w.run(write("metrics.jsonl", "garbage\n")), "--out", w.out],
         "{T}/run/metrics.jsonl:1: invalid JSON"),
    Case("plots-run-json-damaged", "plots", lambda w: [w.run(write("run.json", "{x")), "--out", w.out],
         "{T}/run/run.json: invalid JSON at line 1"),
    Case("plots-exit-table-missing", "plots", lambda w: ["--exit-table", w.T / "exits.json", "--out", w.out],
         "--exit-table {T}/exits.json: no such file"),
    Case("plots-exit-table-cut-short", "plots", lambda w: [w.run(), "--exit-table", w.file("exits.json", '{"result": {"ta'),
                                                            "--out", w.out],
         "--exit-table {T}/exits.json: invalid JSON at line 1"),
    Case("plots-exit-table-not-a-table", "plots", lambda w: ["--exit-table", w.file("exits.json", "[1]"), "--out", w.out],
         "--exit-table {T}/exits.json: no 'result'"),
    Case("plots-nothing-to-draw", "plots", lambda w: ["--out", w.out], "give run directories, --exit-table FILE or --depth-reports FILE"),
    # make_tiny
    Case("make_tiny-unknown-family", "make_tiny", lambda w: [w.out, "--family", "llama"], "unknown model family 'llama'"),
    Case("make_tiny-no-family", "make_tiny", lambda w: [w.out], "--family is required"),
    Case("make_tiny-out-not-empty", "make_tiny", lambda w: [w.busy(), "--family", "ouro"], "{T}/busy: exists and is not empty",
         output=lambda w: w.T / "busy"),
    Case("make_tiny-out-under-a-file", "make_tiny", lambda w: [w.file("afile") / "m", "--family", "ouro"],
         "cannot create {T}/afile/m: {T}/afile is a file", output=lambda w: w.T / "afile"),
    Case("make_tiny-seed-negative", "make_tiny", lambda w: [w.out, "--family", "ouro", "--seed", "-1"],
         "--seed: must be in [0, 2**63), got -1"),
    # warmstart
    Case("warmstart-max-steps-zero", "warmstart", lambda w: [w.out, "--max-steps", "0"], "--max-steps and --batch-size must be ≥ 1"),
    Case("warmstart-out-not-empty", "warmstart", lambda w: [w.busy()], "{T}/busy: exists and is not empty",
         output=lambda w: w.T / "busy"),
    Case("warmstart-setting-of-another-preset", "warmstart", lambda w: [w.out, "--device", "cpu"],
         "--device: not a setting of --preset tiny"),
    Case("warmstart-unknown-device", "warmstart", lambda w: [w.out, "--preset", "small", "--device", "tpu"],
         "--device: cpu or cuda, got 'tpu'"),
    Case("warmstart-no-splits", "warmstart", lambda w: [w.out, "--preset", "small", "--splits", w.T / "splits"],
         "{T}/splits: no train.jsonl"),
    Case("warmstart-max-seconds-zero", "warmstart", lambda w: [w.out, "--preset", "small", "--max-seconds", "0"],
         "--max-seconds must be > 0"),
    Case("warmstart-lr-nan", "warmstart", lambda w: [w.out, "--lr", "nan"], "--lr: must be > 0, got nan"),
    Case("warmstart-batch-size-zero", "warmstart", lambda w: [w.out, "--batch-size", "0"],
         "--max-steps and --batch-size must be ≥ 1, got 3000 and 0"),
    Case("warmstart-target-above-one", "warmstart", lambda w: [w.out, "--target-accuracy", "2"],
         "--target-accuracy: in (0, 1], got 2.0"),
    Case("warmstart-task-preset-lr-nan", "warmstart", lambda w: [w.out, "--preset", "small", "--lr", "nan"],
         "--lr and --batch-size must be > 0"),
    # tasks.data
    Case("tasks.data-unknown-task", "tasks.data", lambda w: ["sudoku", "--n", "4", "--out", w.out], "unknown task 'sudoku'"),
    Case("tasks.data-n-zero", "tasks.data", lambda w: ["chain_sum", "--n", "0", "--out", w.out], "argument --n: must be an integer ≥ 1"),
    Case("tasks.data-config-not-key-value", "tasks.data", lambda w: ["chain_sum", "--n", "4", "--config", "bad", "--out", w.out],
         "argument --config: must be KEY=VALUE, got 'bad'"),
    Case("tasks.data-config-unknown-key", "tasks.data",
         lambda w: ["chain_sum", "--n", "4", "--config", "nosuch=1", "--out", w.out], "unexpected keyword argument 'nosuch'"),
    Case("tasks.data-config-out-of-range", "tasks.data",
         lambda w: ["chain_sum", "--n", "4", "--config", "min_terms=-5", "--out", w.out], "min_terms must be positive"),
    Case("tasks.data-out-a-directory", "tasks.data", lambda w: ["chain_sum", "--n", "4", "--out", w.busy()],
         "--out: {T}/busy is a directory, not a file", output=lambda w: w.T / "busy"),
    Case("tasks.data-out-no-folder", "tasks.data", lambda w: ["chain_sum", "--n", "4", "--out", w.T / "no" / "q.jsonl"],
         "no folder {T}/no", output=lambda w: w.T / "no"),
    # bench (every case names --out, so nothing is written into the repository's runs/bench)
    Case("bench-learning-no-eval", "bench", lambda w: ["learning", "--train-args=--updates 4 --no-eval", "--workdir", w.out,
                                                        "--out", w.T / "r.json"],
         "learning: --train-args: --no-eval turns off the held-out evaluations", process=True),
    Case("bench-learning-stop-after", "bench", lambda w: ["learning", "--train-args=--stop-after 1", "--workdir", w.out,
                                                           "--out", w.T / "r.json"],
         "--train-args: --stop-after ends each run"),
    Case("bench-learning-output-in-train-args", "bench", lambda w: ["learning", "--train-args=--output x", "--workdir", w.out,
                                                                     "--out", w.T / "r.json"],
         "--train-args: --output is set by bench learning for each run"),
    Case("bench-learning-bad-train-args", "bench", lambda w: ["learning", "--train-args=--updates abc", "--workdir", w.out,
                                                               "--out", w.T / "r.json"],
         "--train-args: argument --updates: invalid int value: 'abc'"),
    Case("bench-learning-workdir-a-file", "bench", lambda w: ["learning", "--workdir", w.file("afile"), "--out", w.T / "r.json"],
         "--workdir: {T}/afile exists and is not a directory", output=lambda w: w.T / "afile"),
    Case("bench-phases-no-model", "bench", lambda w: ["phases", "--model", w.T / "nowhere", "--device", "cpu", "--workdir", w.out,
                                                       "--out", w.T / "r.json"],
         "phases: --model {T}/nowhere: no such checkpoint directory"),
    Case("bench-async-no-pairs", "bench", lambda w: ["async", "--pairs", "0", "--workdir", w.out, "--out", w.T / "r.json"],
         "async: --pairs: must be ≥ 1, got 0"),
    Case("bench-rollout-engine-batch-zero", "bench", lambda w: ["rollout", "--engine", "native", "--batch", "0",
                                                                 "--out", w.out],
         "rollout: --batch: must be ≥ 1, got 0"),
    Case("bench-rollout-batch-sizes-not-numbers", "bench", lambda w: ["rollout", "--batch-sizes", "a,b", "--out", w.out],
         "rollout: --batch-sizes: comma-separated integers ≥ 1, got 'a,b'"),
    Case("bench-learning-seeds-not-numbers", "bench", lambda w: ["learning", "--seeds", "a,b", "--workdir", w.out,
                                                                  "--out", w.T / "r.json"], "learning: --seeds:"),
    Case("bench-learning-exit-thresholds-not-numbers", "bench", lambda w: ["learning", "--exit-thresholds", "abc",
                                                                            "--workdir", w.out, "--out", w.T / "r.json"],
         "learning: --exit-thresholds:"),
    Case("bench-learning-unknown-algorithm", "bench", lambda w: ["learning", "--algorithms", "grpo,reinforce", "--workdir", w.out,
                                                                  "--out", w.T / "r.json"],
         "learning: --algorithms: 'reinforce' is not one of"),
    Case("bench-matmuls-unknown-preset", "bench", lambda w: ["matmuls", "--preset", "nosuch", "--out", w.out],
         "matmuls: --preset: unknown preset 'nosuch'"),
    Case("bench-rollout-no-model", "bench", lambda w: ["rollout", "--model", w.T / "nowhere", "--device", "cpu", "--out", w.out],
         "rollout: --model: unknown preset '{T}/nowhere'"),
    Case("bench-rollout-unknown-precision", "bench", lambda w: ["rollout", "--engine", "native", "--precision", "int8", "--out", w.out],
         "rollout: --precision: one of"),
    Case("bench-train-batch-zero", "bench", lambda w: ["train", "--batch", "0", "--device", "cpu", "--out", w.out],
         "train: --batch: must be ≥ 1, got 0"),
    Case("bench-digest-unknown-device", "bench", lambda w: ["digest", "--device", "tpu", "--out", w.out],
         "digest: --device: not a device, got 'tpu'"),
    Case("bench-digest-cuda-without-a-gpu", "bench", lambda w: ["digest", "--out", w.out],
         "digest: --device cuda: this host has 0 CUDA devices", skip=with_cuda),
    Case("bench-latents-zero-width", "bench", lambda w: ["latents", "--n-embd", "0", "--out", w.out], "latents: --n-embd: must be ≥ 1"),
    Case("bench-phases-no-pairs", "bench", lambda w: ["phases", "--model", MODEL, "--pairs", "0", "--device", "cpu",
                                                       "--workdir", w.T / "w", "--out", w.out],
         "phases: --pairs: must be ≥ 1, got 0", output=lambda w: w.T / "w"),
    Case("bench-phases-train-args-refused", "bench", lambda w: ["phases", "--model", MODEL, "--device", "cpu",
                                                                 "--train-args=--lr 0", "--workdir", w.T / "w",
                                                                 "--out", w.out],
         "phases: --train-args: --lr: must be a finite number > 0, got 0.0", output=lambda w: w.T / "w"),
    Case("bench-phases-train-args-own-flag", "bench", lambda w: ["phases", "--model", MODEL, "--device", "cpu",
                                                                  "--train-args=--cuda-graphs", "--workdir", w.T / "w",
                                                                  "--out", w.out],
         "phases: --train-args: --cuda-graphs is set by bench phases for each run", output=lambda w: w.T / "w"),
    Case("bench-phases-run-fails", "bench", lambda w: ["phases", "--model", w.model(write("tokenizer.json", "{}")), "--pairs", "1",
                                                        "--updates", "1", "--device", "cpu", "--workdir", w.T / "w",
                                                        "--out", w.out],
         "phases: eager run failed with exit 2: looprl.train: --model: {T}/model/tokenizer.json", code=1,
         output=lambda w: w.T / "w"),
    Case("bench-out-a-directory", "bench", lambda w: ["digest", "--out", w.busy()], "digest: --out: {T}/busy is a directory",
         output=lambda w: w.T / "busy"),
    Case("bench-unknown-benchmark", "bench", lambda w: ["nosuch"], "argument cmd: invalid choice: 'nosuch'"),
]

# a mistyped flag, for every command (looprl.core.cli's parser): the arguments it needs, then the flag
NEEDS = {"inspect": lambda w: [MODEL], "make_tiny": lambda w: [w.out, "--family", "ouro"], "warmstart": lambda w: [w.out],
         "verify": lambda w: [MODEL], "eval": lambda w: [MODEL], "compare": lambda w: [w.T / "a", w.T / "b"],
         "plots": lambda w: [w.T / "run", "--out", w.out], "bench": lambda w: ["digest", "--out", w.out],
         "tasks.data": lambda w: ["chain_sum", "--n", "4", "--out", w.out]}
CASES += [Case(f"{c}-unknown-flag", c, lambda w, need=need: [*need(w), "--no-such-flag"],
               "unrecognized arguments: --no-such-flag") for c, need in NEEDS.items()]


@pytest.fixture(scope="module", autouse=True)
def help_texts_once():
    """Each train flag's help text read once for this module: `looprl.run.options.setting_help` calls fastcore's
    `docments`, which parses the settings' source on every call (about 1.2 s per train parser, built by every train
    and bench learning case). The texts, and so the parsers and their refusals, are the same."""
    import functools, looprl.run.options as O
    with pytest.MonkeyPatch.context() as m:
        m.setattr(O, "docments", functools.cache(O.docments))
        yield


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    "A real GRPO run of the shipped tiny Huginn stopped after its first update: one checkpoint, metrics, rollouts."
    out = tmp_path_factory.mktemp("matrix") / "run"
    args = ["--output", out, "--no-progress", "--updates", "2", "--stop-after", "1", "--no-eval", "--algorithm", "grpo",
            "--n-samples-per-prompt", "2", "--rollout-batch-size", "2", "--max-response-tokens", "4"]
    assert run_in_process("train", args) == 0
    assert (out / CKPT / "trainer.pt").is_file()
    return out


def test_the_matrix_has_forty_cases():
    print(f"{len(CASES)} bad inputs over {len({c.command for c in CASES})} commands")
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)
    assert {c.command for c in CASES} >= {"train", "eval", "verify", "inspect", "compare", "plots", "make_tiny", "warmstart",
                                          "tasks.data", "bench"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, tmp_path, capfd, request):
    if reason := case.skip(): pytest.skip(reason)
    w = Inputs(tmp_path, lambda: request.getfixturevalue("base_run"))
    argv = case.argv(w)
    target = case.output(w)
    before = snapshot(target)
    capfd.readouterr()
    if case.process:
        r = run_cli(f"looprl.{case.command}", *argv)
        code, out, err = r.returncode, r.stdout, r.stderr
    else:
        code = run_in_process(case.command, argv)
        out, err = capfd.readouterr()
    check_refusal(case.command, code, out, err, case.code, case.needle.format(T=tmp_path), before, snapshot(target))


def test_the_check_fails_on_what_a_refusal_must_not_do(tmp_path, capfd, monkeypatch):
    """The twin of the matrix: the same runner and check, given a command that raises (a traceback, exit 1), one that
    leaves its output behind, one that prints two lines, one with another exit status and one without the prefix,
    each fail; the well-behaved one passes."""
    import sys, types
    out = tmp_path / "out"
    def demo(body):
        def main(argv):
            if body == "raise": raise ValueError(f"{argv[0]}: bad")                      # a traceback, exit 1
            if body == "leave": out.mkdir(); (out / "run.json").write_text("{}")        # half-made output
            msg = {"two": "looprl.demo: bad\nlooprl.demo: more", "prefix": "demo: bad"}.get(body, "looprl.demo: bad")
            print(msg, file=sys.stderr)
            raise SystemExit(1 if body == "status" else 2)
        monkeypatch.setitem(sys.modules, "looprl.demo", types.SimpleNamespace(main=main))
        before = snapshot(out)
        capfd.readouterr()
        code = run_in_process("demo", [out])
        o, e = capfd.readouterr()
        return check_refusal("demo", code, o, e, 2, "bad", before, snapshot(out))
    with pytest.raises(AssertionError, match="Traceback"): demo("raise")
    for body in ("leave", "two", "status", "prefix"):
        with pytest.raises(AssertionError): demo(body)
        shutil.rmtree(out, ignore_errors=True)
    assert demo("ok") == "looprl.demo: bad"
