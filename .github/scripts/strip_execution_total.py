"""Make notebooks saved by `nbdev-test --save` valid again: drop each cell's `metadata.execution.total`.

nbdev's runner records a cell's run time there as a number; the notebook schema allows only date-time strings in
`metadata.execution`, so `jupyter nbconvert` (and Quarto, through it) refuses the saved file. Outputs and the other
execution fields stay. Usage: python .github/scripts/strip_execution_total.py [NOTEBOOK_OR_DIR ...] (default: nbs)."""
import json, sys
from pathlib import Path


def strip(path: Path) -> int:
    "Drop `metadata.execution.total` from every cell of the notebook at `path`, rewriting it only if one was there; the count."
    nb = json.loads(path.read_text(encoding="utf-8"))
    n = 0
    for cell in nb.get("cells", []):
        ex = cell.get("metadata", {}).get("execution")
        if isinstance(ex, dict) and "total" in ex:
            del ex["total"]; n += 1
            if not ex: del cell["metadata"]["execution"]
    if n: path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return n


def main(args) -> None:
    paths = [Path(a) for a in args] or [Path("nbs")]
    nbs = [q for p in paths for q in (sorted(p.rglob("*.ipynb")) if p.is_dir() else [p])]
    print(f"strip_execution_total: {sum(map(strip, nbs))} cells in {len(nbs)} notebooks")


if __name__ == "__main__": main(sys.argv[1:])
