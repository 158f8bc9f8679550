"""A shallower model made of some of a model's decoder layers (`obsspec train-wm --layers K`).

    shallow = shallow_model(base_dir, 6, models_dir)   # cached; shallow.path is an HF directory
    shallow.kept                                       # [0, 6, 12, 17, 23, 29] of 30

The world model's cost is its depth: every predicted token runs every decoder layer, and a
world model as deep as the policy predicts little faster than the commands it guesses. Taking
K of the N layers keeps the tokenizer, the embeddings and the output layer (so the model
still speaks the policy's vocabulary and chat template) and starts training from weights that
already compute something, where a randomly initialised small model would start from nothing.

Which layers: `even` (the default) keeps the first and the last and spreads the rest evenly
between them. The first layer turns embeddings into the residual stream every later layer
reads, and the last one writes the stream the output layer was trained on; the ones between
change the stream a little each, so skipping every few of them leaves a model whose
fine-tuning recovers fast. `bottom` keeps the first K-1 and the last (an alternative measured
in docs/train-wm.md).

The copy works on the safetensors files, not through transformers: the layers' tensors
(`<prefix>.layers.<i>.<rest>`) are renamed to their new indices, shard by shard (memory: one
shard at a time), dtype untouched; the config gets `num_hidden_layers = K` and any per-layer
list sliced. A model whose layers are not numbered that way, or whose config says something
per layer that cannot be sliced, is refused with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from obsspec.errors import ConfigError, ModelError
from obsspec.models.store import exclusive_lock

CHOICES = ("even", "bottom")
RECORD_NAME = "obsspec-shallow.json"
# `model.layers.3.mlp.up_proj.weight` -> prefix `model.layers`, index 3, rest `mlp.up_proj.weight`
LAYER_KEY = re.compile(r"^(?P<prefix>(?:.+\.)?layers)\.(?P<index>\d+)\.(?P<rest>.+)$")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
# Config fields that list layer indices: remapping them would change what the layers are.
INDEX_LISTS = ("mlp_only_layers", "full_attention_idxs", "sliding_window_layers")


@dataclass(frozen=True)
class ShallowModel:
    path: Path
    kept: list[int]  # the base's layer indices, in order
    of: int  # the base's layer count

    def as_dict(self) -> dict:
        return {"path": str(self.path), "kept": self.kept, "of": self.of}


def chosen_layers(total: int, k: int, choice: str = "even") -> list[int]:
    """K of `total` layer indices, ascending; the first and the last always among them."""
    if not 2 <= k <= total:
        raise ConfigError(f"--layers {k}: the model has {total} layers; choose 2 to {total}")
    if choice == "bottom":
        return [*range(k - 1), total - 1]
    if choice != "even":
        raise ConfigError(f"layer_choice {choice!r}: choose one of {', '.join(CHOICES)}")
    return [round(i * (total - 1) / (k - 1)) for i in range(k)]


def layer_count(config: dict, source: Path) -> int:
    total = config.get("num_hidden_layers")
    if not isinstance(total, int) or total < 1:
        raise ModelError(
            f"{source}/config.json has no top-level num_hidden_layers: --layers takes layers "
            "only from a plain decoder-only model (a multimodal or nested config is not one)"
        )
    return total


def shallow_config(config: dict, shallow: ShallowModel, source: Path) -> dict:
    """The config of the K-layer model: the count changed, per-layer lists sliced."""
    total, kept = shallow.of, shallow.kept
    for field in INDEX_LISTS:
        if config.get(field):
            raise ModelError(
                f"{source}/config.json: {field} names layers by index ({config[field]}); "
                "--layers cannot take layers from such a model"
            )
    windowed = config.get("use_sliding_window") and config.get("max_window_layers", total) < total
    if windowed:
        raise ModelError(
            f"{source}/config.json: sliding-window attention on some layers only "
            "(max_window_layers); --layers cannot take layers from such a model"
        )
    shallow = dict(config, num_hidden_layers=len(kept))
    for field, value in config.items():
        if isinstance(value, list) and len(value) == total and field != "architectures":
            shallow[field] = [value[i] for i in kept]  # e.g. layer_types, no_rope_layers
    return shallow


def renamed(key: str, new_index: dict[int, int]) -> str | None:
    """The tensor's name in the shallow model, or None when its layer is left out."""
    match = LAYER_KEY.match(key)
    if match is None:
        return key  # embeddings, final norm, output layer
    index = int(match["index"])
    if index not in new_index:
        return None
    return f"{match['prefix']}.{new_index[index]}.{match['rest']}"


