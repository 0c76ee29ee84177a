"Several trainer processes (gloo, CPU): FSDP2 data parallelism, the FP16 overflow rule, DTensor TP=2, publication digests."
import dataclasses, math, sys
import pytest, torch, torch.distributed as dist
from conftest import ROOT
from looprl.model.config import load_config, tiny_config
from looprl.training.distributed import shard_model, build_sharded_trainer, full_tensors, tensor_parallel, LOOPED_PLANS
from looprl.training.ranks import RankError, run_ranks
from looprl.testing import count_collectives, tensor_parallel_replay, single_replay
from looprl.model.hf import read_tensors, load_into, export_tensors, state_digest
from looprl.make_tiny import make_tiny_checkpoint
from looprl.model.models import build_model, init_weights
from looprl.training.trainer import build_trainer
from looprl.training.settings import TrainSettings
from looprl.rollout.records import Rollout

torch.set_num_threads(1)

def rollouts(n_updates=3, n=8, seed=0):
    "Fixed rollouts of 8 completions (4 GRPO groups of 2) with mixed rewards and lengths."
    g, out = torch.Generator().manual_seed(seed), []
    for u in range(n_updates):
        P = [[1] + torch.randint(3, 1000, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g).tolist() for _ in range(n)]
        R = [torch.randint(3, 1000, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g).tolist() for _ in range(n)]
        out.append(Rollout(prompt_ids=P, response_ids=R, logprobs=[(-3 - torch.rand(len(r), generator=g)).tolist() for r in R],
                           seeds=[100 * u + i for i in range(n)], rewards=[float(i % 3 == 0) for i in range(n)],
                           temperature=0.8))
    return out

@pytest.fixture(scope="module")
def huginn(tmp_path_factory):
    return make_tiny_checkpoint("huginn_raven", tmp_path_factory.mktemp("dist") / "huginn", seed=3)

def max_diff(a: dict, b: dict) -> float:
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)

def metric_diff(ms_a, ms_b, keys=("loss", "grad_norm", "value_loss", "critic_grad_norm")) -> float:
    return max(abs(a[k] - b[k]) for a, b in zip(ms_a, ms_b) for k in keys if k in a)

# ---- process-group helper

def _sum_ranks(rank, world, x):
    t = torch.tensor([float(rank + x)]); dist.all_reduce(t); return float(t)

def _second_rank_fails(rank, world):
    if rank == 1: raise ValueError("rank one breaks on purpose")
    dist.barrier(); return rank

def test_run_ranks_returns_each_rank_and_names_the_failing_one():
    test = run_ranks(_sum_ranks, 2, 10)
    assert test == [21.0, 21.0]                    # 10 + 11 on both ranks: the reduction ran
    with pytest.raises(RankError, match="rank 1 of 2 failed: ValueError: rank one breaks on purpose"):
        run_ranks(_second_rank_fails, 2, timeout=120)

class _RaySummer:
    "A Ray rank's object: a sum over ranks, and a call that breaks on rank 1 while rank 0 waits in a barrier."
    def __init__(self, rank, world): self.rank = rank
    def total(self, x):
        t = torch.tensor([float(self.rank + x)]); dist.all_reduce(t); return float(t)
    def break_on_one(self):
        if self.rank == 1: raise ValueError("rank one breaks on purpose")
        dist.barrier()

def test_ray_rank_group_runs_calls_and_names_the_failing_rank():
    ray = pytest.importorskip("ray")
    from looprl.training.ranks import RayRankGroup
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])      # the actors cannot import this test module
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        g = RayRankGroup(_RaySummer, 2, num_cpus=0.5, grace=2)
        assert g.call("total", 10) == [21.0, 21.0]                    # 10 + 11 on both ranks: the reduction ran
        with pytest.raises(RankError, match="trainer rank 1 of 2 failed: ValueError: rank one breaks on purpose"):
            g.call("break_on_one")
        with pytest.raises(RankError, match="was stopped"): g.call("total", 1)
    finally: ray.shutdown()

# ---- FSDP2 plans for the looped core

def _plan_counts(rank, world):
    out = {}
    for plan in LOOPED_PLANS:
        m = shard_model(init_weights(build_model(tiny_config("huginn_raven")), seed=0), looped=plan)
        assert m.lm_head.weight is m.transformer.wte.weight              # the tied head stays one parameter
        from looprl.training.trainer import SequenceBatch, response_logprobs
        b = SequenceBatch.from_rollout([[1, 5, 6], [1, 7]], [[8, 9, 2], [4]], seeds=[11, 12], temperature=0.8)
        with count_collectives() as n:
            (response_logprobs(m, b, 0.8) * b.mask).sum().backward()
        out[plan] = (dict(n), {k: p.grad.full_tensor() for k, p in m.named_parameters() if p.grad is not None})
    return out

