"""The package's layout rules, checked on its source: no import cycles (function-level imports included), no import from a
higher layer, only the commands and the face at the top, no module over 400 lines, no private name imported across modules,
and no family name outside the family's own module. Each check is first shown to fail on a small package built to break it.
Last, the names modules had before the layout by layer still import the same modules, with a
warning, and nothing of looprl, its README or its chapters uses them. Every chapter with code stores at least one
output that shows what it does."""
import ast, importlib, json, re, subprocess, sys
import pytest
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

LAYERS = ("core", "model", "rollout", "training", "tasks", "run")   # bottom to top; commands and face above
COMMANDS = {"train", "compare", "eval", "plots", "verify", "inspect", "make_tiny", "warmstart", "bench"}
FACE = {"testing"}                                          # with __init__: the package face (the test oracles are public)

def layer_of(module: str) -> int:
    "0 for core ... 5 for run; 6 for the package root, its commands and its face."
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else len(LAYERS)

def upward_imports(root: Path) -> list[str]:
    "Imports of a module from a higher layer (the package root itself, for its version, aside)."
    return sorted(f"{m} imports {t}" for m, pairs in imports(root).items() for t, _ in pairs
                  if t != root.name and layer_of(t) > layer_of(m))

def top_level_strays(root: Path) -> list[str]:
    "Top-level modules and packages that are neither a layer, a command nor the face."
    names = {p.stem for p in root.glob("*.py")} | {p.name for p in root.iterdir() if (p / "__init__.py").exists()}
    return sorted(names - set(LAYERS) - COMMANDS - FACE - {"__init__", "_modidx"})

def long_modules(root: Path, limit: int = 400) -> list[str]:
    return sorted(f"{m}: {len(f.read_text().splitlines())} lines" for m, f in modules(root).items()
                  if len(f.read_text().splitlines()) > limit)

def long_lines(root: Path, limit: int = 120) -> list[str]:
    "Lines over `limit` characters, but nbdev's generated `__all__` (wrapped at 120 after its `__all__ = ` prefix)."
    return [f"{m}:{i}: {len(line)} characters" for m, f in sorted(modules(root).items())
            for i, line in enumerate(f.read_text().splitlines(), 1) if len(line) > limit and not line.startswith("__all__ = ")]

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
    layered = make_package(tmp_path / "layered", {"__init__.py": "", "train.py": "from pkg.run import loop\n", "notes.py": "",
                                                  "core/__init__.py": "", "core/state.py": "def f():\n    from pkg.run.loop import g\n",
                                                  "run/__init__.py": "", "run/loop.py": "from ..core import state\n" + "x = 1\n" * 401})
    assert upward_imports(layered) == ["pkg.core.state imports pkg.run.loop"]   # down (run → core, train → run) is fine
    assert top_level_strays(layered) == ["notes"]
    assert long_modules(layered) == ["pkg.run.loop: 402 lines"]
    wide = make_package(tmp_path / "wide", {"__init__.py": "__all__ = ['" + "a" * 130 + "']\n", "w.py": "x = 1  # " + "w" * 120 + "\n"})
    assert long_lines(wide) == ["pkg.w:1: 129 characters"]

def test_looprl_has_no_import_cycle():
    assert import_cycles(PACKAGE) == []

def test_looprl_imports_no_private_name_across_modules():
    assert private_imports(PACKAGE) == []

def test_no_family_name_outside_the_family_module():
    assert family_names_outside(PACKAGE, "looprl.model.families.huginn") == []

def test_the_sabotage_switch_is_read_in_one_module():
    "The restore gate: only looprl.core.state names LOOPRL_SKIP_RESTORE; every learner and the loop go through state.restore."
    assert modules_reading(PACKAGE, "LOOPRL_SKIP_RESTORE") == ["looprl.core.state"]

def test_looprl_imports_nothing_from_a_higher_layer():
    assert upward_imports(PACKAGE) == []

