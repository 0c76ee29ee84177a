"Latent replay: bit-exact noise, batch independence, fresh-process reproducibility, traces and their checks."
import hashlib, json, math, random, subprocess, sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from looprl.model.latents import (LATENT_PROFILE, LATENT_CACHE, LatentCache, LatentTrace, TraceError, TraceMismatch,
                            check_trace, environment_fingerprint, latent_noise, latent_noise_reference,
                            noise_seed, sequence_latents, trunc_normal_algorithm)
from looprl.bench.latents import bench_latents

ROOT = Path(__file__).resolve().parents[1]
bits = lambda t: t.view(torch.int32)


def test_noise_seed_definition():
    for s, p in [(0, 0), (42, 7), (2**63 - 1, 2**64 - 1)]:
        ident = s.to_bytes(8, "little") + p.to_bytes(8, "little")
        want = int.from_bytes(hashlib.blake2b(ident, digest_size=8).digest(), "little") % 2**63
        assert noise_seed(s, p) == want


def test_known_algorithm():
    assert trunc_normal_algorithm() in ("rejection", "inverse-cdf")


@pytest.mark.parametrize("E", [1, 2, 7, 15, 16, 17, 33, 127, 128, 129, 1000, 1031, 4096, 5280, 5281])
def test_fast_equals_reference_bits(E):
    rng = random.Random(E)
    n = 24 if E < 4096 else 12
    seeds = [rng.randrange(2**63) for _ in range(n)] + [0, 2**63 - 1, 1]
    pos = [rng.randrange(2**32) for _ in range(n)] + [0, 2**64 - 1, 1]
    assert torch.equal(bits(latent_noise(E, seeds, pos)), bits(latent_noise_reference(E, seeds, pos)))


def test_many_positions_one_seed_5280():
    "A long run of consecutive positions: the trainer's access pattern."
    assert torch.equal(bits(latent_noise(5280, 123, range(300))), bits(latent_noise_reference(5280, 123, range(300))))


def test_batch_composition_independence():
    E, rng = 640, random.Random(3)
    pairs = [(rng.choice([1, 2, 3, 2**62]), rng.randrange(64)) for _ in range(80)]
    batch = latent_noise(E, [s for s, _ in pairs], [p for _, p in pairs])
    for i, (s, p) in enumerate(pairs):
        assert torch.equal(bits(batch[i]), bits(latent_noise(E, s, [p])[0]))
    rng.shuffle(pairs)
    again = latent_noise(E, [s for s, _ in pairs], [p for _, p in pairs])
    for i, (s, p) in enumerate(pairs):
        assert torch.equal(bits(again[i]), bits(latent_noise(E, s, [p])[0]))
    # a sequence's rows are the same whatever prefix/decode split produced them
    whole = latent_noise(E, 9, range(20))
    assert torch.equal(bits(torch.cat([latent_noise(E, 9, range(13)), latent_noise(E, 9, range(13, 20))])), bits(whole))
    assert torch.equal(bits(torch.cat([latent_noise(E, 9, [p]) for p in range(20)])), bits(whole))


_CHILD = ("import hashlib, torch; from looprl.model.latents import latent_noise; "
          "x = latent_noise(5280, 42, range(200)); y = latent_noise(128, [5, 2**63 - 1], [2**40, 0], dtype=torch.float16); "
          "print(hashlib.sha256(x.numpy().tobytes()).hexdigest(), hashlib.sha256(y.view(torch.int16).numpy().tobytes()).hexdigest())")


def test_same_bits_in_two_fresh_processes():
    outs = [subprocess.run([sys.executable, "-c", _CHILD], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
            for _ in range(2)]
    assert outs[0] == outs[1] and len(outs[0]) == 2
    x = latent_noise(5280, 42, range(200))
    y = latent_noise(128, [5, 2**63 - 1], [2**40, 0], dtype=torch.float16)
    assert outs[0] == [hashlib.sha256(x.numpy().tobytes()).hexdigest(), hashlib.sha256(y.view(torch.int16).numpy().tobytes()).hexdigest()]


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16])
def test_cast_after_fp32_draw(dt):
    x32 = latent_noise(5280, 77, range(8))
    x = latent_noise(5280, 77, range(8), dtype=dt)
    assert x.dtype == dt and torch.equal(x.view(torch.int16), x32.to(dt).view(torch.int16))
    assert torch.equal(sequence_latents(5280, 77, 8, dtype=dt, cache=None).view(torch.int16), x.view(torch.int16))


