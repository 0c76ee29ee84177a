"""Exact mode (`--exact-kernels`, looprl.model.invariant wired into the engine and the trainer): the trainer's replay
equals the log-probs the engine sampled with, bit for bit, in FP16, while the weights change; a run without it (or
with one product of the replay summed in another order) does not; a request alone gets the tokens and log-probs it gets
in a batch. The refusals: without Triton (one line, exit 2), and a resume that changes the setting.

The kernels run on a GPU, or without one in Triton's CPU interpreter (TRITON_INTERPRET=1 set before Triton is first
imported, here and in each child process); the tests that need them skip where Triton is missing:
`/work/venv-triton/bin/python -m pytest -q tests/test_exact_mode.py` runs them all. Interpreted kernels are slow: the
runs are a few rows of a few tokens."""
import json, os, sys
import pytest
import torch
from conftest import run_cli, said_lines, updates, assert_changing

CUDA = torch.cuda.is_available()
_old = os.environ.get("TRITON_INTERPRET")
if not CUDA and "triton" not in sys.modules: os.environ["TRITON_INTERPRET"] = "1"   # before Triton is first imported
try:
    from looprl.model import invariant as I
finally:
    if _old is None: os.environ.pop("TRITON_INTERPRET", None)
    else: os.environ["TRITON_INTERPRET"] = _old

DEV = "cuda" if CUDA else "cpu"
KERNELS = pytest.mark.skipif(not I.available(DEV), reason="Triton is not installed (or was imported before "
                                                          "TRITON_INTERPRET=1): the exact kernels cannot run")
INTERPRET = {} if CUDA else {"TRITON_INTERPRET": "1"}
RUN = ["--algorithm", "grpo", "--precision", "fp16", "--rollout-batch-size", "2", "--n-samples-per-prompt", "2",
       "--max-response-tokens", "4", "--no-eval", "--no-progress", "--optimizer", "sgd", "--lr", "1e-3",
       "--device", DEV, "--reward", "looprl.tasks.rewards:even_token_share"]   # mixed rewards: weights change


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    "Triton's interpreter reads TRITON_INTERPRET while it runs a kernel too."
    if I.INTERPRETED: monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    from looprl.tasks.data import EMBEDDED_DATA
    p = tmp_path_factory.mktemp("data") / "few.jsonl"
    p.write_text("\n".join(open(EMBEDDED_DATA).read().splitlines()[:8]) + "\n")
    return p


def train(model, data, out, *extra, env=None):
    return run_cli("looprl.train", "--model", model, "--data", data, "--output", out, *RUN, *extra,
                   env={**INTERPRET, **(env or {})}, timeout=1200)


@KERNELS
@pytest.mark.parametrize("family", ["huginn_raven", "nanbeige"])
def test_exact_run_replays_bit_for_bit_and_its_twin_does_not(tiny_models, prompts, tmp_path, family):
    "Random weights (the warm-started models answer these prompts the same way twice: equal rewards, no gradient)."
    exact, plain = tmp_path / "exact", tmp_path / "plain"
    r = train(tiny_models[family], prompts, exact, "--updates", "2", "--exact-kernels")
    assert r.returncode == 0, r.stderr
    assert json.loads((exact / "run.json").read_text())["contract"]["settings"]["exact_kernels"] is True
    ups = updates(exact)
    assert len(ups) == 2 and all(u["parity_max"] == 0.0 for u in ups), [u["parity_max"] for u in ups]
    assert_changing(exact)                                       # the weights change at every update
    # the twin: the same run on the ordinary kernels replays with another reduction order somewhere
    r = train(tiny_models[family], prompts, plain, "--updates", "2"); assert r.returncode == 0, r.stderr
    assert any(u["parity_max"] > 0 for u in updates(plain)), [u["parity_max"] for u in updates(plain)]