def test_looprl_top_level_holds_only_the_commands_and_the_face():
    assert top_level_strays(PACKAGE) == []

def test_no_module_is_over_400_lines():
    assert long_modules(PACKAGE) == []

def test_no_line_is_over_120_characters():
    assert long_lines(PACKAGE) == []

def imports_within(root: Path, module: str, layer: str) -> list[str]:
    "The modules of `layer` (say `pkg.run`) that `module` imports, at any depth."
    return sorted({t for t, _ in imports(root)[module] if t.startswith(layer + ".")
                   and t != module})

def test_the_options_check_catches_an_import_from_above(tmp_path):
    options = "from .logs import X\ndef f():\n    from .workers import T\n"
    root = make_package(tmp_path, {"__init__.py": "", "run/__init__.py": "", "run/logs.py": "",
                                   "run/options.py": options, "run/workers.py": ""})
    assert imports_within(root, "pkg.run.options", "pkg.run") == ["pkg.run.logs", "pkg.run.workers"]

def test_the_settings_sit_at_the_bottom_of_the_run_layer():
    "`looprl.run.options` imports no worker, placement or pipeline: of its layer, only the logs."
    assert imports_within(PACKAGE, "looprl.run.options", "looprl.run") == ["looprl.run.logs"]

def test_each_placement_rule_is_stated_in_the_placement_module():
    "A rule's message is written once, in `looprl.run.placement`; `prepare` checks from there."
    nccl = ("--transport nccl: needs --device cuda and Ray placing the workers on two GPUs "
            "(not --workers local)")
    assert modules_reading(PACKAGE, nccl) == ["looprl.run.placement"]
    rule = ("looprl.run.placement", "placement_refusal")
    users = [m for m, pairs in imports(PACKAGE).items() if rule in pairs]
    assert users == ["looprl.run.prepare"], users          # and Placement, in the module itself

def moved(name: str, old: set[str]) -> bool:
    "Whether module `name` is, or lies under, one of the `old` module names."
    return any(name == o or name.startswith(o + ".") for o in old)

