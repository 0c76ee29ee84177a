"""One engine serving requests at several depths on a GPU with CUDA graphs (looprl.rollout.depth_sampler.serve_depths):
each completion against an engine built at its depth, given the same requests in the same order, and the graphs
captured per depth. Prints one JSON object."""
import json, sys
from dataclasses import replace
import torch
from looprl.model.config import ASSETS
from looprl.rollout.engine import Engine
from looprl.rollout.records import Request

TINY, dev = ASSETS / "tiny-huginn", "cuda"
depths = (1, 8, None, 2, 8, 1, 2, 2, 8, None, 1, 8)
reqs = [Request([5, 6, 7, 8], seed=s, max_new_tokens=16, temperature=0.8, depth=d) for s, d in enumerate(depths)]
eng = Engine.from_checkpoint(TINY, max_depth=8, max_batch=16, device=dev, cuda_graphs=True)
mixed = eng.generate(reqs)
groups = {}
for i, r in enumerate(reqs): groups.setdefault(r.depth or eng.cfg.depth, []).append(i)
out = dict(device=torch.cuda.get_device_name(0), batching=eng.batching, own_depth=eng.cfg.depth, per_depth={})
for d, idx in sorted(groups.items()):
    ref = Engine.from_checkpoint(TINY, depth=d, max_batch=16, device=dev, cuda_graphs=True)
    comps = ref.generate([replace(reqs[i], depth=None) for i in idx])
    same = [mixed[i].tokens == c.tokens and mixed[i].logprobs == c.logprobs and mixed[i].trace == c.trace
            for i, c in zip(idx, comps)]
    out["per_depth"][d] = dict(requests=len(idx), equal=sum(same), prefill_depths=sorted({mixed[i].trace.prefill_depth
                                                                                            for i in idx}),
                               ref_replays=ref.stats["replays"])
out["engine_stats"] = eng.stats
out["graphs_per_depth"] = {d: sorted(g[0]) for d, g in eng._depth_graphs.items()} | {eng.cfg.depth: sorted(eng._graphs)}
print(json.dumps(out, indent=1))
sys.exit(0 if all(v["equal"] == v["requests"] for v in out["per_depth"].values()) else 1)