def engine_and_replay(family, n_rows, head=None, dtype=torch.float16):
    """Completions of a tiny model's engine in exact mode for the first `n_rows` of 4 fixed requests (continuous
    batching, a block-table KV cache) and a fresh exact model's replay of each; `head(lm_head)`: the replay's head."""
    from looprl.model.hf import load_checkpoint
    from looprl.rollout.engine import Engine, Request
    from looprl.verify import replay_logprobs
    from looprl.warmstart import EMBEDDED_MODELS
    path = EMBEDDED_MODELS[family]
    eng = Engine.from_checkpoint(path, device=DEV, dtype=dtype, max_batch=4, max_len=16, exact_kernels=True,
                                 batching="continuous", block_size=4)
    assert eng.model.exact and isinstance(eng.cache.table, torch.Tensor)
    reqs = [Request([3 + i, 17, 40 + 7 * i][: 2 + i % 2], seed=11 + i, max_new_tokens=4, temperature=1.0)
            for i in range(4)][:n_rows]
    comps = eng.generate(reqs)
    replay = I.exact_kernels(load_checkpoint(path, "actor", dtype=dtype, device=DEV).eval())
    if head is not None: replay.lm_head.forward = head(replay.lm_head)
    return comps, [replay_logprobs(replay, c).cpu() for c in comps]


@KERNELS
@pytest.mark.parametrize("family,dtype", [("ouro", torch.float32), ("hrm_text", torch.float16)])
def test_engine_equals_replay_in_the_other_families(family, dtype):
    "Ouro (sandwich norms, its exit gate), HRM-Text (weightless norms, gated attention, a PrefixLM prompt)."
    comps, replays = engine_and_replay(family, 3, dtype=dtype)
    for c, lp in zip(comps, replays): assert torch.equal(torch.tensor(c.logprobs, dtype=torch.float32), lp)


@KERNELS
def test_engine_equals_replay_and_a_row_alone_equals_it_in_a_batch():
    batch, replays = engine_and_replay("huginn_raven", 4)
    for c, lp in zip(batch, replays): assert torch.equal(torch.tensor(c.logprobs, dtype=torch.float32), lp)
    alone, _ = engine_and_replay("huginn_raven", 1)
    assert alone[0].tokens == batch[0].tokens and alone[0].logprobs == batch[0].logprobs


def split_head(lin):
    """The twin's head: the same product summed in another order, K in two parts (at a third) whose FP16 products are
    added (PyTorch's own FP16 product on this CPU can round to the same bits as the kernel at these sizes)."""
    w = lin.weight; h = w.shape[1] // 3
    return lambda x: I.matmul(x[..., :h], w[:, :h]) + I.matmul(x[..., h:], w[:, h:])


@KERNELS
def test_twin_one_product_of_the_replay_in_another_order_differs():
    comps, replays = engine_and_replay("huginn_raven", 4, split_head)
    assert any(not torch.equal(torch.tensor(c.logprobs, dtype=torch.float32), lp) for c, lp in zip(comps, replays))


def test_refused_without_triton(shipped, prompts, tmp_path):
    "Where Triton cannot be imported (here: hidden from the child), one line naming the setting, exit 2, nothing made."
    out = tmp_path / "run"
    code = ("import sys; sys.modules['triton'] = None; from looprl.train import main; main(sys.argv[1:])")
    import subprocess
    r = subprocess.run([sys.executable, "-c", code, "--model", shipped["huginn_raven"], "--data", prompts, "--output",
                        out, *RUN, "--updates", "1", "--exact-kernels"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stderr
    lines = said_lines(r.stderr)
    assert len(lines) == 1 and "--exact-kernels" in lines[0] and "Triton is not installed" in lines[0], r.stderr
    assert not out.exists()


@KERNELS
def test_resume_refuses_a_changed_setting(shipped, prompts, tmp_path):
    out = tmp_path / "run"
    r = train(shipped["nanbeige"], prompts, out, "--updates", "2", "--stop-after", "1")
    assert r.returncode == 0, r.stderr
    r = run_cli("looprl.train", "--output", out, "--resume", "--no-progress", "--exact-kernels", env=INTERPRET)
    assert r.returncode == 2, r.stderr
    lines = said_lines(r.stderr)
    assert len(lines) == 1 and "settings.exact_kernels: run has False, requested True" in lines[0], r.stderr
    assert len(updates(out)) == 1                                 # the refused resume added nothing


def test_older_contracts_read_as_exact_mode_off():
    from looprl.core.state import upgrade_contract
    assert upgrade_contract({"settings": {"algorithm": "grpo"}})["settings"]["exact_kernels"] is False
    assert upgrade_contract({"settings": {"exact_kernels": True}})["settings"]["exact_kernels"] is True
