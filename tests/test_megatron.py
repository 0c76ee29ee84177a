"""`looprl.model.megatron`: native ↔ Megatron-core names and fusions (bit-exact round trips, sabotage twins), the
`--backend megatron` check, and, where megatron-core is importable, a Megatron `GPTModel` on the CPU against looprl's model."""
import importlib.util, os, subprocess, sys
from pathlib import Path
import pytest
import torch

from looprl.model.config import tiny_config
from looprl.model.hf import export_tensors, load_checkpoint, read_tensors, state_digest
from looprl.make_tiny import make_tiny_checkpoint
from looprl.model.models import build_model
import looprl.model.megatron as M

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("huginn_raven", "ouro", "nanbeige")
HAVE_MEGATRON = importlib.util.find_spec("megatron") is not None and importlib.util.find_spec("megatron.core") is not None


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("megatron")
    return {f: make_tiny_checkpoint(f, root / f, seed=11) for f in FAMILIES}


def native(path, cfg, role="actor"):
    "The native state dict of an actor or critic (a critic keeps the trunk and gets a seeded value head), in native order."
    sd = read_tensors(path)
    order = list(build_model(cfg, role, device="meta").state_dict())
    if role == "critic":
        sd.pop("lm_head.weight")
        sd["value_head.weight"] = torch.randn(1, cfg.hidden_size, generator=torch.Generator().manual_seed(5))
    return {n: sd[n] for n in order}


def same_bits(a, b):
    return list(a) == list(b) and all(a[n].dtype == b[n].dtype and a[n].shape == b[n].shape and torch.equal(a[n], b[n]) for n in a)


# ---- the round trip and the mapping ------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["te", "local"])
@pytest.mark.parametrize("role", ["actor", "critic"])
@pytest.mark.parametrize("family", FAMILIES)
def test_round_trip_is_bit_exact(checkpoints, family, role, spec):
    cfg = tiny_config(family)
    sd = native(checkpoints[family], cfg, role)
    mg = M.to_megatron(sd, cfg, spec=spec)
    back = M.from_megatron(mg, cfg, spec=spec)
    assert same_bits(back, sd)
    assert state_digest(back) == state_digest(sd)
    assert all(t.is_contiguous() for t in back.values())


@pytest.mark.parametrize("family", FAMILIES)
def test_publication_digest_equals_torch_backend(checkpoints, family):
    "What the Megatron backend would publish (from_megatron of its parameters) has the torch backend's digest."
    model = load_checkpoint(checkpoints[family])
    torch_pub = export_tensors(model)
    mg = {n: t.clone() for n, t in M.to_megatron(model.state_dict(), model.cfg).items()}    # the Megatron side owns its copy
    meg_pub = M.from_megatron(mg, model.cfg)
    assert same_bits(meg_pub, torch_pub)
    assert state_digest(meg_pub) == state_digest(torch_pub)
    with torch.no_grad(): mg["embedding.word_embeddings.weight"][0, 0] += 1          # a trained step changes the digest
    assert state_digest(M.from_megatron(mg, model.cfg)) != state_digest(torch_pub)


@pytest.mark.parametrize("role", ["actor", "critic"])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_native_tensor_mapped_exactly_once(family, role):
    cfg = tiny_config(family)
    model = build_model(cfg, role, device="meta")
    fixed = set(model.fixed_buffers())
    params = [n for n in model.state_dict() if n not in fixed]
    names = M.megatron_names(cfg, role=role)
    assert list(names) == params                                              # every non-buffer tensor, no other key
    groups = M.megatron_groups(model)
    members = [n for _, ns in groups.values() for n in ns]
    assert sorted(members) == sorted(params)                                  # each native tensor in exactly one group
    assert set(groups) == set(names.values())
    size = {"same": 1, "wqkv": 1, "qkv": 3, "gate_up": 2, "tied": 2}
    assert all(len(ns) == size[kind] for kind, ns in groups.values())
    kinds = [k for k, _ in groups.values()]
    L = cfg.n_prelude + cfg.n_core + cfg.n_coda
    if family == "huginn_raven":
        assert kinds.count("wqkv") == L and kinds.count("tied") == (role == "actor")
    else:
        assert kinds.count("qkv") == kinds.count("gate_up") == cfg.n_core and "tied" not in kinds
    assert ("value_head.weight" in names) == (role == "critic")