def old_names_used(root: Path, old: set[str], exempt=frozenset(), kept=frozenset()) -> list[str]:
    """Where modules of the package at `root` (but those in `exempt`) import an old module name,
    or hold a string that is one (`'pkg.rewards'`) or a reward spec (`'pkg.rewards:f'`); the
    strings in `kept` aside."""
    hits = []
    for m, pairs in imports(root).items():
        if m in exempt: continue
        hits += [f"{m} imports {t}" for t, _ in sorted(pairs) if moved(t, old)]
        strings = [n.value for n in ast.walk(ast.parse(modules(root)[m].read_text()))
                   if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        hits += [f"{m} names {s!r}" for s in strings
                 if moved(s.split(":")[0], old) and s not in kept]
    return hits

def old_names_in_text(files: list[Path], old: set[str]) -> list[str]:
    """Lines of `files` (the README, the chapters) that name an old module. `looprl.families`
    alone is also the name of the families' entry-point group, which keeps it."""
    names = "|".join(re.escape(o) for o in sorted(old, key=len, reverse=True))
    module = re.compile(rf"(?<![\w.])({names})(?![\w])")
    hits = []
    for f in files:
        for i, line in enumerate(f.read_text().splitlines(), 1):
            for h in module.finditer(line):
                child = line[h.end():].startswith(".")
                group = h.group(1) == "looprl.families" and not child and "import" not in line
                if not group: hits.append(f"{f.name}:{i}: {h.group(1)}")
    return hits

def test_the_old_name_checks_catch_what_they_guard(tmp_path):
    root = make_package(tmp_path, {
        "__init__.py": "", "run/__init__.py": "", "run/loop.py": "from ..rewards import f\n",
        "tasks/__init__.py": "", "tasks/rewards.py": "", "face.py": "OLD = 'pkg.rewards'\n",
        "opts.py": "import pkg.tasks.rewards\nREWARD = 'pkg.rewards:f'\nG = 'pkg.rewards'\n"})
    assert old_names_used(root, {"pkg.rewards"}, exempt={"pkg.face"}, kept={"pkg.rewards"}) == [
        "pkg.opts names 'pkg.rewards:f'", "pkg.run.loop imports pkg.rewards"]
    everyone = {"pkg.face", "pkg.run.loop", "pkg.opts"}
    assert old_names_used(root, {"pkg.rewards"}, exempt=everyone) == []
    readme = tmp_path / "README.md"
    readme.write_text("`looprl.rewards:f`, `looprl.tasks.rewards`, `looprl.families` entry point\n"
                      "from looprl.families.huginn import FAMILY; python -m looprl.data\n")
    old = {"looprl.rewards", "looprl.families", "looprl.data"}
    assert old_names_in_text([readme], old) == [
        "README.md:1: looprl.rewards", "README.md:2: looprl.families", "README.md:2: looprl.data"]

def test_no_module_of_the_package_uses_an_old_name():
    "Old names live on in the import hook (`looprl/__init__.py`) and the contracts' reward upgrade."
    import looprl
    # the entry-point group `looprl.families`: a name of the plugin interface, not a module
    used = old_names_used(PACKAGE, set(looprl.MOVED), exempt={"looprl"}, kept={"looprl.families"})
    assert used == ["looprl.core.state names 'looprl.rewards'",
                    "looprl.core.state names 'looprl.run.rewards'"], used

def test_the_readme_and_the_chapters_use_no_old_name():
    import looprl
    # but the run state's chapter, where the contracts' reward upgrade shows its old names
    chapters = [f for f in sorted((PACKAGE.parent / "nbs").glob("*.ipynb")) if f.name != "00g_state.ipynb"]
    files = [PACKAGE.parent / "README.md", *chapters]
    assert old_names_in_text(files, set(looprl.MOVED)) == []

DEPRECATIONS = """
import importlib, json, sys, warnings
import looprl
if sys.argv[1] == "silent": looprl.warnings = type("Quiet", (), {"warn": lambda *a, **k: None})
out = {}
for old, new in [*looprl.MOVED.items(), ("looprl.families.huginn", "looprl.model.families.huginn")]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    out[old] = dict(same=module is importlib.import_module(new), spec=module.__spec__.name,
                    warned=[(str(w.message), w.category.__name__, w.filename) for w in caught])
print(json.dumps(out))
"""

def deprecation_faults(script: Path, mode: str) -> list[str]:
    """What is wrong with each old name imported in a fresh process: not the module itself, or no
    warning, raised where it was imported, that names the new module and the removal date."""
    import looprl
    r = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True,
                       cwd=PACKAGE.parent)
    assert r.returncode == 0, r.stderr
    faults = []
    for old, got in json.loads(r.stdout).items():
        new = looprl.moved_name(old)
        if not got["same"] or got["spec"] != new: faults.append(f"{old}: not the module {new}")
        says = [m for m, kind, where in got["warned"] if kind == "DeprecationWarning"
                and where == str(script) and old in m and new in m and looprl.REMOVAL_DATE in m]
        if not says: faults.append(f"{old}: no warning naming {new} and {looprl.REMOVAL_DATE}")
    return faults