def weight_shards(base: Path) -> list[str]:
    index = base / "model.safetensors.index.json"
    if index.is_file():
        return sorted(set(json.loads(index.read_text())["weight_map"].values()))
    shards = sorted(p.name for p in base.glob("*.safetensors"))
    if not shards:
        raise ModelError(f"{base}: --layers needs safetensors weights (found none)")
    return shards


def check_layer_tensors(base: Path, shards: list[str], total: int) -> None:
    """Every layer 0..N-1 must be found under one `<prefix>.layers.<i>.` name."""
    from safetensors import safe_open

    seen: dict[str, set[int]] = {}
    for shard in shards:
        with safe_open(base / shard, framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                match = LAYER_KEY.match(key)
                if match:
                    seen.setdefault(match["prefix"], set()).add(int(match["index"]))
    if list(seen.values()) != [set(range(total))]:
        found = {prefix: len(indices) for prefix, indices in seen.items()} or "none"
        raise ModelError(
            f"{base}: --layers needs the {total} decoder layers' weights named "
            f"`<prefix>.layers.<i>.*` under one prefix; found {found}"
        )


def write_shallow(base: Path, config: dict, shallow: ShallowModel, out: Path) -> None:
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    written_config = shallow_config(config, shallow, base)
    shards = weight_shards(base)
    check_layer_tensors(base, shards, shallow.of)
    new_index = {old: new for new, old in enumerate(shallow.kept)}
    weight_map: dict[str, str] = {}
    for shard in shards:
        tensors: dict[str, torch.Tensor] = {}
        with safe_open(base / shard, framework="pt") as f:
            metadata = f.metadata() or {"format": "pt"}
            for key in f.keys():  # noqa: SIM118
                name = renamed(key, new_index)
                if name is not None:
                    tensors[name] = f.get_tensor(key)
        if tensors:
            save_file(tensors, out / shard, metadata=metadata)
            weight_map.update(dict.fromkeys(tensors, shard))
    if len(shards) > 1:
        index = {"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (out / "config.json").write_text(json.dumps(written_config, indent=2) + "\n")
    for path in base.iterdir():  # tokenizer, chat template, generation config
        if path.is_file() and not left_behind(path.name):
            shutil.copy2(path, out / path.name)


def left_behind(name: str) -> bool:
    """The base's weights, config and records, which say nothing true of the shallow copy."""
    weights = name.endswith(WEIGHT_SUFFIXES) or name.startswith(("model.", "pytorch_model"))
    return weights or name == "config.json" or name.startswith("obsspec-")


def base_key(base: Path) -> str:
    """Names the base's content: its config, and its weight files' sizes and times."""
    digest = hashlib.sha256((base / "config.json").read_bytes())
    for path in sorted(base.glob("*.safetensors")):
        stat = path.stat()
        digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:12]


def shallow_model(base: Path, k: int, models_dir: Path, choice: str = "even") -> ShallowModel:
    """base's K-layer copy, made once into models_dir/shallow/ and reused; K = N is the base."""
    config = json.loads((base / "config.json").read_text())
    total = layer_count(config, base)
    kept = chosen_layers(total, k, choice)
    if k == total:
        return ShallowModel(base, kept, total)
    name = f"{base.name}-{choice}-{k}of{total}-{base_key(base)}"
    path = models_dir / "shallow" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    shallow = ShallowModel(path, kept, total)
    with exclusive_lock(path.with_name(f".{name}.lock")):  # two runs asking at once: one copy
        if not (path / RECORD_NAME).is_file():
            make_shallow(base, config, shallow, choice)
    return shallow


def make_shallow(base: Path, config: dict, shallow: ShallowModel, choice: str) -> None:
    """Written beside its place and renamed into it: a crash leaves no half-made model."""
    path = shallow.path
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        write_shallow(base, config, shallow, tmp)
        record = {"base": str(base), "kept": shallow.kept, "of": shallow.of, "choice": choice}
        (tmp / RECORD_NAME).write_text(json.dumps(record, indent=2) + "\n")
        shutil.rmtree(path, ignore_errors=True)  # one a crash left without its record
        tmp.rename(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
