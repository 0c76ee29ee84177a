"""Selective recompute (`--recompute-every`) and compiled training blocks (`--compile-blocks`): what they change and what
they must not (the gradients), each with a twin that shows the comparison sees a change."""
import shutil
import pytest, torch
from looprl.model import models
from looprl.model.config import tiny_config
from looprl.model.models import build_model, init_weights
from looprl.core.state import upgrade_contract
from looprl.training.settings import TrainSettings

def _grads(m, seed=0, **attrs):
    "Gradients of a loss over one random batch (latents from `seed`) with the model's recompute/compile attributes set."
    for k, v in attrs.items(): setattr(m, k, v)
    m.zero_grad(set_to_none=True)
    ids = torch.randint(3, m.cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    h = m(ids, latents=m.sequence_states([seed, seed + 1], [12, 12], torch.float32, "cpu"))
    m.logits(h).logsumexp(-1).mean().backward()
    return {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}

@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return init_weights(build_model(tiny_config("huginn_raven")), seed=0)

def _counted(monkeypatch):
    "Count the block applications that go through activation checkpointing."
    calls, real = [], models.checkpoint
    monkeypatch.setattr(models, "checkpoint", lambda fn, *a, **k: calls.append(a[-1]) or real(fn, *a, **k))
    return calls

def test_recompute_every_keeps_gradients(tiny, monkeypatch):
    calls = _counted(monkeypatch)
    plain = _grads(tiny, recompute=False, recompute_every=1)
    planes = tiny.cfg.n_prelude + tiny.cfg.depth * tiny.cfg.n_core + tiny.cfg.n_coda
    assert calls == []
    for every in (1, 2, 3):
        calls.clear()
        g = _grads(tiny, recompute=True, recompute_every=every)
        assert calls == [p for p in range(planes) if p % every == 0], every      # which applications were recomputed
        assert g.keys() == plain.keys() and all(torch.equal(g[k], plain[k]) for k in g), every
    assert any(v.abs().sum() > 0 for v in plain.values())

def test_recompute_every_twin_sees_other_latents(tiny):
    a, b = _grads(tiny, seed=0, recompute=True, recompute_every=2), _grads(tiny, seed=5, recompute=True, recompute_every=2)
    assert not all(torch.equal(a[k], b[k]) for k in a)

def test_settings_refuse_bad_values():
    for bad, field in [(dict(recompute_every=0), "recompute_every"), (dict(recompute_every=True), "recompute_every"),
                       (dict(compile_blocks="yes"), "compile_blocks")]:
        with pytest.raises(ValueError, match=field): TrainSettings(**bad).validate()

def test_old_contracts_ran_eager_blocks():
    s = upgrade_contract({"settings": {"recompute": True}})["settings"]
    assert (s["compile_blocks"], s["recompute_every"], s["recompute"]) == (False, 1, True)

@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("g++")), reason="torch.compile on the CPU needs a C compiler")
def test_compiled_blocks_match_eager(tiny):
    from torch._dynamo.utils import counters
    torch._dynamo.reset(); counters.clear()
    eager = _grads(tiny, recompute=True, recompute_every=2, compile_blocks=False)
    assert counters["stats"]["unique_graphs"] == 0          # eager: nothing compiled
    a = _grads(tiny, recompute=True, recompute_every=2, compile_blocks=True)
    b = _grads(tiny, recompute=True, recompute_every=2, compile_blocks=True)
    other = _grads(tiny, seed=5, recompute=True, recompute_every=2, compile_blocks=True)
    tiny.compile_blocks = False
    assert counters["stats"]["unique_graphs"] == 1          # one graph serves every block application
    assert all(torch.equal(a[k], b[k]) for k in a)          # the same kernels twice: the same bits
    for k in eager: torch.testing.assert_close(a[k], eager[k], rtol=1e-4, atol=1e-6)
    assert not all(torch.equal(a[k], other[k]) for k in a)  # twin: other latents, other gradients
