"""The Megatron-core backend (looprl.model.megatron_model) against the torch backend on one GPU, one JSON file:
  parity-full  Huginn-0125 shapes (preset huginn-0125, looprl's init, seed 0) in FP16, batch 2 x 128 tokens: forward and
               backward of the same loss on the same weights (loss scale 128), max |d logit| and max relative |d grad|
               over parameters (Megatron's mapped to native names), next to the torch backend's own FP16 against FP32;
               and the native round trip of the full model, bit for bit;
  parity-mid   a mid-size FP32 Huginn (n_embd 1024, 8 heads of 128, 8 recurrences, as make_checkpoints.py), the same figures;
  speed        the actor's forward + backward at Huginn-0125 shapes in FP16, batch 4 x 176 tokens, recompute per block
               on and off, both backends in this one process: step time, tokens/s, MFU (looprl.bench's FLOP count,
               989 TFLOP/s peak), peak memory.
usage: PYTHONPATH=. python benchmarks/gpu/megatron_parity.py [parity-full] [parity-mid] [speed]   -> $OUT/megatron-parity.json
Each part records its error text instead of its figures when it fails; the others still run. BUDGET_S (default 330) is the
time after which the parts not started yet are skipped."""
import json, os, shlex, sys, time, traceback
from pathlib import Path

PARTS = ("parity-full", "parity-mid", "speed")
T0 = time.perf_counter()
OUT = Path(os.environ.get("OUT", "out")); OUT.mkdir(parents=True, exist_ok=True)
PATH = OUT / "megatron-parity.json"
DEVICE = "cuda"              # the scripts' one GPU
DOC = {"command": shlex.join(["python", *sys.argv]), "script": os.environ.get("LOOPRL_SCRIPT"), "parts": {}}


def write():
    DOC["seconds"] = round(time.perf_counter() - T0, 1)
    PATH.write_text(json.dumps(DOC, indent=1))


def run_part(name, fn, budget_s):
    if time.perf_counter() - T0 > budget_s:
        DOC["parts"][name] = {"skipped": f"not started: {budget_s} s budget (BUDGET_S) spent"}
    else:
        t = time.perf_counter()
        try: DOC["parts"][name] = {**fn(), "seconds": round(time.perf_counter() - t, 1)}
        except Exception:
            DOC["parts"][name] = {"error": traceback.format_exc()[-6000:], "seconds": round(time.perf_counter() - t, 1)}
        import torch
        if DEVICE == "cuda": torch.cuda.empty_cache()
    print(name, json.dumps(DOC["parts"][name])[:2000], flush=True)
    write()


def batch(cfg, native, B, S, seed=0):
    "Random tokens and targets (seeded), and Huginn's initial recurrent state of seeds 0 … B-1 as the trainer replays it."
    import torch
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, cfg.vocab_size, (B, S), generator=g).to(DEVICE)
    tgt = torch.randint(3, cfg.vocab_size, (B, S), generator=g).to(DEVICE)
    p = next(native.parameters())
    return ids, tgt, native.sequence_states(list(range(B)), [S] * B, p.dtype, p.device)


def step(model, ids, tgt, lat, scale):
    "Forward, loss (mean token cross-entropy), backward of loss x scale: FP32 logits, FP32 gradients ÷ scale by parameter name."
    import torch, torch.nn.functional as F
    for p in model.parameters(): p.grad = None
    logits = model.logits(model(ids, latents=lat))
    (F.cross_entropy(logits.flatten(0, 1), tgt.flatten()) * scale).backward()
    grads = {}
    for n, p in model.named_parameters():
        g = p.grad.float() if p.grad is not None else torch.zeros_like(p, dtype=torch.float32)
        grads[n] = g / scale if scale != 1 else g
        p.grad = None
    return logits.detach(), grads


def differences(logits, grads, ref_logits, ref_grads):
    "max |d logit|, max over parameters of max|d grad| / max|grad| (and which parameter), non-finite gradients."
    rel = {n: ((grads[n] - g).abs().max() / g.abs().max()).item() for n, g in ref_grads.items() if g.abs().max() > 0}
    worst = max(rel, key=rel.get)
    return dict(max_abs_d_logit=(logits - ref_logits).abs().max().item(), max_abs_logit=ref_logits.abs().max().item(),
                max_rel_d_grad=rel[worst], worst_parameter=worst,
                nonfinite_grads=sum(int((~g.isfinite()).sum()) for g in grads.values()))


def parity(cfg, dtype, B, S, seed, perturb_norms, with_fp32_reference):
    import torch
    from looprl.model.megatron import from_megatron
    from looprl.model.megatron_model import build_megatron_model, native_state
    from looprl.model.models import build_model, init_weights
    scale = 128.0 if dtype == torch.float16 else 1.0
    native = init_weights(build_model(cfg, device=DEVICE, dtype=dtype), seed=seed, perturb_norms=perturb_norms)
    ids, tgt, lat = batch(cfg, native, B, S)
    n_logits, n_grads = step(native, ids, tgt, lat, scale)
    mg = build_megatron_model(cfg, dtype=dtype, device=DEVICE, state_dict=native.state_dict())
    back, want = native_state(mg), native.state_dict()
    round_trip = list(back) == list(want) and all(torch.equal(back[n].cpu(), want[n].cpu()) for n in want)
    m_logits, m_grads = step(mg, ids, tgt, lat, scale)
    m_grads = from_megatron(m_grads, cfg, spec="local")
    out = dict(dtype=str(dtype).removeprefix("torch."), batch=[B, S], loss_scale=scale, native_round_trip_bit_exact=round_trip,
               megatron_vs_torch=differences(m_logits, m_grads, n_logits, {n: n_grads[n] for n, _ in native.named_parameters()}))
    del mg, back
    if with_fp32_reference:          # the FP16 noise floor: the torch backend in FP16 against itself in FP32, same weights
        ref = build_model(cfg, device=DEVICE, dtype=torch.float32)
        ref.load_state_dict({n: t.float() if t.is_floating_point() else t for n, t in want.items()})
        del native, want
        r_logits, r_grads = step(ref, ids, tgt, lat.float(), 1.0)
        out["torch_fp16_vs_torch_fp32"] = differences(n_logits, n_grads, r_logits, r_grads)
        out["megatron_fp16_vs_torch_fp32"] = differences(m_logits, m_grads, r_logits, r_grads)
    return out