def test_names_follow_gpt_model():
    n = M.megatron_names(tiny_config("nanbeige"))
    assert n["model.embed_tokens.weight"] == "embedding.word_embeddings.weight"
    assert n["model.layers.1.self_attn.v_proj.weight"] == "decoder.layers.1.self_attention.linear_qkv.weight"
    assert n["model.layers.1.input_layernorm.weight"] == "decoder.layers.1.self_attention.linear_qkv.layer_norm_weight"
    assert n["model.layers.1.self_attn.o_proj.weight"] == "decoder.layers.1.self_attention.linear_proj.weight"
    assert n["model.layers.1.mlp.gate_proj.weight"] == n["model.layers.1.mlp.up_proj.weight"] == "decoder.layers.1.mlp.linear_fc1.weight"
    assert n["model.layers.1.mlp.down_proj.weight"] == "decoder.layers.1.mlp.linear_fc2.weight"
    assert n["model.layers.1.post_attention_layernorm.weight"] == "decoder.layers.1.mlp.linear_fc1.layer_norm_weight"
    assert n["model.norm.weight"] == "decoder.final_layernorm.weight" and n["lm_head.weight"] == "output_layer.weight"
    local = M.megatron_names(tiny_config("nanbeige"), spec="local")
    assert local["model.layers.1.input_layernorm.weight"] == "decoder.layers.1.input_layernorm.weight"
    assert local["model.layers.1.post_attention_layernorm.weight"] == "decoder.layers.1.pre_mlp_layernorm.weight"
    o = M.megatron_names(tiny_config("ouro"))
    assert o["model.early_exit_gate.bias"] == "early_exit_gate.bias"
    assert o["model.layers.0.post_attention_layernorm_2.weight"] == "decoder.layers.0.mlp.linear_fc2.post_layernorm.weight"
    h = M.megatron_names(tiny_config("huginn_raven"))
    assert h["transformer.core_block.3.attn.Wqkv.weight"] == "decoder.layers.3.self_attention.linear_qkv.weight"
    assert h["transformer.prelude.1.norm_4.weight"] == "prelude.layers.1.mlp_residual_layernorm.weight"
    assert h["transformer.coda.0.attn.qk_bias"] == "coda.layers.0.self_attention.qk_bias"
    assert h["lm_head.weight"] == h["transformer.wte.weight"] == "embedding.word_embeddings.weight"
    assert M.megatron_names(tiny_config("huginn_raven", tie_embeddings=False))["lm_head.weight"] == "output_layer.weight"



@pytest.mark.parametrize("family", FAMILIES)
def test_layout_and_rope_come_from_the_family_record(family):
    "megatron.py holds no family table: the layout and its RoPE flag are the registered record's (Huginn: adjacent pairs)."
    from looprl.model.registry import get_family
    assert M.megatron_layout(family) is get_family(family).megatron_layout
    want = family == "huginn_raven"
    assert M.megatron_config(tiny_config(family))["rotary_interleaved"] is want
    assert not hasattr(M, "MEGATRON_LAYOUTS")


