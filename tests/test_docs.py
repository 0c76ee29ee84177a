"""The documentation site lists every chapter: each notebook in nbs/ has its entry in nbs/sidebar.yml (the sidebar is
custom, so a notebook missing from it is missing from the site), and each entry names a notebook that exists."""
import re
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
