"""Random-weight checkpoints for the scripts in benchmarks/gpu/ (no weights are downloaded):
  full: Huginn-0125 shapes in FP16 (3.5B parameters) in /tmp/h0125;
  mid:  a mid-size FP32 Huginn (n_embd 1024, 8 heads of 128, 8 recurrences) in /tmp/hmid.
usage: python3 benchmarks/gpu/make_checkpoints.py full|mid [full|mid]"""
import sys, torch
from looprl.model.config import real_config, tiny_config
from looprl.model.models import build_model, init_weights
from looprl.model.hf import save_checkpoint
from looprl.tasks.data import build_char_tokenizer, TINY_ALPHABET

if not sys.argv[1:] or set(sys.argv[1:]) - {"full", "mid"}: sys.exit(f"make_checkpoints.py: sizes are full and mid, got {sys.argv[1:]}\n{__doc__}")
tok = build_char_tokenizer(TINY_ALPHABET)
if "full" in sys.argv:
    m = build_model(real_config("huginn-0125"), device="cuda", dtype=torch.float16)
    init_weights(m, seed=0)
    save_checkpoint(m, "/tmp/h0125", tokenizer=tok, max_shard_bytes=4 << 30)
    del m; torch.cuda.empty_cache()
if "mid" in sys.argv:
    mid = tiny_config("huginn_raven", n_embd=1024, n_heads=8, head_dim=128, num_key_value_heads=8, intermediate_size=2816,
                      vocab_size=32768, padded_vocab_size=32768, block_size=1024, mean_recurrence=8)
    save_checkpoint(init_weights(build_model(mid), seed=1, perturb_norms=True), "/tmp/hmid", tokenizer=tok)
print("checkpoints written", sys.argv[1:])
