"""Model artefacts: the registry of known models, pulling and converting them, tiny test models.

A model is always, in the end, a local Hugging Face directory (config, safetensors, tokenizer,
chat template) that transformers trains and vLLM serves. Wherever a command takes a model, it
accepts a known name (pulled into the cache) or a path to such a directory.
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
