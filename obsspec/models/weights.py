"""A model directory's weights checked before anything is made or started: each
*.safetensors file must have a readable header that its data covers. Reading only the headers
takes milliseconds; a damaged file (a bad copy, a full disk, random bytes) is then a ModelError
naming the file, not an error deep inside transformers or vLLM after a run directory was
made or an engine began to start."""

from __future__ import annotations

from pathlib import Path

from obsspec.errors import ModelError


def check_weights(model_dir: Path | str) -> None:
    """Every safetensors file of model_dir opens (a directory without one is left to the
    loader, which names what it lacks)."""
    from safetensors import safe_open

    from obsspec.models.tokenizer import repair_hint

    model_dir = Path(model_dir)
    for file in sorted(model_dir.glob("*.safetensors")):
        try:
            # numpy: no torch import for a header; the tensors are not read
            with safe_open(str(file), framework="numpy") as weights:
                weights.keys()
        except Exception as e:  # safetensors' SafetensorError, or OSError
            cause = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ModelError(
                f"model weights {file} do not load ({cause})",
                hint=repair_hint(model_dir, f"replace {file} with an intact copy"),
            ) from e
