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
