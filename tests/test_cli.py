"""Every `python -m looprl.<command>` refuses the same way (looprl.core.cli): a mistyped flag and a bad input are each
exactly one line on stderr, `looprl.<command>: …`, no traceback, exit status 2; `--help` names the command."""
import subprocess, sys
import pytest
from conftest import run_cli

# command → (arguments with a bad flag, arguments with a bad input, a phrase the bad-input line must contain)
CASES = {
    "inspect":   (lambda t: [t / "ck", "--no-such-flag"], lambda t: [t / "nowhere"], "no such file"),
    "make_tiny": (lambda t: [t / "out", "--family", "ouro", "--no-such-flag"], lambda t: [t / "out", "--family", "llama"], "unknown model family 'llama'"),
    "warmstart": (lambda t: [t / "out", "--no-such-flag"], lambda t: [t / "out", "--max-steps", "0"], "--max-steps and --batch-size must be ≥ 1"),
    "verify":    (lambda t: [t / "ck", "--no-such-flag"], lambda t: [t / "nowhere"], "no such directory"),
    "eval":      (lambda t: [t / "ck", "--no-such-flag"], lambda t: [t / "nowhere"], "neither a checkpoint directory"),
    "compare":   (lambda t: [t / "a", t / "b", "--no-such-flag"], lambda t: [t / "a", t / "b"], "not a run directory"),
    "plots":     (lambda t: [t / "run", "--out", t / "f", "--no-such-flag"], lambda t: [t / "nowhere", "--out", t / "f"], "not a looprl run directory"),
    "bench":     (lambda t: ["digest", "--no-such-flag"], lambda t: ["phases", "--model", t / "nowhere", "--workdir", t / "w", "--device", "cpu"],
                  "phases: --model"),
    "tasks.data": (lambda t: ["chain_sum", "--n", "4", "--out", t / "out", "--no-such-flag"], lambda t: ["sudoku", "--n", "4", "--out", t / "out"],
                  "unknown task 'sudoku'; one of: aiw,"),
    "train":     (lambda t: ["--output", t / "out", "--no-such-flag"], lambda t: ["--output", t / "out", "--updates", "3", "--stop-after", "3"],
                  "--stop-after"),
}


def refusal_line(r, command: str) -> str:
    "The one line a refusal of `looprl.<command>` prints; fails unless it is exit 2, one stderr line with the prefix, no traceback."
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"looprl.{command}: "), r.stderr
    assert r.stdout == "", r.stdout
    return lines[0]


@pytest.mark.parametrize("command", CASES)
def test_bad_flag_is_one_line(command, tmp_path):
    line = refusal_line(run_cli(f"looprl.{command}", *CASES[command][0](tmp_path)), command)
    assert "unrecognized arguments: --no-such-flag" in line, line


@pytest.mark.parametrize("command", CASES)
def test_bad_input_is_one_line(command, tmp_path):
    line = refusal_line(run_cli(f"looprl.{command}", *CASES[command][1](tmp_path)), command)
    assert CASES[command][2] in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", CASES)
def test_help_names_the_command(command):
    r = run_cli(f"looprl.{command}", "--help")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.startswith(f"usage: python -m looprl.{command} "), r.stdout


def python(code: str):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_the_check_rejects_what_a_command_must_not_print():
    "The twin of the tests above: `refusal_line` rejects a traceback, a line without the prefix, and another exit status."
    with pytest.raises(AssertionError):
        refusal_line(python("raise ValueError('x')"), "demo")
    old_compare = "import sys, traceback\ntry: raise KeyError('fields')\nexcept Exception: traceback.print_exc(); sys.exit(2)"
    with pytest.raises(AssertionError, match="Traceback"):
        refusal_line(python(old_compare), "demo")                                                             # exit 2, but a traceback
    with pytest.raises(AssertionError):
        refusal_line(python("import sys; print('x', file=sys.stderr); sys.exit(2)"), "demo")                     # no prefix
    with pytest.raises(AssertionError):
        refusal_line(python("import sys; print('looprl.demo: x\\nmore', file=sys.stderr); sys.exit(2)"), "demo")  # two lines
    with pytest.raises(AssertionError):
        refusal_line(python("import sys; print('looprl.demo: x', file=sys.stderr); sys.exit(1)"), "demo")        # exit 1
    assert refusal_line(python("import sys; print('looprl.demo: x', file=sys.stderr); sys.exit(2)"), "demo") == "looprl.demo: x"