def test_old_names_import_the_same_module_with_a_deprecation_warning(tmp_path):
    "`looprl.rewards`, `looprl.run.data`, `python -m looprl.data`...: the module, and a warning."
    import looprl
    script = tmp_path / "old_names.py"; script.write_text(DEPRECATIONS)
    assert deprecation_faults(script, "as shipped") == []
    # twin: a hook that stays silent is caught, once per name
    assert len(deprecation_faults(script, "silent")) == len(looprl.MOVED) + 1
    for command in ("looprl.tasks.data", "looprl.data"):
        r = subprocess.run([sys.executable, "-m", command, "--help"], capture_output=True,
                           text=True, cwd=PACKAGE.parent)
        assert r.returncode == 0 and r.stdout.startswith("usage: python -m looprl.tasks.data"), r.stderr
        warned = "DeprecationWarning: Old module name looprl.data: import looprl.tasks.data"
        assert (warned in r.stderr) == (command == "looprl.data"), r.stderr
    from looprl.tasks.rewards import even_token_share
    from looprl.tasks.reward_specs import load_reward
    with pytest.warns(DeprecationWarning, match="looprl.run.rewards: import looprl.tasks.rewards"):
        assert load_reward("looprl.run.rewards:even_token_share") is even_token_share
    # twin: without the face's finder the old names do not import
    code = ("import sys, looprl\n"
            "sys.meta_path[:] = [f for f in sys.meta_path\n"
            "                    if not isinstance(f, looprl.MovedModules)]\n"
            "import looprl.rewards")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent)
    assert r.returncode != 0 and "No module named 'looprl.rewards'" in r.stderr, r.stderr

# Chapters with code allowed to store no output, each with the reason (chapter -> why). Empty: every chapter shows.
EXEMPT_FROM_OUTPUTS: dict[str, str] = {}

def has_code(nb: dict) -> bool:
    "Whether a notebook has a code cell with a line that is not blank and not an nbdev directive (`#| ...`)."
    return any(line.strip() and not line.lstrip().startswith("#|")
               for c in nb["cells"] if c["cell_type"] == "code" for line in "".join(c["source"]).splitlines())

def stores_output(nb: dict) -> bool: return any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")

def chapters_without_outputs(nbs: Path, exempt=frozenset()) -> list[str]:
    "The chapters in `nbs` with code that store no output in any cell, but those named in `exempt`."
    return [f.name for f in sorted(nbs.glob("*.ipynb")) if f.name not in exempt
            and has_code(nb := json.loads(f.read_text())) and not stores_output(nb)]

def test_the_output_check_catches_a_chapter_that_shows_nothing(tmp_path):
    def chapter(name, *cells):
        (tmp_path / name).write_text(json.dumps(dict(cells=[dict(cell_type=k, source=s, outputs=o, metadata={})
                                                            for k, s, o in cells])))
    code, directive, prose = "x = 1\nx", "#| default_exp a\n", "# A chapter"
    shown = [dict(output_type="execute_result", data={"text/plain": "1"}, metadata={}, execution_count=1)]
    chapter("a_silent.ipynb", ("code", directive, []), ("code", code, []))   # code, no output: flagged
    chapter("b_shown.ipynb", ("code", directive, []), ("code", code, shown))
    chapter("c_prose.ipynb", ("markdown", prose, []), ("code", directive, []))   # no code but a directive
    chapter("d_exempt.ipynb", ("code", code, []))
    assert chapters_without_outputs(tmp_path, exempt={"d_exempt.ipynb"}) == ["a_silent.ipynb"]
    assert chapters_without_outputs(tmp_path) == ["a_silent.ipynb", "d_exempt.ipynb"]

def test_every_chapter_with_code_stores_an_output():
    "A chapter shows what it does: a table, a figure, a `--help`, a small run (the exempt ones aside, for now)."
    assert chapters_without_outputs(PACKAGE.parent / "nbs", exempt=set(EXEMPT_FROM_OUTPUTS)) == []

def test_the_output_exemptions_are_still_needed():
    "Each exempt chapter exists and still stores no output: one that does now leaves EXEMPT_FROM_OUTPUTS."
    nbs = PACKAGE.parent / "nbs"
    missing = [n for n in EXEMPT_FROM_OUTPUTS if not (nbs / n).exists()]
    assert missing == [], f"no such chapter in nbs/, remove from EXEMPT_FROM_OUTPUTS: {missing}"
    shown = sorted(set(EXEMPT_FROM_OUTPUTS) - set(chapters_without_outputs(nbs)))
    assert shown == [], f"these chapters store outputs now, remove them from EXEMPT_FROM_OUTPUTS: {shown}"