def full_config():
    from looprl.model.config import preset_config
    return preset_config("huginn-0125")


def mid_config():
    from looprl.model.config import tiny_config
    return tiny_config("huginn_raven", n_embd=1024, n_heads=8, head_dim=128, num_key_value_heads=8, intermediate_size=2816,
                       vocab_size=32768, padded_vocab_size=32768, block_size=1024, mean_recurrence=8)


def parity_full():
    import torch
    return dict(config="huginn-0125", **parity(full_config(), torch.float16, 2, 128, seed=0, perturb_norms=False,
                                               with_fp32_reference=True))


def parity_mid():
    import torch
    return dict(config="mid: n_embd 1024, 8 heads of 128, intermediate 2816, vocab 32768, 8 recurrences",
                tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
                **parity(mid_config(), torch.float32, 2, 128, seed=1, perturb_norms=True, with_fp32_reference=False))


def speed():
    import torch, torch.nn.functional as F
    from looprl.bench.train import model_flops_per_token
    from looprl.model.megatron_model import build_megatron_model
    from looprl.model.models import build_model, init_weights
    cfg, B, S, steps, peak = full_config(), 4, 176, 5, 989.0
    cuda = DEVICE == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    flops = model_flops_per_token(cfg, S) * B * S
    native = init_weights(build_model(cfg, device=DEVICE, dtype=torch.float16), seed=0)
    ids, tgt, lat = batch(cfg, native, B, S)
    results = {}
    for backend in ("torch", "megatron"):
        model = native if backend == "torch" else build_megatron_model(cfg, dtype=torch.float16, device=DEVICE, state_dict=native.state_dict())
        if backend == "megatron": del native
        for recompute in (True, False):
            model.recompute = recompute
            if cuda: torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
            times = []
            for i in range(steps + 2):                                 # two warm-up steps
                sync(); t = time.perf_counter()
                for p in model.parameters(): p.grad = None
                (F.cross_entropy(model.logits(model(ids, latents=lat)).flatten(0, 1), tgt.flatten()) * 128.0).backward()
                sync()
                if i >= 2: times.append(time.perf_counter() - t)
            med = sorted(times)[len(times) // 2]
            results[f"{backend}{'-recompute' if recompute else ''}"] = dict(
                step_s=med, steps_s=times, tokens_per_s=B * S / med, model_tflops=flops / med / 1e12, mfu=flops / med / (peak * 1e12),
                peak_memory_gib=torch.cuda.max_memory_allocated() / 2**30 if cuda else None)
        for p in model.parameters(): p.grad = None
        del model
    return dict(config="huginn-0125", dtype="float16", batch=[B, S], loss_scale=128.0, peak_tflops=peak, flops_per_step=flops,
                what="actor forward + backward of the mean token cross-entropy (no optimizer step), median of 5 after 2 warm-up steps",
                recompute="torch: each block application checkpointed (looprl.model.models); megatron: each stack application "
                          "(prelude, core per recurrence, coda) checkpointed, non-reentrant", backends=results)


def main():
    parts = sys.argv[1:] or list(PARTS)
    if set(parts) - set(PARTS): sys.exit(f"megatron_parity.py: parts are {', '.join(PARTS)}; got {parts}\n{__doc__}")
    budget = float(os.environ.get("BUDGET_S", 330))
    import torch
    if not torch.cuda.is_available(): sys.exit("megatron_parity.py: no CUDA device")
    from looprl.bench import environment
    from looprl.model.megatron import megatron_core_version
    from looprl.model.megatron_model import init_megatron_parallel
    DOC.update(environment=environment(), torch=torch.__version__, megatron_core=megatron_core_version(),
               gpu=torch.cuda.get_device_name(0))
    write()
    if DOC["megatron_core"] is None: sys.exit("megatron_parity.py: megatron-core is not importable")
    torch.backends.cuda.matmul.allow_tf32 = False; torch.backends.cudnn.allow_tf32 = False
    init_megatron_parallel(tp=1, seed=0, device="cuda")    # NCCL world of 1, initialize_model_parallel(1, 1), model_parallel_cuda_manual_seed(0)
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    DOC["distributed"] = dict(backend=dist.get_backend(), world_size=dist.get_world_size(),
                              tensor_parallel=ps.get_tensor_model_parallel_world_size(), pipeline_parallel=ps.get_pipeline_model_parallel_world_size())
    for name, fn in (("parity-full", parity_full), ("parity-mid", parity_mid), ("speed", speed)):
        if name in parts: run_part(name, fn, budget)
    dist.destroy_process_group()
    print(f"wrote {PATH}")
    sys.exit(1 if any("error" in p for p in DOC["parts"].values()) else 0)


if __name__ == "__main__":
    main()