def test_a_family_brings_its_layout_in_its_record():
    "A plugin family is mapped from its record alone; without a layout, or with something else, it is refused by name."
    from dataclasses import replace
    from looprl.model.registry import get_family, register, unregister
    toy = replace(get_family("nanbeige"), name="toyloop", tiny={"model_type": "toyloop"}, presets={}, megatron_layout=None)
    register(toy)
    try:
        with pytest.raises(M.MegatronLayoutError, match="family 'toyloop' has no Megatron-core layout; known: huginn_raven, ouro, nanbeige$"):
            M.megatron_layout("toyloop")
        own = M.MegatronLayout(top={"emb.weight": "embedding.word_embeddings.weight"}, stacks={"blocks": "decoder.layers"},
                               layer={"w.weight": ("mlp.linear_fc2.weight", "same")}, rotary_interleaved=True)
        register(replace(toy, megatron_layout=own), replace=True)
        assert M.megatron_layout("toyloop") is own
        assert M.megatron_names("toyloop") == {"emb.weight": "embedding.word_embeddings.weight",
                                               "blocks.{i}.w.weight": "decoder.layers.{i}.mlp.linear_fc2.weight"}
        register(replace(toy, megatron_layout={"top": {}}), replace=True)
        with pytest.raises(M.MegatronLayoutError, match="family 'toyloop': megatron_layout must be a MegatronLayout, got dict"):
            M.megatron_layout("toyloop")
    finally: unregister("toyloop")


def test_real_configs_map_without_memory():
    "The real presets' names come from meta-device models: the 3B Nanbeige has 201 native tensors → 201 − 3·22 Megatron ones."
    from looprl.model.config import real_config
    n = M.megatron_names(real_config("nanbeige4.2-3b"))
    assert len(n) == 201 and len(set(n.values())) == 201 - 3 * 22
    h = M.megatron_names(real_config("huginn-0125"))
    assert len(h) == 76 and len(set(h.values())) == 75


# ---- the fused QKV layout ----------------------------------------------------------------------------------------

