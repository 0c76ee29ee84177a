"""HRM-Text (looprl.model.families.hrm_text) through the commands: inspect on the released config, make_tiny, verify
(64 samples, T 0.8), GRPO and PPO resume equality with their twins, DPPO and Flow-DPPO updates, the FSDP2 trainer,
and the vLLM engine's refusal. Tiny shapes and the fewest updates that change the state."""
import json, shutil
import pytest
import torch
from conftest import ROOT, run_cli, assert_changing, updates
from looprl.model.config import tiny_config

CONFIG = ROOT / "looprl" / "assets" / "configs" / "hrm-text-1b.json"
# The count transformers reports for the released config.json (transformers 5.24.0 and 5.19.0, torch 2.13 CPU):
#   cfg = HrmTextConfig(**{k: v for k, v in raw.items() if k not in ("auto_map", "architectures", "model_type")})
#   with torch.device("meta"): m = HrmTextForCausalLM(cfg)
#   sum(p.numel() for p in m.parameters())  ->  1182795264 (259 tensors)
# tests/test_hrm_text_parity.py computes it live where transformers is installed.
TRANSFORMERS_COUNT, TRANSFORMERS_TENSORS = 1_182_795_264, 259
EVEN = "looprl.tasks.rewards:even_token_share"      # mixed rewards for a random model: every update changes the weights


def test_inspect_released_config():
    r = run_cli("looprl.inspect", CONFIG)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert (info["family"], info["params_actor"], len(info["keys"])) == ("hrm_text", TRANSFORMERS_COUNT, TRANSFORMERS_TENSORS)
    assert info["params_critic"] == TRANSFORMERS_COUNT - 65536 * 1536 + 1536          # value head instead of lm_head
    assert (info["kv_planes"], info["depth_key"], info["depth"], info["default_precision"]) == (128, "H_cycles", 2, "fp32")
    assert info["keys"]["model.H_module.layers.15.self_attn.gate_proj.weight"] == [1536, 1536]
    assert info["keys"]["model.z_L_init"] == [1536] and not any("norm" in k for k in info["keys"])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("hrm") / "tiny"
    r = run_cli("looprl.make_tiny", "--family", "hrm_text", out, "--seed", 5)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["family"] == "hrm_text"
    return out


def test_verify_64_samples(tiny):
    "`python -m looprl.verify` at 64 samples, T 0.8: the engine's PrefixLM prefill and decode against the replay."
    r = run_cli("looprl.verify", tiny, "--samples", "64", "--temperature", "0.8", env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, (r.stdout, r.stderr)
    rep = json.loads(r.stdout)
    print("hrm_text verify:", rep["tokens"], rep["max_abs_logprob_diff"])
    assert rep["ok"] and rep["max_abs_logprob_diff"] <= 3e-6 and rep["kv_planes"] == 16


def test_replay_without_prefix_mask_fails_parity(tiny):
    "The twin of verify: a replay that attends causally over the prompt is refused by the same bound."
    from looprl.rollout.engine import Engine, Request
    from looprl.model.hf import load_checkpoint
    from looprl.verify import replay_logprobs
    eng = Engine.from_checkpoint(tiny, max_len=40)
    cs = eng.generate([Request(list(range(5, 5 + k)), seed=k, max_new_tokens=8, temperature=0.8) for k in (3, 9)])
    m = load_checkpoint(tiny).eval()
    good = max((replay_logprobs(m, c) - torch.tensor(c.logprobs)).abs().max().item() for c in cs)
    m.prefix_lm = False
    bad = max((replay_logprobs(m, c) - torch.tensor(c.logprobs)).abs().max().item() for c in cs)
    assert good <= 3e-6 < 1e-3 < bad, (good, bad)


FAST = ["--max-response-tokens", "6", "--no-eval", "--no-progress", "--reward", EVEN, "--rollout-batch-size", "4"]


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_resume_equals_uninterrupted(tiny, tmp_path, algorithm):
    "2 updates straight vs --stop-after 1 then --resume: equal; a resume that skips restoring the actor is not."
    args = ["--model", tiny, "--algorithm", algorithm, "--lr", "1e-3", "--updates", "2", *FAST]
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli("looprl.train", "--output", a, *args).returncode == 0
    r = run_cli("looprl.train", "--output", b, *args, "--stop-after", "1"); assert r.returncode == 0, r.stderr
    c = tmp_path / "c"; shutil.copytree(b, c)
    assert run_cli("looprl.train", "--output", b, "--resume", "--no-progress").returncode == 0
    assert_changing(a)
    assert all(u["parity_max"] <= 3e-6 for u in updates(a)), [u["parity_max"] for u in updates(a)]
    cmp = run_cli("looprl.compare", a, b); assert cmp.returncode == 0, cmp.stdout + cmp.stderr
    r = run_cli("looprl.train", "--output", c, "--resume", "--no-progress", env={"LOOPRL_SKIP_RESTORE": "actor"})
    assert r.returncode == 0, r.stderr
    assert run_cli("looprl.compare", a, c).returncode != 0             # the twin: the broken resume is seen


@pytest.mark.parametrize("algorithm", ["dppo", "flow-dppo"])
def test_other_algorithms_train(tiny, tmp_path, algorithm):
    out = tmp_path / "run"
    r = run_cli("looprl.train", "--model", tiny, "--output", out, "--algorithm", algorithm, "--lr", "1e-3", "--updates", "1", *FAST)
    assert r.returncode == 0, r.stderr
    assert_changing(out)
    assert all(u["parity_max"] <= 3e-6 for u in updates(out))


def test_full_backprop_setting(tiny, tmp_path):
    "--full-backprop reaches the model: the same rollout, another gradient (the L cycles the schedule skips now count)."
    from looprl.training.trainer import build_trainer
    from looprl.training.settings import TrainSettings
    from test_distributed import rollouts
    roll = rollouts(1)[0]
    norms = {}
    for full in (False, True):
        tr = build_trainer(tiny, TrainSettings(algorithm="grpo", full_backprop=full, minibatches=1))
        norms[full] = tr.train(roll, group_size=2)["metrics"]["grad_norm"]
    assert norms[False] > 0 and abs(norms[True] - norms[False]) > 1e-6 * norms[False], norms


def test_fsdp2_two_processes_equal_one(tiny):
    "The FSDP2 trainer on two gloo processes equals one process on HRM-Text (GRPO, one update)."
    from looprl.training.ranks import run_ranks
    from looprl.training.settings import TrainSettings
    from test_distributed import _dp_rank, _reference, rollouts, max_diff, metric_diff
    s, rolls = TrainSettings(algorithm="grpo", optimizer="adamw", lr=1e-3, micro_batch_size=2), rollouts(1)
    ref_m, ref_t = _reference(tiny, s, rolls)
    (m0, t0), (m1, _) = run_ranks(_dp_rank, 2, tiny, s, rolls)
    from looprl.model.hf import read_tensors
    assert max_diff(ref_t, read_tensors(tiny)) > 1e-4                          # the weights move
    assert max_diff(ref_t, t0) < 2e-6 and metric_diff(ref_m, m0) < 5e-6 and m0 == m1
    (sm, st), _ = run_ranks(_dp_rank, 2, tiny, s, rolls, "seed")               # the twin: rank 1 starts from other weights
    assert max_diff(ref_t, st) > 1e-4


def test_vllm_engine_refuses():
    from looprl.rollout.vllm_engine import VllmEngine
    with pytest.raises(ValueError, match="PrefixLM"): VllmEngine(tiny_config("hrm_text"))