def test_looped_plans_gather_counts():
    res = run_ranks(_plan_counts, 2)[0]
    test = {p: (c["all_gather"], c["reduce_scatter"]) for p, (c, _) in res.items()}
    assert test == {"root": (9, 5), "group": (13, 6), "blocks": (49, 10)}, test
    g = {p: grads for p, (_, grads) in res.items()}
    assert max_diff(g["root"], g["blocks"]) < 1e-6 and max_diff(g["group"], g["blocks"]) < 1e-6

# ---- data parallelism equals one process

def _dp_rank(rank, world, ck, s, rolls, sabotage=None):
    tr = build_sharded_trainer(ck, s)
    if sabotage == "mean":                      # FSDP2's default: gradients averaged over ranks instead of summed
        for m in tr.actor.model.modules():
            if hasattr(m, "set_gradient_divide_factor"): m.set_gradient_divide_factor(float(world))
    if sabotage == "share" and rank == 1: tr.rank = 0          # rank 1 runs rank 0's micro-batches
    if sabotage == "seed" and rank == 1:                         # rank 1 starts from other weights (its shards differ)
        with torch.no_grad():
            for p in tr.actor.model.parameters(): p.to_local().add_(1e-3)
    ms = [tr.train(r, group_size=2)["metrics"] for r in rolls]
    return ms, tr.publication()[0]

def _reference(ck, s, rolls):
    tr = build_trainer(ck, s)
    return [tr.train(r, group_size=2)["metrics"] for r in rolls], export_tensors(tr.actor.model)

@pytest.mark.parametrize("alg", ["grpo", "ppo"])
def test_two_processes_equal_one(huginn, alg):
    s, rolls = TrainSettings(algorithm=alg, optimizer="adamw", lr=1e-3, micro_batch_size=2), rollouts()
    ref_m, ref_t = _reference(huginn, s, rolls)
    init = read_tensors(huginn)
    assert max(float((ref_t[k] - init[k]).abs().max()) for k in ref_t) > 1e-3        # the weights move
    (m0, t0), (m1, t1) = run_ranks(_dp_rank, 2, huginn, s, rolls)
    test = (max_diff(ref_t, t0), metric_diff(ref_m, m0))
    print(f"{alg}: largest parameter difference {test[0]:.3g}, largest loss/grad-norm difference {test[1]:.3g}")
    assert test[0] < 2e-6 and test[1] < 5e-6, test
    assert m0 == m1 and t1 == {}                                     # same metrics on every rank; rank 0 publishes
    if alg == "grpo":
        ref1_m, ref1_t = _reference(huginn, s, rolls[:1])              # twins: one update is enough to break equality
        for sabotage in ("mean", "share", "seed"):
            (sm, st), _ = run_ranks(_dp_rank, 2, huginn, s, rolls[:1], sabotage)
            assert max(max_diff(ref1_t, st), metric_diff(ref1_m, sm)) > 1e-4, sabotage

def test_micro_batches_that_do_not_split_are_refused(huginn):
    s = TrainSettings(algorithm="grpo", micro_batch_size=3, minibatches=1)   # 8 rows → 3 micro-batches over 2 ranks
    with pytest.raises(RankError, match="micro_batch_size: one optimizer step makes 3 micro-batches"):
        run_ranks(_dp_rank, 2, huginn, s, rollouts(1))

# ---- fp16: an overflow on one rank skips the step on every rank

def _deciding_alone(step):
    "The twin of the step: every all-reduce inside it does nothing, so each rank decides a skip from its own shards."
    def alone(*a):
        real, dist.all_reduce = dist.all_reduce, lambda *a, **k: None
        try: return step(*a)
        finally: dist.all_reduce = real
    return alone

def _fp16_rank(rank, world, ck, rolls, sync):
    tr = build_sharded_trainer(ck, TrainSettings(algorithm="grpo", precision="fp16", optimizer="adamw", lr=1e-3, micro_batch_size=2, minibatches=1))
    step, out = tr.actor.step, []
    if not sync: step = _deciding_alone(step)
    def overflow_here(*a):                      # an inf in one gradient entry of rank 1's shard only
        if rank == 1: next(p for p in tr.actor.opt_params if p.grad is not None).grad.to_local().view(-1)[0] = math.inf
        return step(*a)
    for u, r in enumerate(rolls):
        before = full_tensors(tr.actor.model)
        tr.actor.step = overflow_here if u == 1 else step
        m = tr.train(r, group_size=2)["metrics"]
        after = full_tensors(tr.actor.model)
        out.append((m["skipped"], tr.actor.steps, None if rank else max_diff(before, after)))
    return out, tr.publication()[0]

