"""A looped family from outside looprl, reached only through the `looprl.families` entry point (tests/test_families.py):
the Llama vocabulary with its own loop-count key, on looprl's Nanbeige provider."""
from looprl.model.config import LLAMA_SIZE_KEYS, llama_fields
from looprl.model.families.nanbeige import NanbeigeLM
from looprl.model.registry import Family

def loopllama_fields(raw: dict, src: str) -> dict:
    "LoopedConfig fields of a loopllama config.json: Llama keys, all layers looped `loop_count` times."
    return llama_fields(raw, src, "loop_count")

TINY = {"model_type": "loopllama", "vocab_size": 1024, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "hidden_act": "silu", "max_position_embeddings": 256,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "loop_count": 3, "tie_word_embeddings": False,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "float32"}

FAMILY = Family(name="loopllama", parse=loopllama_fields, provider=NanbeigeLM, depth_key="loop_count",
                default_precision="fp32", tiny=TINY, size_keys=LLAMA_SIZE_KEYS)
