"""GGUF -> Hugging Face safetensors directory (dequantised), which transformers and vLLM load."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from obsspec.errors import ModelError


def quiet_transformers() -> None:
    """Hide transformers' per-tensor progress bars and advisory warnings; we report progress."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def gguf_to_hf(gguf_path: Path, out_dir: Path, dtype: str) -> None:
    """Write config, weights, tokenizer and chat template of a GGUF model into out_dir.

    transformers dequantises GGUF tensors on load but keeps a quantization config that makes
    `save_pretrained` refuse; so the model is rebuilt from its config without that entry and
    the dequantised state dict is loaded into it.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_transformers()
    folder, name = str(gguf_path.parent), gguf_path.name
    # The GGUF reader draws its own per-tensor progress bar on stderr; the caller reports
    # progress in its own way, so the bar is captured (and dropped unless loading fails).
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    except Exception as e:  # transformers raises many types for a bad file
        raise ModelError(f"cannot read GGUF file {gguf_path}: {e}") from e
    if tokenizer.chat_template is None:
        raise ModelError(f"GGUF file {gguf_path} carries no chat template")

    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(loaded).__name__]
    torch_dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    del loaded
    model = model.to(torch_dtype)
    model.config.dtype = dtype

    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
