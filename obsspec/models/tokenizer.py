"""A model directory's tokenizer, loaded once the same way everywhere: a tokenizer that does
not load (a damaged tokenizer.json, a missing vocabulary), or that has no chat template (a
base model's: every policy and world model context is rendered with one), is a ModelError
naming the directory and the fix, not an exception from deep inside `tokenizers` or
`transformers` at the first prompt."""

from __future__ import annotations

import json
from pathlib import Path

from obsspec.errors import ModelError


def load_tokenizer(model_dir: Path | str):
    """transformers' tokenizer of model_dir."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except Exception as e:  # `tokenizers` raises a bare Exception for a corrupt file
        cause = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ModelError(
            f"model directory {model_dir}: its tokenizer does not load ({cause})",
            hint=repair_hint(Path(model_dir)),
        ) from e
    if not tokenizer.chat_template:
        raise ModelError(
            f"model directory {model_dir}: its tokenizer has no chat template",
            hint=repair_hint(
                Path(model_dir),
                f"use an instruct model, or add its chat_template.jinja to {model_dir} (a "
                "trained model has that of the model it was trained from)",
            ),
        )
    return tokenizer


def repair_hint(model_dir: Path, otherwise: str | None = None) -> str:
    """A model obsspec pulled is pulled again; any other directory needs its files back
    (otherwise: what to do then, when not its tokenizer files)."""
    from obsspec.models.registry import KNOWN_MODELS

    try:
        name = json.loads((model_dir / "obsspec-model.json").read_text()).get("name")
    except (OSError, ValueError, AttributeError):
        name = None
    if name in KNOWN_MODELS and model_dir.name == name:  # where `models pull` puts it
        return f"run: obsspec models pull {name} (it replaces a damaged copy)"
    return otherwise or (
        f"restore tokenizer.json and tokenizer_config.json in {model_dir} (a trained model "
        "has those of the model it was trained from)"
    )
