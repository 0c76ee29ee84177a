"""A run you can watch: with --no-progress (or stderr not a terminal) each update's line reaches stderr as that update
finishes, before the next one starts; a twin that holds its lines back until the end fails the same check."""
import io
from pathlib import Path
import pytest
import looprl.run.progress as progress
from looprl.train import main

ARGS = ["--updates", "4", "--rollout-batch-size", "4", "--max-response-tokens", "6", "--no-eval", "--no-progress"]

class WatchedStderr(io.StringIO):
    "stderr that notes, for every line written, how many updates the run directory held then (their rollout files)."
    def __init__(self, run: Path):
        super().__init__(); self.run, self.seen = run, []
    def write(self, s):
        done = len(list((self.run / "rollouts").glob("update-*.json"))) if (self.run / "rollouts").is_dir() else 0
        self.seen += [(line, done) for line in s.splitlines() if line.strip()]
        return super().write(s)

def lines_as_they_came(monkeypatch, capsys, run: Path) -> list[tuple[str, int]]:
    "(update line, updates written when it was printed) for a --no-progress run of `ARGS`."
    err = WatchedStderr(run)
    monkeypatch.setattr("sys.stderr", err)
    main(["--output", str(run), *ARGS])
    monkeypatch.undo(); capsys.readouterr()
    return [(l, n) for l, n in err.seen if l.startswith("looprl.train: update ")]

def assert_each_line_as_its_update_finishes(seen: list[tuple[str, int]]):
    assert [l.split(" · ")[0] for l, _ in seen] == [f"looprl.train: update {u} ({u + 1}/4)" for u in range(4)], seen
    # update u's line is written when u + 1 updates exist: after it, before update u + 1 writes its rollouts
    assert [n for _, n in seen] == [1, 2, 3, 4], seen

def test_each_update_line_is_written_as_the_update_finishes(monkeypatch, capsys, tmp_path):
    assert_each_line_as_its_update_finishes(lines_as_they_came(monkeypatch, capsys, tmp_path / "run"))

def test_twin_lines_held_back_until_the_end_fail_the_check(monkeypatch, capsys, tmp_path):
    "The same run with the lines kept until after the last update: the check above sees it and fails."
    held, real_say = [], progress.Progress.say
    monkeypatch.setattr(progress.Progress, "say", lambda self, text: held.append((self, text)))
    real_finished = progress.Progress.finished
    def finished(self, line):
        real_finished(self, line)
        if line["update"] + 1 == self.updates.stop:
            for p, text in held: real_say(p, text)
    monkeypatch.setattr(progress.Progress, "finished", finished)
    seen = lines_as_they_came(monkeypatch, capsys, tmp_path / "run")
    with pytest.raises(AssertionError): assert_each_line_as_its_update_finishes(seen)
    assert [n for _, n in seen] == [4, 4, 4, 4]        # every line printed, all once the run was over

def test_said_lines_drop_what_a_run_says_as_it_goes_and_keep_its_failure():
    from conftest import said_lines
    err = ("looprl.train: update 0 (1/5) · reward_mean 0.500 · 1.0 s · ETA 4.0 s\n"
           "looprl.train: warning: no learning signal: every completion's reward was equal in 5 updates in a row\n"
           "looprl.train: update 1: 4 consecutive optimizer steps skipped; stopping\n")
    assert said_lines(err) == ["looprl.train: update 1: 4 consecutive optimizer steps skipped; stopping"]
