"""looprl: reinforcement learning on looped (depth-recurrent) language models.

The package is laid out by layer, each importing only the layers below it: `core`, `model`, `rollout`, `training`,
`tasks` and `run`. The modules at the top are the commands users type (`python -m looprl.train`, ...) and `testing`, the
test oracles. A module's name from before that layout (`looprl.rewards`, `looprl.registry`, ...) still imports it."""
__version__ = "0.1.0"

import importlib, importlib.abc, importlib.util, sys

LAYERS = {"core": "atomic cli precision state digest gpu_digest",
          "model": "config registry models kernels latents hf megatron megatron_model families",
          "rollout": "sampling records exits publication engine vllm_engine vllm_plugin engines",
          "training": "objectives trainer distributed megatron_trainer",
          "run": "options loop workers pipeline plan logs", "tasks": "data rewards"}
MOVED = {f"{__name__}.{m}": f"{__name__}.{layer}.{m}" for layer, ms in LAYERS.items() for m in ms.split()}
MOVED |= {f"{__name__}.run.{m}": f"{__name__}.tasks.{m}" for m in "data tasks answers rewards reward_specs".split()}

def moved_name(name: str) -> str | None:
    "The module's name in the layered package, for a name (or a submodule of a name) from before it; else None."
    for top in (".".join(name.split(".")[:3]), ".".join(name.split(".")[:2])):
        if top in MOVED: return MOVED[top] + name[len(top):]
    return None

class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    "Imports an old module name as the module itself (one object under both names); `python -m` runs it as __main__."
    def __init__(self): self.specs = {}
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if moved_name(name) else None
    def create_module(self, spec):
        module = importlib.import_module(moved_name(spec.name))
        self.specs[module.__name__] = module.__spec__
        return module
    def exec_module(self, module): module.__spec__ = self.specs[module.__name__]   # importing set the alias spec on it
    def get_code(self, name):
        run = f"import runpy; runpy.run_module({moved_name(name)!r}, run_name='__main__', alter_sys=True)"
        return compile(run, name, "exec")

# first, before the path finder: an old child name (looprl.families.huginn) imports the one module too
if not any(isinstance(f, MovedModules) for f in sys.meta_path): sys.meta_path.insert(0, MovedModules())

from .model import families  # registers the shipped model families (looprl.model.registry)