@pytest.mark.parametrize("E", [64, 5280])
def test_distribution(E):
    x = latent_noise(E, 2024, range(20000 // E + 40))
    std = math.sqrt(2 / (5 * E))
    hi = torch.tensor(3 * std, dtype=torch.float32).item()
    assert (x / torch.tensor(math.sqrt(E), dtype=torch.float32)).abs().max().item() <= hi * (1 + 1e-6)
    phi3, Phi3 = math.exp(-4.5) / math.sqrt(2 * math.pi), (1 + math.erf(3 / math.sqrt(2))) / 2
    want = math.sqrt(2 / 5) * math.sqrt(1 - 6 * phi3 / (2 * Phi3 - 1))
    assert abs(x.std().item() - want) < 0.01 and abs(x.mean().item()) < 0.01


def test_inputs_refused():
    with pytest.raises(ValueError, match=r"outside \[0, 2\*\*63\)"): latent_noise(8, 2**63, [0])
    with pytest.raises(ValueError, match=r"outside \[0, 2\*\*63\)"): latent_noise(8, -1, [0])
    with pytest.raises(TypeError, match="seed must be an int"): latent_noise(8, 1.5, [0])
    with pytest.raises(ValueError, match="position -1"): latent_noise(8, 1, [-1])
    with pytest.raises(ValueError, match="3 seeds for 2 positions"): latent_noise(8, [1, 2, 3], [0, 1])
    with pytest.raises(ValueError, match="n_embd"): latent_noise(0, 1, [0])
    assert latent_noise(8, 1, []).shape == (0, 8)
    assert latent_noise(8, [4, 5], 3).shape == (2, 8)  # one position, two seeds


def test_cache_extends_evicts_and_copies():
    c = LatentCache(max_bytes=3 * 10 * 32 * 4)
    ref = latent_noise(32, 5, range(10))
    assert torch.equal(bits(sequence_latents(32, 5, 4, cache=c)), bits(ref[:4]))
    assert torch.equal(bits(sequence_latents(32, 5, 10, cache=c)), bits(ref))
    assert (c.hits, c.misses) == (4, 10)
    out = sequence_latents(32, 5, 10, cache=c)
    out.fill_(0)
    assert torch.equal(bits(sequence_latents(32, 5, 10, cache=c)), bits(ref))
    for s in (6, 7, 8):
        sequence_latents(32, s, 10, cache=c)
    assert len(c) == 3 and (32, 5) not in c and c.nbytes == 3 * 10 * 32 * 4
    big = LatentCache(max_bytes=10)
    assert torch.equal(bits(sequence_latents(32, 5, 10, cache=big)), bits(ref)) and len(big) == 0
    assert isinstance(LATENT_CACHE, LatentCache)
    assert sequence_latents(32, 5, 0, cache=LatentCache()).shape == (0, 32)
    assert sequence_latents(32, 5, 0, cache=None).shape == (0, 32)
    with pytest.raises(ValueError, match="length must be"): sequence_latents(32, 5, -1)
    with pytest.raises(ValueError, match="length must be"): sequence_latents(32, 5, -1, cache=None)
    with pytest.raises(ValueError, match="outside"): sequence_latents(32, 2**63, 3)


def test_bench_small():
    r = bench_latents(n_embd=256, positions=64, repeats=1)
    assert r["bit_identical"] is True and r["positions"] == 64 and r["naive_s"] > 0 and r["fast_s"] > 0
    assert r["torch"] == torch.__version__ and r["command"] == "python -m looprl.bench latents"


def test_committed_benchmark_result():
    doc = json.loads((ROOT / "benchmarks/results/latents_speed.json").read_text())
    r = doc.get("result", doc)  # bench_latents' dict, bare or wrapped by the bench CLI
    for k in ("command", "torch", "machine", "cpu_count", "naive_s", "fast_s", "ratio", "n_embd", "positions"):
        assert k in r, k
    assert r["bit_identical"] is True and r["n_embd"] == 5280 and r["positions"] == 4096
    assert abs(r["ratio"] - r["naive_s"] / r["fast_s"]) < 0.01 * r["ratio"]


def test_environment_fingerprint():
    e = environment_fingerprint(torch.bfloat16)
    assert e == {"torch": torch.__version__, "dtype": "bfloat16", "arch": __import__("platform").machine(), "profile": LATENT_PROFILE}
    assert environment_fingerprint("fp32")["dtype"] == "float32"
    assert environment_fingerprint("torch.float16")["dtype"] == "float16"
    assert environment_fingerprint(torch.float32, profile=None)["profile"] is None
    with pytest.raises(ValueError, match="unknown dtype"): environment_fingerprint("fp8")
    with pytest.raises(ValueError, match="unknown dtype torch.int8"): environment_fingerprint(torch.int8)


# ---- traces ---------------------------------------------------------------------------------------

ENV = environment_fingerprint(torch.float16)


def _trace(**kw):
    d = dict(family="huginn_raven", model_revision="abc", engine_revision="e1", profile=LATENT_PROFILE, seed=12345,
             prompt_len=6, response_len=4, prefill_depth=32, depths=(32, 32, 32, 32), policy_version=3,
             publication_digest="f" * 64, environment=dict(ENV))
    return LatentTrace(**{**d, **kw})


MODEL = dict(family="huginn_raven", depth=32, model_revision="abc", engine_revision="e1", environment=ENV)


def test_trace_round_trip_through_json():
    for t in (_trace(), _trace(seed=0, depths=[], response_len=0, model_revision=None, engine_revision=None),
              _trace(family="ouro", profile=None, seed=2**63 - 1, depths=(4,), response_len=1, prefill_depth=4)):
        d = json.loads(json.dumps(t.to_dict()))
        assert LatentTrace.from_dict(d) == t and LatentTrace.from_dict(d).to_dict() == t.to_dict()
        assert isinstance(LatentTrace.from_dict(d).depths, tuple)


def test_trace_is_immutable_and_hashable():
    t = _trace()
    with pytest.raises(Exception): t.seed = 1
    env = dict(ENV)
    t2 = _trace(environment=env)
    env["torch"] = "0"
    assert t2.environment == ENV  # the trace keeps its own copy
    assert hash(t) == hash(_trace())


@pytest.mark.parametrize("field,value,msg", [
    ("seed", "12345", "'seed': must be an int, got str"),
    ("seed", True, "'seed': must be an int, got bool"),
    ("prompt_len", 6.0, "'prompt_len': must be an int"),
    ("response_len", -1, "'response_len': must be an int ≥ 0"),
    ("prefill_depth", None, "'prefill_depth': must be an int"),
    ("policy_version", "3", "'policy_version': must be an int"),
    ("depths", "32,32", "'depths': must be a list of ints"),
    ("depths", [32, "32"], "'depths': must be a list of ints"),
    ("family", 5, "'family': must be a string"),
    ("family", "llama", "'family': unknown family 'llama'"),
    ("model_revision", 7, "'model_revision': must be a string or None"),
    ("engine_revision", ["x"], "'engine_revision': must be a string or None"),
    ("profile", 1, "'profile': must be a string or None"),
    ("publication_digest", None, "'publication_digest': must be a string"),
    ("environment", "x86", "'environment': must be a dict of strings"),
    ("environment", {"torch": 2}, "'environment': must be a dict of strings"),
])
def test_from_dict_names_the_bad_field(field, value, msg):
    d = {**_trace().to_dict(), field: value}
    with pytest.raises(TraceError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        LatentTrace.from_dict(d)


def test_from_dict_missing_unknown_schema():
    d = _trace().to_dict()
    with pytest.raises(TraceError, match="'seed': missing"): LatentTrace.from_dict({k: v for k, v in d.items() if k != "seed"})
    with pytest.raises(TraceError, match="'latent_seed': unknown field"): LatentTrace.from_dict({**d, "latent_seed": 1})
    with pytest.raises(TraceError, match="'schema_version'"): LatentTrace.from_dict({**d, "schema_version": 2})
    with pytest.raises(TraceError, match="must be a dict"): LatentTrace.from_dict([d])


def test_check_trace_accepts_matching():
    t = _trace()
    assert check_trace(t, **MODEL) is t
    assert check_trace(t, family="huginn_raven", depth=32) is t  # unknown revisions/environment are not compared
    o = _trace(family="nanbeige", profile=None, depths=(2, 2, 2, 2), prefill_depth=2)
    assert check_trace(o, family="nanbeige", depth=2, environment=ENV) is o


@pytest.mark.parametrize("trace_kw,model_kw,msg", [
    ({}, dict(family="ouro"), "latent trace field 'family': trace has 'huginn_raven', model has 'ouro'"),
    (dict(profile="like-init-cpu-f32-v0"), {}, "latent trace field 'profile': trace has 'like-init-cpu-f32-v0', model has 'like-init-cpu-f32-v1'"),
    (dict(profile=None), {}, "latent trace field 'profile': trace has None"),
    (dict(seed=-1), {}, "latent trace field 'seed': must be an int in [0, 2**63), trace has -1"),
    (dict(seed=2**63), {}, "latent trace field 'seed': must be an int in [0, 2**63), trace has 9223372036854775808"),
    (dict(prefill_depth=31), {}, "latent trace field 'prefill_depth': trace has 31, model has 32"),
    (dict(depths=(32, 32, 16, 32)), {}, "latent trace field 'depths': entry 2 is 16, model depth is 32"),
    (dict(depths=(32, 32, 32)), {}, "latent trace field 'depths': 3 entries for response_len 4"),
    ({}, dict(depth=16), "latent trace field 'prefill_depth': trace has 32, model has 16"),
    ({}, dict(model_revision="def"), "latent trace field 'model_revision': trace has 'abc', model has 'def'"),
    (dict(model_revision=None), {}, "latent trace field 'model_revision': trace has None, model has 'abc'"),
    ({}, dict(engine_revision="e2"), "latent trace field 'engine_revision': trace has 'e1', engine has 'e2'"),
    ({}, dict(environment=environment_fingerprint(torch.float32)), "latent trace field 'environment.dtype': trace has 'float16', this process has 'float32'"),
    ({}, dict(environment={**ENV, "torch": "2.6.0"}), "latent trace field 'environment.torch'"),
    ({}, dict(environment={**ENV, "arch": "aarch64"}), "latent trace field 'environment.arch'"),
    ({}, dict(environment={**ENV, "profile": None}), "latent trace field 'environment.profile'"),
    ({}, dict(environment={**ENV, "extra": "x"}), "latent trace field 'environment.extra': trace has None"),
])
def test_check_trace_refuses(trace_kw, model_kw, msg):
    with pytest.raises(TraceMismatch) as e:
        check_trace(_trace(**trace_kw), **{**MODEL, **model_kw})
    assert msg in str(e.value)


def test_check_trace_profiles_by_family():
    o = _trace(family="ouro", profile=LATENT_PROFILE, depths=(4,) * 4, prefill_depth=4)
    with pytest.raises(TraceMismatch, match="'profile': trace has 'like-init-cpu-f32-v1', model has None"):
        check_trace(o, family="ouro", depth=4)
    with pytest.raises(ValueError, match="replays only"): check_trace(_trace(), **MODEL, profile="other")
    with pytest.raises(ValueError, match="no latent state"): check_trace(o, family="ouro", depth=4, profile=LATENT_PROFILE)
    with pytest.raises(TraceError, match="expected a LatentTrace"): check_trace(_trace().to_dict(), **MODEL)
