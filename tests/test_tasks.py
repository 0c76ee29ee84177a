"""`python -m looprl.tasks.data <task> --n N --seed S --out FILE.jsonl`: rows the loader reads and the math reward grades (the label
itself earns 1, a wrong number 0), train and held-out files that share no question whatever their seeds, and bad input as
one line with exit status 2 and the output file as it was (in a fresh process: tests/test_cli.py). Skipped where reasoning-gym is not installed (the `tasks` and
`dev` extras have it)."""
from fractions import Fraction
import pytest
from conftest import run_cli

pytest.importorskip("reasoning_gym", reason="reasoning-gym is not installed: pip install -e '.[tasks]'")
from looprl.tasks.data import load_prompts
from looprl.tasks.rewards import math_reward
from looprl.tasks import tasks
from looprl.tasks.tasks import main, split_of, task_rows


def test_written_rows_are_graded_and_splits_disjoint(tmp_path):
    train, heldout = tmp_path / "train.jsonl", tmp_path / "heldout.jsonl"
    r = run_cli("looprl.tasks.data", "gsm_symbolic", "--n", "24", "--seed", "0", "--out", train)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.strip() == f"{train}: 24 train questions of gsm_symbolic (seed 0)"
    main(["gsm_symbolic", "--n", "8", "--seed", "0", "--split", "heldout", "--out", str(heldout)])
    rows, held = load_prompts(train), load_prompts(heldout)
    assert rows == task_rows("gsm_symbolic", 24, seed=0)                         # the same seed, the same rows
    assert len({r["prompt"] for r in rows}) == 24 and len(held) == 8
    for row in rows + held:
        assert math_reward(row["label"], row["label"]) == 1.0
        assert math_reward(str(Fraction(row["label"]) + 1), row["label"]) == 0.0
        assert math_reward(f"The answer is \\boxed{{{row['label']}}}.", row["label"]) == 1.0
    assert all(split_of("gsm_symbolic", r["prompt"]) == "heldout" for r in held)
    other = task_rows("gsm_symbolic", 24, seed=1) + task_rows("gsm_symbolic", 8, seed=5, split="heldout")
    assert not {r["prompt"] for r in rows + other if r["split"] == "train"} & {r["prompt"] for r in held + other if r["split"] == "heldout"}
    assert {r["prompt"] for r in other[:24]} != {r["prompt"] for r in rows}      # another seed, other questions


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    out = tmp_path / "rows.jsonl"; out.write_text("kept\n")
    cases = {("sudoku", "--n", "4", "--out", str(out)): "unknown task 'sudoku'; one of: aiw, basic_arithmetic",
             ("chain_sum", "--n", "0", "--out", str(out)): "argument --n: must be an integer ≥ 1, got '0'",
             ("chain_sum", "--n", "4", "--seed", "x", "--out", str(out)): "argument --seed: must be an integer ≥ 0, got 'x'",
             ("chain_sum", "--n", "4"): "the following arguments are required: --out",
             ("chain_sum", "--n", "4", "--config", "terms", "--out", str(out)): "argument --config: must be KEY=VALUE, got 'terms'",
             ("chain_sum", "--n", "4", "--config", "terms=2", "--out", str(out)): "chain_sum --config {'terms': 2}: ",
             ("chain_sum", "--n", "4", "--out", str(tmp_path / "no" / "x.jsonl")): f"no folder {tmp_path / 'no'}",
             ("gcd", "--n", "3", "--out", str(out)): "gcd: only 1 distinct train questions among the first 184 of seed 0; ask for fewer"}
    same = next(q for q in (f"{a} + 1 =" for a in range(99)) if split_of("gcd", q) == "train")
    one_question = lambda task, size, seed, config: [dict(question=same, answer=1)] * size      # a task of one question
    for args, says in cases.items():
        if args[0] == "gcd": monkeypatch.setattr(tasks, "_generator", one_question)
        with pytest.raises(SystemExit) as e: main(list(args))
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.startswith("looprl.tasks.data: ") and says in err and err.count("\n") == 1, (args, err)
    assert out.read_text() == "kept\n" and sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl"]