def test_fp16_overflow_on_one_rank_skips_everywhere(huginn):
    rolls = rollouts()
    (r0, t0), (r1, _) = run_ranks(_fp16_rank, 2, huginn, rolls, True)
    assert [x[:2] for x in r0] == [x[:2] for x in r1] == [(0, 1), (1, 1), (0, 2)]
    assert r0[1][2] == 0 and r0[0][2] > 0 and r0[2][2] > 0                        # skipped: the weights stay; else they move
    one = build_trainer(huginn, TrainSettings(algorithm="grpo", precision="fp16", optimizer="adamw", lr=1e-3, micro_batch_size=2, minibatches=1))
    one.train(rolls[0], 2); one.train(rolls[2], 2)                               # the same two applied steps in one process
    print(f"fp16 two processes vs one: largest published difference {max_diff(export_tensors(one.actor.model), t0):.3g}")
    assert max_diff(export_tensors(one.actor.model), t0) < 2e-3                  # FP16 weights: within a few FP16 ulps
    (q0, _), (q1, _) = run_ranks(_fp16_rank, 2, huginn, rolls, False)            # twin: each rank decides alone
    assert [x[:2] for x in q0] != [x[:2] for x in q1]

# ---- tensor parallelism

def _tp_all(rank, world, rollout):
    out = {}
    for fam in ("huginn_raven", "ouro", "nanbeige"):
        cfg = tiny_config(fam)
        t = export_tensors(init_weights(build_model(cfg), seed=0, perturb_norms=True))
        out[fam] = tensor_parallel_replay(rank, world, cfg, t, rollout)
    return out

def test_tensor_parallel_equals_one_process():
    roll = rollouts(1)[0]
    res = run_ranks(_tp_all, 2, roll)
    for fam in ("huginn_raven", "ouro", "nanbeige"):
        lp, g = single_replay(init_weights(build_model(tiny_config(fam)), seed=0, perturb_norms=True), roll)
        (lp0, g0), (lp1, _) = res[0][fam], res[1][fam]
        scale = max(float(v.abs().max()) for v in g.values())
        test = (float((lp - lp0).abs().max()), max_diff(g, g0) / scale)
        print(f"TP=2 {fam}: forward {test[0]:.3g}, backward (relative to the largest gradient) {test[1]:.3g}")
        assert set(g) == set(g0) and torch.equal(lp0, lp1)
        assert test[0] < 1e-5 and test[1] < 1e-5, (fam, test)
        # twin: the gradients read in the TP layout, not the native one
        if fam == "huginn_raven":
            from looprl.training.distributed import interleave_rows
            k = "transformer.core_block.0.attn.Wqkv.weight"
            assert float((interleave_rows(g0[k], 3, 2) - g[k]).abs().max()) > 1e-3

# ---- tensor parallelism with activation checkpointing (--recompute)

def _tp_recompute(rank, world, rollout, families, sabotage=False):
    """Per (family, recompute): TP=2 replayed log-probs, whole gradients, and how many tensor-parallel module calls ran.
    `sabotage`: one module's output drifts in the calls after the forward (the recomputed ones)."""
    from torch.distributed.device_mesh import init_device_mesh
    from looprl.model.models import TensorParallel
    from looprl.training.trainer import SequenceBatch, response_logprobs
    b, out = SequenceBatch.from_rollout(rollout.prompt_ids, rollout.response_ids, rollout.seeds, temperature=rollout.temperature), {}
    for fam in families:
        cfg = tiny_config(fam)
        t = export_tensors(init_weights(build_model(cfg), seed=0, perturb_norms=True))
        for rec in (False, True):
            m = load_into(build_model(cfg), t, "tensors"); m.recompute = rec
            tensor_parallel(m, init_device_mesh("cpu", (world,)))
            calls, drifting = [0], [False]
            mods = [x for x in m.modules() if isinstance(x, TensorParallel) and x.tp_plan]
            for x in mods: x.register_forward_pre_hook(lambda *a: calls.__setitem__(0, calls[0] + 1))
            mods[0].register_forward_hook(lambda mod, a, o: o * 1.001 if drifting[0] else o)
            lp = response_logprobs(m, b, 0.8)
            drifting[0] = sabotage                 # from here on, a module runs only to recompute
            (lp * b.mask).sum().backward()
            out[fam, rec] = (lp.detach(), {n: p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
                                           for n, p in m.named_parameters() if p.grad is not None}, calls[0])
    return out

