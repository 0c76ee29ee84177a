"""looprl: reinforcement learning on looped (depth-recurrent) language models.

The package is laid out by layer, each importing only the layers below it: `core`, `model`,
`rollout`, `training`, `tasks` and `run`. The modules at the top are the commands users type
(`python -m looprl.train`, ...) and `testing`, the test oracles.

A module name from before that layout (a key of `MOVED`) still imports the module until
`REMOVAL_DATE`, with a `DeprecationWarning` that names the new module. Nothing in looprl uses
the old names."""
__version__ = "0.1.0"

import importlib, importlib.abc, importlib.util, sys, warnings

REMOVAL_DATE = "2027-06-01"   # then the old names stop importing: the hook below goes
LAYERS = {"core": "atomic cli precision state digest gpu_digest",
          "model": "config registry models kernels latents hf megatron megatron_model families",
          "rollout": "sampling records exits publication engine vllm_engine vllm_plugin engines",
          "training": "objectives trainer distributed megatron_trainer",
          "run": "options loop workers pipeline plan logs", "tasks": "data rewards"}
MOVED = {f"{__name__}.{m}": f"{__name__}.{layer}.{m}" for layer, ms in LAYERS.items() for m in ms.split()}
TASKS = "data tasks answers rewards reward_specs".split()      # in run/ until the tasks layer
MOVED |= {f"{__name__}.run.{m}": f"{__name__}.tasks.{m}" for m in TASKS}

def moved_name(name: str) -> str | None:
    "The module's name today, for an old name (or a submodule of one); else None."
    for top in (".".join(name.split(".")[:3]), ".".join(name.split(".")[:2])):
        if top in MOVED: return MOVED[top] + name[len(top):]
    return None

def deprecation_message(name: str) -> str:
    return (f"Old module name {name}: import {moved_name(name)} instead; "
            f"the old name stops working on {REMOVAL_DATE}")

def _importer_level() -> int:
    """The `stacklevel` that points a warning raised in `create_module` at the import of the old
    name. Frames of `importlib` and of this file are passed over; `warnings` itself passes over
    those of the import machinery (`importlib._bootstrap`), so they are not counted."""
    frame, level = sys._getframe(2), 1
    while frame is not None:
        name = frame.f_code.co_filename
        if not ("importlib" in name and "_bootstrap" in name):
            level += 1
            if name not in (importlib.__file__, __file__): break
        frame = frame.f_back
    return level

class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module name as the module itself (one object under both names) and warns
    that the name goes; `python -m` with an old name runs the module as __main__."""
    def __init__(self): self.specs = {}
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if moved_name(name) else None
    def create_module(self, spec):
        warning = deprecation_message(spec.name)
        warnings.warn(warning, DeprecationWarning, stacklevel=_importer_level())
        module = importlib.import_module(moved_name(spec.name))
        self.specs[module.__name__] = module.__spec__
        return module
    def exec_module(self, module):
        module.__spec__ = self.specs[module.__name__]   # importing set the alias spec on it
    def get_code(self, name):
        warn = f"warnings.warn({deprecation_message(name)!r}, DeprecationWarning)"
        run = f"runpy.run_module({moved_name(name)!r}, run_name='__main__', alter_sys=True)"
        return compile(f"import runpy, warnings; {warn}; {run}", name, "exec")

# first, before the path finder: an old child name (looprl.families.huginn) imports the one module
if not any(isinstance(f, MovedModules) for f in sys.meta_path): sys.meta_path.insert(0, MovedModules())

# The shipped model families register on the registry's first use (looprl.model.registry.load_shipped), not here:
# `import looprl` stays free of torch, so `python -m looprl.<command> --help` answers before any model code loads.
