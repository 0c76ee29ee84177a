"""`python -m looprl.verify`: engine vs full-sequence replay parity on tiny checkpoints of every family,
run as a subprocess exactly as a user runs it, and its exit statuses."""
import json
import pytest
import torch
from conftest import run_cli
from looprl.model.config import tiny_config
from looprl.model.models import build_model, init_weights
from looprl.model.hf import save_checkpoint
SHIPPED = ("huginn_raven", "ouro", "nanbeige")   # the families looprl ships (looprl.model.families)


def verify(*args):
    "Run the CLI in a fresh process (one torch thread: test workers share few cores)."
    return run_cli("looprl.verify", *args, env={"OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify-ckpts")
    return {f: save_checkpoint(init_weights(build_model(tiny_config(f)), seed=5, perturb_norms=True), root / f, max_shard_bytes=None if f != "ouro" else 400_000)
            for f in SHIPPED}


@pytest.mark.parametrize("family", SHIPPED)
def test_cli_parity_fp32_cpu(ckpts, family):
    r = verify(ckpts[family], "--samples", "6", "--max-response-tokens", "24", "--seed", "3")
    assert r.returncode == 0, (r.stdout, r.stderr)
    rep = json.loads(r.stdout)
    cfg = tiny_config(family)
    assert rep["ok"] is True and rep["bound"] == 3e-6
    assert 0 <= rep["max_abs_logprob_diff"] <= 3e-6 and rep["mean_abs_logprob_diff"] <= rep["max_abs_logprob_diff"]
    assert 6 <= rep["tokens"] <= 6 * 24
    assert (rep["family"], rep["dtype"], rep["device"]) == (family, "float32", "cpu")
    assert (rep["kv_planes"], rep["depth"], rep["depth_key"]) == (cfg.kv_planes, cfg.depth, cfg.depth_key)
    assert rep["layers"] == dict(prelude=cfg.n_prelude, core=cfg.n_core, coda=cfg.n_coda)
    assert rep["params"] == sum(p.numel() for p in build_model(cfg).parameters())
    assert rep["publication_digest"].startswith("sha256:") and rep["policy_version"] == 1
    assert rep["latent_profile"] == ("like-init-cpu-f32-v1" if family == "huginn_raven" else None)
    print(family, rep["tokens"], rep["max_abs_logprob_diff"], rep["mean_abs_logprob_diff"])


def test_cli_low_precision_bound(ckpts):
    r = verify(ckpts["huginn_raven"], "--precision", "bf16", "--samples", "2", "--max-response-tokens", "8")
    rep = json.loads(r.stdout)
    assert rep["bound"] == 0.03 and rep["dtype"] == "bfloat16"
    assert r.returncode == (0 if rep["max_abs_logprob_diff"] <= 0.03 else 1)


def one_line_error(r):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("looprl.verify: ") and r.stdout == "", r.stderr
    return lines[0]


def test_cli_bad_input(ckpts, tmp_path):
    assert "no such directory" in one_line_error(verify(tmp_path / "missing"))
    (tmp_path / "cfg").mkdir(); (tmp_path / "cfg" / "config.json").write_text('{"model_type": "gpt2"}')
    assert "unknown model_type 'gpt2'" in one_line_error(verify(tmp_path / "cfg"))
    (tmp_path / "json").mkdir(); (tmp_path / "json" / "config.json").write_text('{"model_type": ')
    assert "invalid JSON" in one_line_error(verify(tmp_path / "json"))
    (tmp_path / "noweights").mkdir(); (tmp_path / "noweights" / "config.json").write_text((ckpts["ouro"] / "config.json").read_text())
    assert "no model.safetensors" in one_line_error(verify(tmp_path / "noweights"))
    assert "--precision must be one of" in one_line_error(verify(ckpts["ouro"], "--precision", "fp8"))
    assert "--samples" in one_line_error(verify(ckpts["ouro"], "--samples", "0"))
    if not torch.cuda.is_available():
        assert "no CUDA device" in one_line_error(verify(ckpts["ouro"], "--device", "cuda"))


def test_missing_tensor_is_bad_input(ckpts, tmp_path):
    from safetensors.torch import load_file, save_file
    d = tmp_path / "partial"; d.mkdir()
    (d / "config.json").write_text((ckpts["nanbeige"] / "config.json").read_text())
    t = load_file(str(ckpts["nanbeige"] / "model.safetensors")); t.pop("model.norm.weight")
    save_file(t, str(d / "model.safetensors"))
    assert "missing tensor model.norm.weight" in one_line_error(verify(d))


def test_exit_status_above_the_bound(ckpts, monkeypatch, capsys):
    "Above the bound the report says so and `main` exits 1 (the bound is lowered to 0, and the FP32 kernels that round by shape are used, to provoke it)."
    import looprl.verify as V
    monkeypatch.setattr(V, "parity_bound", lambda dtype, device: 0.0)
    monkeypatch.setattr("looprl.model.models._CPU_FP64", False)
    rep = V.verify_checkpoint(ckpts["huginn_raven"], samples=3, max_new_tokens=10)
    assert rep["max_abs_logprob_diff"] > 0 and rep["ok"] is False
    with pytest.raises(SystemExit) as ei:
        V.main([str(ckpts["huginn_raven"]), "--samples", "3", "--max-response-tokens", "10"])
    assert ei.value.code == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False


def test_stdout_holds_the_json_alone(ckpts, monkeypatch, capfd):
    """An engine that logs to stdout, from Python and from C (file descriptor 1), as vLLM does: `looprl.verify`'s stdout
    is still its JSON alone and the log lines are on stderr. Its twin, without `stdout_to_stderr`, does not parse."""
    import contextlib, os
    import looprl.verify as V
    from looprl.rollout.engine import Engine

    class LoggingEngine(Engine):
        def generate(self, requests):
            print("INFO engine: generating"); os.write(1, b"INFO engine (C): kernels ready\n")
            return super().generate(requests)

    monkeypatch.setattr(V, "engine_class", lambda engine, device="cpu": LoggingEngine)
    argv = [str(ckpts["ouro"]), "--samples", "2", "--max-response-tokens", "4"]
    with pytest.raises(SystemExit) as ex: V.main(argv)
    out, err = capfd.readouterr()
    assert ex.value.code == 0 and json.loads(out)["ok"]
    assert "INFO engine: generating" in err and "INFO engine (C): kernels ready" in err
    monkeypatch.setattr(V, "stdout_to_stderr", contextlib.nullcontext)      # the twin: the guard left out
    with pytest.raises(SystemExit): V.main(argv)
    out, err = capfd.readouterr()
    assert out.startswith("INFO engine") and "INFO engine" not in err
    with pytest.raises(json.JSONDecodeError): json.loads(out)