def test_fused_qkv_layout_by_hand():
    "GQA, 6 query heads in 2 groups, head_dim 3, two input columns: each row names its head and place."
    H, G, D = 6, 2, 3
    row = lambda tag, h, d: [tag * 1000 + h * 10 + d, -(tag * 1000 + h * 10 + d)]
    q = torch.tensor([row(1, h, d) for h in range(H) for d in range(D)], dtype=torch.float64)
    k = torch.tensor([row(2, g, d) for g in range(G) for d in range(D)], dtype=torch.float64)
    v = torch.tensor([row(3, g, d) for g in range(G) for d in range(D)], dtype=torch.float64)
    w = M.qkv_to_megatron(q, k, v, n_groups=G)
    want = [row(1, h, d) for h in (0, 1, 2) for d in range(D)] + [row(2, 0, d) for d in range(D)] + [row(3, 0, d) for d in range(D)] \
         + [row(1, h, d) for h in (3, 4, 5) for d in range(D)] + [row(2, 1, d) for d in range(D)] + [row(3, 1, d) for d in range(D)]
    assert w.tolist() == want
    # the split Megatron's get_query_key_value_tensors makes: view [G, (H/G + 2)·D], split [H/G·D, D, D]
    qs, ks, vs = w.view(G, (H // G + 2) * D, 2).split([H // G * D, D, D], dim=1)
    assert torch.equal(qs.reshape(-1, 2), q) and torch.equal(ks.reshape(-1, 2), k) and torch.equal(vs.reshape(-1, 2), v)
    assert all(torch.equal(a, b) for a, b in zip(M.qkv_from_megatron(w, H, G, D), (q, k, v)))
    assert not torch.equal(M.qkv_to_megatron(q, v, k, n_groups=G), w)            # k/v order matters
    assert not torch.equal(M.qkv_to_megatron(q, k, v, n_groups=1), w)            # so does the group count


def test_wrong_group_count_fails_the_layout_check():
    H, D = 4, 2
    q, k, v = torch.randn(H * D, 3), torch.randn(2 * D, 3), torch.randn(2 * D, 3)
    w = M.qkv_to_megatron(q, k, v, n_groups=2)
    for g in (1, 4):
        with pytest.raises(M.MegatronLayoutError, match="need"): M.qkv_from_megatron(w, H, g, D)
    with pytest.raises(M.MegatronLayoutError, match="do not split into 3"): M.qkv_from_megatron(w, H, 3, D)
    with pytest.raises(M.MegatronLayoutError, match="differ in shape"): M.qkv_to_megatron(q, k, v[:2], n_groups=2)


@pytest.mark.parametrize("family", FAMILIES)
def test_sabotaged_kv_order_fails_the_round_trip(checkpoints, family, monkeypatch):
    cfg = tiny_config(family)
    sd = native(checkpoints[family], cfg)
    assert same_bits(M.from_megatron(M.to_megatron(sd, cfg), cfg), sd)
    real = M.qkv_to_megatron
    monkeypatch.setattr(M, "qkv_to_megatron", lambda q, k, v, n_groups: real(q, v, k, n_groups))
    assert not same_bits(M.from_megatron(M.to_megatron(sd, cfg), cfg), sd)


@pytest.mark.parametrize("family", ["nanbeige", "ouro"])
def test_sabotaged_group_count_fails(checkpoints, family, monkeypatch):
    "Fusing with another group count than splitting: a layout error (the row count cannot match) or a failed round trip."
    cfg = tiny_config(family)
    sd = native(checkpoints[family], cfg)
    real = M.qkv_to_megatron
    monkeypatch.setattr(M, "qkv_to_megatron", lambda q, k, v, n_groups: real(q, k, v, 1 if n_groups > 1 else 2))
    try: back = M.from_megatron(M.to_megatron(sd, cfg), cfg)
    except M.MegatronLayoutError: return
    assert not same_bits(back, sd)


def test_sabotaged_gate_up_order_fails(checkpoints, monkeypatch):
    cfg = tiny_config("nanbeige")
    sd = native(checkpoints["nanbeige"], cfg)
    real = M.gate_up_to_megatron
    monkeypatch.setattr(M, "gate_up_to_megatron", lambda gate, up: real(up, gate))
    assert not same_bits(M.from_megatron(M.to_megatron(sd, cfg), cfg), sd)


def test_refusals_name_the_tensor(checkpoints):
    cfg = tiny_config("ouro")
    sd = native(checkpoints["ouro"], cfg)
    mg = M.to_megatron(sd, cfg)
    with pytest.raises(M.MegatronLayoutError, match="missing tensor model.early_exit_gate.bias"):
        M.to_megatron({n: t for n, t in sd.items() if n != "model.early_exit_gate.bias"}, cfg)
    with pytest.raises(M.MegatronLayoutError, match="missing tensor decoder.layers.2.mlp.linear_fc2.post_layernorm.weight"):
        M.from_megatron({n: t for n, t in mg.items() if n != "decoder.layers.2.mlp.linear_fc2.post_layernorm.weight"}, cfg)
    with pytest.raises(M.MegatronLayoutError, match="unexpected tensor extra.weight"):
        M.from_megatron({**mg, "extra.weight": mg["adapter.weight"] if "adapter.weight" in mg else mg["output_layer.weight"]}, cfg)
    assert same_bits(M.from_megatron({**mg, "decoder.layers.0.mlp.linear_fc1._extra_state": None}, cfg), sd)
    with pytest.raises(M.MegatronLayoutError, match="'gpt2' has no Megatron-core layout; known: huginn_raven, ouro, nanbeige"):
        M.megatron_layout("gpt2")
    hcfg = tiny_config("huginn_raven")
    hsd = native(checkpoints["huginn_raven"], hcfg)
    with pytest.raises(M.MegatronLayoutError, match="tied lm_head.weight differs from transformer.wte.weight"):
        M.to_megatron({**hsd, "lm_head.weight": hsd["lm_head.weight"].clone().index_fill_(0, torch.tensor([3]), 0.5)}, hcfg)
    with pytest.raises(M.MegatronLayoutError, match="freqs_cis does not equal the RoPE buffer"):
        M.to_megatron({**hsd, "freqs_cis": hsd["freqs_cis"] * (1 + 2 ** -20)}, hcfg)


# ---- the backend check -------------------------------------------------------------------------------------------

def availability(monkeypatch, cuda: bool, megatron: str | None):
    monkeypatch.setattr(M, "cuda_available", lambda: cuda)
    monkeypatch.setattr(M, "megatron_core_version", lambda: megatron)


def test_torch_backend_passes(monkeypatch):
    availability(monkeypatch, False, None)
    for device in ("cpu", "cuda", None): M.check_backend("torch", device)


def test_megatron_without_megatron_core(monkeypatch):
    availability(monkeypatch, True, None)
    with pytest.raises(M.UsageError) as e: M.check_backend("megatron", "cuda")
    msg = str(e.value)
    assert msg.startswith("--backend megatron: megatron-core is not importable: install it with `pip install megatron-core")
    assert "CUDA" not in msg and "\n" not in msg
    if sys.version_info < (3, 12): assert "megatron-core==0.16.1" in msg and "Python >= 3.12" in msg


def test_megatron_without_cuda(monkeypatch):
    availability(monkeypatch, False, "0.16.1")
    with pytest.raises(M.UsageError, match=r"^--backend megatron: CUDA is not available \(torch .* sees no CUDA device\)$"):
        M.check_backend("megatron", "cuda")


def test_megatron_without_either_names_both(monkeypatch):
    availability(monkeypatch, False, None)
    with pytest.raises(M.UsageError) as e: M.check_backend("megatron", "cuda")
    assert "CUDA is not available" in str(e.value) and "megatron-core is not importable" in str(e.value)


def test_megatron_on_the_cpu_device(monkeypatch):
    availability(monkeypatch, True, "0.16.1")
    for device in ("cpu", None):
        with pytest.raises(M.UsageError, match="trains on CUDA GPUs only: add --device cuda"): M.check_backend("megatron", device)


def test_megatron_with_both_passes(monkeypatch):
    availability(monkeypatch, True, "0.16.1")
    M.check_backend("megatron", "cuda")


def test_unknown_backend():
    with pytest.raises(M.UsageError, match="--backend: unknown backend 'fsdp'; choose one of torch, megatron"):
        M.check_backend("fsdp", "cpu")


def test_install_hint_by_python_version():
    assert "megatron-core==0.16.1" in M.megatron_install_hint((3, 11)) and "3.11" in M.megatron_install_hint((3, 11))
    assert M.megatron_install_hint((3, 12)) == "install it with `pip install megatron-core`"


def run_python(code: str):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_import_never_needs_megatron_core_and_refusal_exits_2():
    """With `megatron` unimportable, looprl, looprl.model.megatron and looprl.training.trainer import without touching it, and the
    refusal is one line on stderr with exit status 2 (as the train command reports a UsageError)."""
    r = run_python("import sys; sys.modules['megatron'] = None\n"
                   "import looprl, looprl.model.megatron as M, looprl.training.trainer\n"
                   "from looprl.core.cli import refuse_bad_input\n"
                   "assert M.megatron_core_version() is None\n"
                   "print(sorted(m for m in sys.modules if m.startswith('megatron') and sys.modules[m] is not None))\n"
                   "with refuse_bad_input('train'): M.check_backend('megatron', 'cuda')")
    assert r.stdout.strip() == "[]", r.stderr
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("looprl.train: --backend megatron: ") and "megatron-core is not importable" in lines[0]


@pytest.mark.skipif('"--backend"' not in (ROOT / "looprl" / "train.py").read_text(), reason="the train command has no --backend flag yet")
def test_train_command_refuses_megatron_backend(tmp_path):
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "looprl.train", "--backend", "megatron", "--output", str(out), "--updates", "1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("looprl.train: --backend megatron: ")
    assert not out.exists()


# ---- megatron-core on the CPU (skipped where it is absent) -------------------------------------------------------

@pytest.fixture(scope="module")
def megatron_cpu():
    "A gloo group of one, TP = PP = 1, and the inference RNG tracker (DotProductAttention forks it even without dropout)."
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import initialize_rng_tracker
    own = not dist.is_initialized()
    if own: dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
    yield
    parallel_state.destroy_model_parallel()
    if own: dist.destroy_process_group()


def megatron_gpt(cfg):
    import torch.nn.functional as F
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig
    kw = M.megatron_config(cfg)
    rot = kw.pop("rotary")
    tc = TransformerConfig(**kw, activation_func=F.silu, hidden_dropout=0.0, attention_dropout=0.0, use_cpu_initialization=True,
                           params_dtype=torch.float32, bias_dropout_fusion=False, apply_rope_fusion=False,
                           masked_softmax_fusion=False, gradient_accumulation_fusion=False, persist_layer_norm=False)
    return GPTModel(tc, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"), vocab_size=cfg.vocab_size,
                    max_sequence_length=rot["max_sequence_length"], position_embedding_type="rope",
                    rotary_base=rot["rotary_base"], share_embeddings_and_output_weights=False).eval()


@pytest.mark.skipif(not HAVE_MEGATRON, reason="megatron-core is not installed")
def test_megatron_gpt_model_matches_looprl_on_cpu(checkpoints, megatron_cpu, monkeypatch):
    torch.set_num_threads(1)
    ck = checkpoints["nanbeige"]
    ours = load_checkpoint(ck).eval()
    cfg, sd = ours.cfg, read_tensors(ck)
    gpt = megatron_gpt(cfg)
    r = gpt.load_state_dict(M.to_megatron(sd, cfg, spec="local"), strict=False)
    assert r.unexpected_keys == [] and all(k.endswith("._extra_state") for k in r.missing_keys)
    assert same_bits(M.from_megatron(gpt.state_dict(), cfg, spec="local"), {n: sd[n] for n in ours.state_dict()})
    sharded = {k: v for k, v in gpt.sharded_state_dict().items() if not k.endswith("_extra_state")}
    te = M.megatron_names(cfg, spec="te")
    local = M.megatron_names(cfg, spec="local")
    for n in te:             # the distributed checkpoint stacks layers: its key is the te name without the layer index
        sh = sharded[local[n]]
        if ".layers." in te[n]:
            i = int(te[n].split(".layers.")[1].split(".")[0])
            assert sh.key == te[n].replace(f".layers.{i}.", ".layers.")
            if hasattr(sh, "global_offset"): assert sh.global_offset[0] == i     # (linear_fc1 is a swiglu factory: no offset)
        else: assert sh.key == te[n]

    S = 13
    ids = torch.randint(3, cfg.vocab_size, (2, S), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(S).expand(2, S)
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1)[None, None]     # True: masked
    # RotaryEmbedding.get_emb moves inv_freq to torch.cuda.current_device() when it is on the CPU
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    with torch.no_grad():
        one = load_checkpoint(ck, cfg=cfg.with_depth(1)).eval()
        d1 = (gpt(ids, pos, attention_mask=mask) - one.logits(one(ids))).abs().max().item()
        h, rope = gpt.embedding(input_ids=ids, position_ids=pos), gpt.rotary_pos_emb(S)
        for _ in range(cfg.depth): h = gpt.decoder(hidden_states=h, attention_mask=mask, rotary_pos_emb=rope)
        d2 = (gpt.output_layer(h)[0].transpose(0, 1) - ours.logits(ours(ids))).abs().max().item()
    print(f"max |Δ logit| FP32: GPTModel.forward vs one loop {d1:.3g}; decoder × {cfg.depth} vs looprl {d2:.3g}")
    assert d1 < 1e-4 and d2 < 1e-4
    bad = M.to_megatron(sd, cfg, spec="local")              # sabotage: q | k | v concatenated without the per-group order
    for i in range(cfg.n_core):
        n = f"decoder.layers.{i}.self_attention.linear_qkv.weight"
        bad[n] = torch.cat(M.qkv_from_megatron(bad[n], cfg.n_heads, cfg.n_kv_heads, cfg.head_dim))
    gpt.load_state_dict(bad, strict=False)
    with torch.no_grad(): assert (gpt(ids, pos, attention_mask=mask) - one.logits(one(ids))).abs().max().item() > 1e-2
