"""The package's layout rules, checked on its source: no import cycles (function-level imports included), no private name
imported across modules, and no family name outside the family's own module. Each check is first shown to fail on a small
package built to break it."""
import ast, re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "looprl"

def modules(root: Path) -> dict[str, Path]:
    "Dotted module name → file, for every module of the package at `root` (the generated index excluded)."
    out = {}
    for f in sorted(root.rglob("*.py")):
        if f.name == "_modidx.py": continue
        parts = f.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out

def imports(root: Path) -> dict[str, set[tuple[str, str]]]:
    "Module → the (package module, imported name) pairs of every import statement in it, at any depth."
    mods, top = modules(root), root.name
    out = {m: set() for m in mods}
    for m, f in mods.items():
        pkg = m if f.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                out[m] |= {(a.name, "") for a in node.names if a.name.split(".")[0] == top}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level: base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([node.module] if node.module else []))
                if base.split(".")[0] != top: continue
                for a in node.names:
                    out[m].add((f"{base}.{a.name}", "") if f"{base}.{a.name}" in mods else (base, a.name))
    return out

def import_cycles(root: Path) -> list[list[str]]:
    "Every cycle a depth-first walk of the module import graph meets."
    graph = imports(root)
    edges = {m: {t for t, _ in pairs if t != m and t in graph} for m, pairs in graph.items()}
    cycles, state, stack = [], {}, []
    def walk(u):
        state[u] = 1; stack.append(u)
        for v in sorted(edges[u]):
            if state.get(v) == 1: cycles.append(stack[stack.index(v):] + [v])
            elif v not in state: walk(v)
        stack.pop(); state[u] = 2
    for m in sorted(edges):
        if m not in state: walk(m)
    return cycles

def private_imports(root: Path) -> list[str]:
    return sorted(f"{m} imports {n} from {t}" for m, pairs in imports(root).items() for t, n in pairs
                  if n.startswith("_") and not n.startswith("__") and t != m)

def family_names_outside(root: Path, owner: str) -> list[str]:
    "Lines outside the module `owner` that test for Huginn by name (docstrings and comments aside)."
    hits = []
    for m, f in modules(root).items():
        if m == owner: continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "is_huginn": hits.append(f"{f.name}:{node.lineno}: is_huginn")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "huginn_raven" in node.value:
                hits.append(f"{f.name}:{node.lineno}: {node.value[:40]!r}")
    docstrings = set()
    for m, f in modules(root).items():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and ast.get_docstring(node):
                docstrings.add((f.name, node.body[0].lineno))
    return [h for h in hits if (h.split(":")[0], int(h.split(":")[1])) not in docstrings]

def modules_reading(root: Path, text: str) -> list[str]:
    "Modules whose code (docstrings aside) holds the string constant `text`: where an environment variable is read."
    out = []
    for m, f in modules(root).items():
        consts = [n.value for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        if any(c == text for c in consts): out.append(m)
    return out

def make_package(tmp: Path, files: dict) -> Path:
    root = tmp / "pkg"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True); (root / name).write_text(text)
    return root

def test_the_checks_catch_what_they_guard(tmp_path):
    root = make_package(tmp_path, {"__init__.py": "", "a.py": "from .b import x\n", "b.py": "def f():\n    from pkg.a import _y\nx = 1\n",
                                   "fam.py": "NAME = 'huginn_raven'\n", "other.py": "def g(cfg): return cfg.is_huginn or cfg.family == 'huginn_raven'\n"})
    assert import_cycles(root) == [["pkg.a", "pkg.b", "pkg.a"]]           # a function-level import closes it
    assert private_imports(root) == ["pkg.b imports _y from pkg.a"]
    assert [h.split(": ")[1] for h in family_names_outside(root, "pkg.fam")] == ["is_huginn", "'huginn_raven'"]
    two = make_package(tmp_path / "two", {"__init__.py": "", "s.py": "V = 'LOOPRL_SKIP_RESTORE'\n",
                                          "t.py": "import os\nskip = os.environ.get('LOOPRL_SKIP_RESTORE')\n"})
    assert modules_reading(two, "LOOPRL_SKIP_RESTORE") == ["pkg.s", "pkg.t"]

def test_looprl_has_no_import_cycle():
    assert import_cycles(PACKAGE) == []

def test_looprl_imports_no_private_name_across_modules():
    assert private_imports(PACKAGE) == []

def test_no_family_name_outside_the_family_module():
    assert family_names_outside(PACKAGE, "looprl.families.huginn") == []

def test_the_sabotage_switch_is_read_in_one_module():
    "The restore gate: only looprl.state names LOOPRL_SKIP_RESTORE; every learner and the loop go through state.restore."
    assert modules_reading(PACKAGE, "LOOPRL_SKIP_RESTORE") == ["looprl.state"]