def test_tensor_parallel_with_recompute_equals_without():
    "TP=2 with per-block activation checkpointing replays and differentiates bit for bit as without it, for the three families."
    roll, fams = rollouts(1)[0], ("huginn_raven", "ouro", "nanbeige")
    res = run_ranks(_tp_recompute, 2, roll, fams)[0]
    for fam in fams:
        (lp0, g0, n0), (lp1, g1, n1) = res[fam, False], res[fam, True]
        assert n1 > n0 > 0, (fam, n0, n1)                         # the blocks ran again in the backward: recompute was on
        assert torch.equal(lp0, lp1) and set(g0) == set(g1) and all(torch.equal(g0[k], g1[k]) for k in g0), fam
    bad = run_ranks(_tp_recompute, 2, roll, fams[:1], True)[0]   # twin: a recomputed forward that drifts changes the gradients
    (lp0, g0, _), (lp1, g1, _) = bad[fams[0], False], bad[fams[0], True]
    assert max(float((g0[k] - g1[k]).abs().max()) for k in g0) > 0

# ---- publication digest from sharded weights

def _publish(rank, world, ck, perturb):
    from torch.distributed.device_mesh import init_device_mesh
    cfg, t = load_config(ck), read_tensors(ck)
    fsdp = shard_model(load_into(build_model(cfg), t, str(ck)))
    tp = tensor_parallel(load_into(build_model(cfg), t, str(ck)), init_device_mesh("cpu", (world,)))
    if perturb and rank == 1:
        with torch.no_grad(): fsdp.transformer.core_block[0].attn.proj.weight.to_local().view(-1)[0] += 1e-3
    d = lambda m, dtype=None: (lambda x: state_digest(x) if x else None)(full_tensors(m, dtype))
    return d(fsdp), d(fsdp, torch.float16), d(tp)

def test_publication_digest(huginn):
    m = load_into(build_model(load_config(huginn)), read_tensors(huginn), str(huginn))
    ref = state_digest(export_tensors(m)), state_digest(export_tensors(m, dtype=torch.float16))
    (fsdp, fsdp16, tp), rest = run_ranks(_publish, 2, huginn, False)
    assert (fsdp, fsdp16, tp) == (ref[0], ref[1], ref[0]) and rest == (None, None, None)
    (bad, _, _), _ = run_ranks(_publish, 2, huginn, True)       # one element of rank 1's shard changed
    assert bad != ref[0]


GROUP_AT_EXIT = r'''
import atexit, os, sys
import torch.distributed as dist
atexit.register(lambda: os.write(2, f"group open at exit: {dist.is_initialized()}\n".encode()))   # first registered: runs last
from looprl.training.ranks import join_group, leave_group, run_ranks

def rank_hook(rank, world):
    atexit.register(lambda: os.write(2, f"rank {rank} group open at exit: {dist.is_initialized()}\n".encode()))   # one write: ranks do not interleave
    return rank

if __name__ == "__main__":
    if sys.argv[1] == "ranks":
        assert run_ranks(rank_hook, 2) == [0, 1]
    else:
        store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, wait_for_workers=False)
        join_group(0, 1, "127.0.0.1", store.port)
        if sys.argv[1] == "twin": atexit.unregister(leave_group)          # the twin: nothing closes the group
'''

@pytest.mark.parametrize("case", ["one", "twin", "ranks"])
def test_process_groups_closed_at_exit(tmp_path, case):
    """A process that joined a group closes it before it ends (PyTorch otherwise warns that destroy_process_group() was
    not called; NCCL prints it at exit); so does each rank of a 2-process CPU (gloo) run. The twin, with the exit hook
    removed, ends with its group open."""
    import os, subprocess
    script = tmp_path / "group_at_exit.py"
    script.write_text(GROUP_AT_EXIT)
    r = subprocess.run([sys.executable, str(script), case], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])})
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    assert f"group open at exit: {case == 'twin'}" in lines, r.stderr[-3000:]
    if case == "ranks": assert {"rank 0 group open at exit: False", "rank 1 group open at exit: False"} <= set(lines), r.stderr[-3000:]
    assert "destroy_process_group() was not called" not in r.stderr
