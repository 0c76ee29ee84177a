"""The documentation site lists every chapter: each notebook in nbs/ has its entry in nbs/sidebar.yml (the sidebar is
custom, so a notebook missing from it is missing from the site), and each entry names a notebook that exists."""
import json, re
from conftest import ROOT

def sidebar_entries(text: str) -> list[str]:
    return re.findall(r"^\s*-\s+(\S+\.ipynb)\s*$", text, flags=re.M)

def missing_and_dangling(nbs_dir, sidebar_text) -> tuple[set, set]:
    listed, present = set(sidebar_entries(sidebar_text)), {p.name for p in nbs_dir.glob("*.ipynb")}
    return present - listed, listed - present

def test_sidebar_lists_every_notebook():
    missing, dangling = missing_and_dangling(ROOT / "nbs", (ROOT / "nbs" / "sidebar.yml").read_text())
    assert not missing, f"nbs/sidebar.yml lacks {sorted(missing)}"
    assert not dangling, f"nbs/sidebar.yml names notebooks that do not exist: {sorted(dangling)}"

def test_a_missing_entry_is_caught():
    text = (ROOT / "nbs" / "sidebar.yml").read_text()
    first = sidebar_entries(text)[1]
    before, _ = missing_and_dangling(ROOT / "nbs", text)
    after, _ = missing_and_dangling(ROOT / "nbs", text.replace(f"- {first}\n", ""))
    assert after - before == {first}


SAVED_CELL = {"cell_type": "code", "id": "a1", "execution_count": 1, "source": ["print(1)"],
              "metadata": {"execution": {"iopub.execute_input": "2026-12-03T11:34:24.083975+00:00",
                                         "shell.execute_reply": "2026-12-03T11:34:24.085259+00:00", "total": 0.0013}},
              "outputs": [{"output_type": "stream", "name": "stdout", "text": ["1\n"]}]}

def saved_notebook(path):
    "A notebook as `nbdev-test --save` writes it: an output, and the run time as a number in metadata.execution.total."
    import json
    nb = {"cells": [SAVED_CELL], "metadata": {"kernelspec": {"display_name": "python3", "language": "python", "name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return path

def test_saved_notebooks_are_valid_after_stripping(tmp_path):
    """The docs workflow strips `metadata.execution.total` after `nbdev-test --save`: the notebook then passes the schema
    that nbconvert and Quarto check, with its output and the other execution fields kept. Before, it fails."""
    import subprocess, sys, nbformat, pytest
    (tmp_path / "sub").mkdir()
    nb = saved_notebook(tmp_path / "sub" / "a.ipynb")
    with pytest.raises(nbformat.ValidationError, match="is not of type 'string'"): nbformat.validate(nbformat.read(nb, as_version=4))
    r = subprocess.run([sys.executable, ROOT / ".github" / "scripts" / "strip_execution_total.py", tmp_path], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "strip_execution_total: 1 cells in 1 notebooks\n", r.stdout + r.stderr
    cell = nbformat.read(nb, as_version=4).cells[0]
    nbformat.validate(nbformat.read(nb, as_version=4))
    assert cell.outputs[0].text == "1\n" and set(cell.metadata.execution) == {"iopub.execute_input", "shell.execute_reply"}

def test_docs_workflow_strips_after_saving():
    "The docs workflow runs the strip step after `nbdev-test --save` and before building the site."
    text = (ROOT / ".github" / "workflows" / "docs.yml").read_text()
    save, strip, build = (text.find(s) for s in ("nbdev-test --n-workers 2 --save", "strip_execution_total.py", "nbdev-docs"))
    assert -1 < save < strip < build, (save, strip, build)


# The results chapter and the tutorials are committed with what they show: their printed outputs and, for the results
# chapter, its figures (the learning curves, the resume-equality runs, the decode timing).
SHOWN = {"90_results.ipynb": 3, "t1_grpo_tutorial.ipynb": 0, "t2_new_family.ipynb": 0, "t3_reasoning_gym.ipynb": 0}   # notebook → figures at least

def shown(nb: dict) -> tuple[int, int, int]:
    "(code cells, code cells with an output, image outputs) of a notebook."
    code = [c for c in nb["cells"] if c["cell_type"] == "code" and c["source"]]
    return len(code), sum(bool(c.get("outputs")) for c in code), sum("image/png" in o.get("data", {}) for c in code for o in c.get("outputs", []))

def missing_outputs(nbs_dir, wanted: dict) -> list[str]:
    out = []
    for name, figures in wanted.items():
        code, with_output, images = shown(json.loads((nbs_dir / name).read_text()))
        if with_output < code // 3: out.append(f"{name}: {with_output} of {code} code cells have an output")
        if images < figures: out.append(f"{name}: {images} figures, {figures} expected")
    return out

def test_results_and_tutorials_carry_their_outputs():
    assert missing_outputs(ROOT / "nbs", SHOWN) == []

def test_a_notebook_without_outputs_is_caught(tmp_path):
    for name in SHOWN:
        nb = json.loads((ROOT / "nbs" / name).read_text())
        for c in nb["cells"]:
            if c["cell_type"] == "code": c["outputs"] = []
        (tmp_path / name).write_text(json.dumps(nb))
    assert len(missing_outputs(tmp_path, SHOWN)) == len(SHOWN) + 1      # each without outputs, the results without figures
