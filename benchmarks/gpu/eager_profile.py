"""Where the host time of one eager decode step goes, at Huginn-0125 shapes (FP16, 256-token context, random weights).
usage: PYTHONPATH=. python3 benchmarks/gpu/eager_profile.py OUT.json
For the fused (looprl.model.kernels) and the plain decode path, B = 1 and 64: the step's median wall time, the GPU time of the
same step replayed as a CUDA graph, and a cProfile of one step (the functions with the most own time), every Triton
kernel through its JIT launcher; the fused step again with kernels.DIRECT_LAUNCH on (the default). Then the host cost
of one launch of each kind the fused step makes (a Triton kernel through its JIT launcher, the same compiled kernel
launched directly, a cuBLAS product, an allocation), each the mean of many launches with the GPU kept busy."""
import cProfile, io, json, pstats, statistics, sys, time
import torch
from looprl.model.config import preset_config
from looprl.rollout.engine import Engine
from looprl.model.models import init_weights
from looprl.model import kernels as K
from looprl.bench import environment
from looprl.bench.rollout import decode_inputs


def median_ms(fn, n=5):
    for _ in range(2): fn()
    torch.cuda.synchronize(); ts = []
    for _ in range(n):
        t = time.perf_counter(); fn(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def profile_step(eng, B, fused, top=25):
    eng.model.fused_decode = fused
    tok, pos, lat, sd, temps = decode_inputs(eng, B, 256)
    step = lambda: eng.decode_step(tok, pos, lat, sd, temps)
    eager = median_ms(step)
    g = eng.decode_graph(B)
    graph = median_ms(lambda: g(tok, pos, lat, sd, temps))
    eng._graphs.clear()
    pr = cProfile.Profile()
    torch.cuda.synchronize(); pr.enable(); step(); torch.cuda.synchronize(); pr.disable()
    st = pstats.Stats(pr)
    rows = sorted(((f"{fn[0].split('/')[-1]}:{fn[1]}:{fn[2]}", cc, nc, tt, ct) for fn, (cc, nc, tt, ct, _) in st.stats.items()),
                  key=lambda r: -r[3])
    total_calls = sum(r[2] for r in rows)
    return dict(B=B, fused=fused, eager_ms=eager, graph_ms=graph, profiled_s=st.total_tt, function_calls=total_calls,
                top_own_time=[dict(function=r[0], calls=r[2], own_ms=r[3] * 1e3, cum_ms=r[4] * 1e3) for r in rows[:top]])


def per_call_us(fn, n=2000):
    "Mean host µs of `fn` over n calls (the GPU work of each is tiny, so this is launch cost)."
    for _ in range(20): fn()
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): fn()
    host = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return host


def launch_costs():
    dev, E = "cuda", 5280
    norm = torch.nn.Module(); norm.weight, norm.eps = torch.nn.Parameter(torch.randn(E, device=dev, dtype=torch.float16)), 1e-6
    x = torch.randn(1, 1, E, device=dev, dtype=torch.float16)
    w = torch.randn(E, E, device=dev, dtype=torch.float16)
    out = dict(triton_rmsnorm_jit_us=per_call_us(lambda: K.rmsnorm(x, norm)),
               cublas_linear_us=per_call_us(lambda: torch.nn.functional.linear(x, w)),
               torch_empty_us=per_call_us(lambda: torch.empty_like(x)),
               torch_add_us=per_call_us(lambda: x + x))
    # the compiled kernel launched directly, without the JIT launcher's argument binding and cache lookup
    try:
        y = torch.empty_like(x); a2 = x.view(1, E)
        args = (a2, a2, norm.weight, y, norm.weight, y, E, 1e-6, 1e-6, False, False, 8192)
        kern = K._rmsnorm_kernel.run(*args[:9], HAS_ADD=False, HAS_SECOND=False, BLOCK=8192, num_warps=8, grid=(1,), warmup=False)
        stream = torch.cuda.current_stream().cuda_stream
        def direct():
            kern.run(1, 1, 1, stream, kern.function, kern.packed_metadata, None, None, None, *args)
        y.zero_(); direct(); torch.cuda.synchronize()
        out["triton_direct_equal"] = bool(torch.equal(y, K.rmsnorm(x, norm)))
        out["triton_rmsnorm_direct_us"] = per_call_us(direct)
    except Exception as e:
        out["triton_direct_error"] = f"{type(e).__name__}: {e}"[:400]
    return out


def main(path):
    cfg = preset_config("huginn-0125")
    eng = Engine(cfg, "cuda", torch.float16, max_batch=64, max_len=256, cuda_graphs=False, graph_buckets=(1, 64))
    init_weights(eng.model, 0)
    default, K.DIRECT_LAUNCH = K.DIRECT_LAUNCH, False          # every Triton kernel through its JIT launcher
    res = dict(command="PYTHONPATH=. python3 benchmarks/gpu/eager_profile.py " + path, environment=environment(),
               steps=[profile_step(eng, B, f) for f in (True, False) for B in (1, 64)])
    K.DIRECT_LAUNCH = True                       # the fused step again, its Triton kernels launched directly once compiled
    res["direct_launch_steps"] = [profile_step(eng, B, True) for B in (1, 64)]
    K.DIRECT_LAUNCH = default
    res["launch"] = launch_costs()
    open(path, "w").write(json.dumps(res, indent=1))
    for s in res["steps"] + res["direct_launch_steps"]:
        print(f"B={s['B']:3d} fused={s['fused']!s:5} eager {s['eager_ms']:.1f} ms graph {s['graph_ms']:.1f} ms "
              f"calls {s['function_calls']}; top: " + "; ".join(f"{r['function']} {r['own_ms']:.1f}" for r in s["top_own_time"][:6]))
    print(json.dumps(res["launch"]))


if __name__ == "__main__":
    main(sys.argv[1])
