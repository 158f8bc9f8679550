"""Tiny randomly initialised models that share a real model's tokenizer and chat template.

Tests and smoke runs use them: they load in seconds, generate fast on a CPU, and produce token
ids in the same vocabulary as the real model, so every code path that handles tokens is real.
Their text is gibberish, which is fine for anything but quality.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from obsspec.errors import ModelError
from obsspec.models.registry import check_hf_dir
from obsspec.models.store import build_manifest, sha256_file, write_manifest


@dataclass(frozen=True)
class TinyShape:
    layers: int = 2
    hidden: int = 128
    heads: int = 2  # head_dim = hidden / heads = 64, a size every vLLM attention backend has
    kv_heads: int = 1
    intermediate: int = 256
    max_positions: int = 8192

    def validate(self) -> None:
        if min(self.layers, self.hidden, self.heads, self.kv_heads, self.intermediate) < 1:
            raise ModelError("tiny model dimensions must all be positive")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ModelError("hidden must be divisible by heads, and heads by kv_heads")


def make_tiny_model(base_dir: Path, out_dir: Path, shape: TinyShape = TinyShape(), seed: int = 0):
    """Write a randomly initialised Llama-style model with base_dir's tokenizer to out_dir."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from obsspec.models.convert import quiet_transformers

    shape.validate()
    check_hf_dir(base_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ModelError(f"output directory {out_dir} is not empty")
    quiet_transformers()
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    config = AutoConfig.from_pretrained(base_dir)
    config.num_hidden_layers = shape.layers
    config.hidden_size = shape.hidden
    config.num_attention_heads = shape.heads
    config.num_key_value_heads = shape.kv_heads
    config.head_dim = shape.hidden // shape.heads
    config.intermediate_size = shape.intermediate
    config.max_position_embeddings = shape.max_positions
    config.dtype = "float32"
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)

    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    base_hash = sha256_file(base_dir / "config.json")
    source = f"tiny-random:{base_dir.name}:seed={seed}:{shape}"
    write_manifest(out_dir, build_manifest(out_dir, out_dir.name, source, base_hash, "float32"))
    return out_dir
