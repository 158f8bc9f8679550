"""A model directory's tokenizer, loaded once the same way everywhere: a tokenizer that does
not load (a damaged tokenizer.json, a missing vocabulary) is a ModelError naming the directory
and the fix, not an exception from deep inside `tokenizers`."""

from __future__ import annotations

import json
from pathlib import Path

from obsspec.errors import ModelError


def load_tokenizer(model_dir: Path | str):
    """transformers' tokenizer of model_dir."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_dir)
    except Exception as e:  # `tokenizers` raises a bare Exception for a corrupt file
        cause = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ModelError(
            f"model directory {model_dir}: its tokenizer does not load ({cause})",
            hint=repair_hint(Path(model_dir)),
        ) from e


def repair_hint(model_dir: Path) -> str:
    """A model obsspec pulled is pulled again; any other directory needs its files back."""
    from obsspec.models.registry import KNOWN_MODELS

    try:
        name = json.loads((model_dir / "obsspec-model.json").read_text()).get("name")
    except (OSError, ValueError, AttributeError):
        name = None
    if name in KNOWN_MODELS and model_dir.name == name:  # where `models pull` puts it
        return f"run: obsspec models pull {name} (it replaces a damaged copy)"
    return (
        f"restore tokenizer.json and tokenizer_config.json in {model_dir} (a trained model "
        "has those of the model it was trained from)"
    )
