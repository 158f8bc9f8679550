"""Model artefacts: the registry of known models, pulling and converting them, tiny test models.

A model is always, in the end, a local Hugging Face directory (config, safetensors, tokenizer,
chat template) that transformers trains and vLLM serves. Wherever a command takes a model, it
accepts a known name (pulled into the cache), a path to such a directory, or a Hugging Face Hub
id `owner/name[@revision]` (downloaded into the cache when the hub is on, HF_HUB_OFFLINE=0; an
existing directory of the same name wins). See registry.resolve_model.
"""

from obsspec.models.registry import KNOWN_MODELS, ModelSpec, resolve_model
from obsspec.models.store import ModelManifest, installed_models, read_manifest

__all__ = [
    "KNOWN_MODELS",
    "ModelManifest",
    "ModelSpec",
    "installed_models",
    "read_manifest",
    "resolve_model",
]
