"""How fast this GPU reads memory, against the maker's figure that the decode bound uses
(looprl.bench.rollout.hbm_bandwidth): a read-only reduction (a copy's speed is `python -m looprl.bench matmuls`'s), one
Huginn-0125 core layer's four products at B = 1 over weights of eight layers in turn (so no product finds its weights in
L2), and the same products in one CUDA graph.
usage: python3 benchmarks/gpu/record.py json OUT.json 300 python3 benchmarks/gpu/read_bandwidth.py
(prints one JSON object)"""
import json, statistics
import torch
import torch.nn.functional as F
from looprl.bench.rollout import hbm_bandwidth

dev = torch.device("cuda")


def median_s(fn, n=20):
    "Median seconds of `fn` on the GPU (CUDA events), after two warm-up calls."
    for _ in range(2): fn()
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)


def layer_products(E=5280, I=17920, H=55, D=96, layers=8, B=1):
    "One core layer's products (qkv, out, gate|up, down) at batch B, each layer's weights its own."
    shapes = [(3 * H * D, E), (E, H * D), (2 * I, E), (E, I)]
    ws = [[torch.randn(o, i, device=dev, dtype=torch.float16) for o, i in shapes] for _ in range(layers)]
    xs = {i: torch.randn(B, i, device=dev, dtype=torch.float16) for i in {i for _, i in shapes}}
    nbytes = sum(w.numel() * 2 for layer in ws for w in layer)
    def run():
        for layer in ws:
            for w in layer: F.linear(xs[w.shape[1]], w)
    return run, nbytes


def main():
    nominal = hbm_bandwidth(dev)
    x = torch.randn(2**31, device=dev, dtype=torch.float16)           # 4 GiB
    read = x.numel() * 2 / median_s(lambda: x.sum(dtype=torch.float32))
    del x
    run, nbytes = layer_products()
    eager = nbytes / median_s(run)
    g = torch.cuda.CUDAGraph()
    run(); torch.cuda.synchronize()
    with torch.cuda.graph(g): run()
    graph = nbytes / median_s(g.replay)
    rows = dict(read_tb_s=read / 1e12, layer_products_tb_s=eager / 1e12,
                layer_products_graph_tb_s=graph / 1e12)
    print(json.dumps(dict(gpu=torch.cuda.get_device_name(dev), nominal_tb_s=nominal / 1e12, **rows,
                          **{k.replace("_tb_s", "_of_nominal"): v * 1e12 / nominal for k, v in rows.items()},
                          layer_bytes=nbytes // 8, note="FP16; medians of 20 timings by CUDA events")))


if __name__ == "__main__":
    main()
