"""Resumable checkpoints during training, and the final model an engine serves.

    OUT/                            the trained model: config.json, model.safetensors,
                                    tokenizer files (vLLM and transformers load it as is)
    OUT/checkpoints/step-00000050/  state/ (float32 weights and optimizer state, sharded:
                                    every rank writes its own part; train/dcp.py), model/
                                    (bfloat16 weights with the tokenizer, which vLLM serves,
                                    or the LoRA adapter) + trainer.pt (schedule, step, RNG,
                                    run identity)
    OUT/checkpoints/.step-*.tmp     a checkpoint being written (ignored, then removed)
    OUT/obsspec-train.json          the training record: settings, data, tasks, results

Every directory appears by rename once complete, so a run killed at any moment resumes from
its last whole checkpoint. Checkpoints written before state/ (float32 model/, the optimizer in
trainer.pt) still resume (TrainerCore.load).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path
from typing import Any

from obsspec.errors import ConfigError
from obsspec.models.tokenizer import load_tokenizer
from obsspec.rundirs import Inputs, check_replaceable, is_empty, mark
from obsspec.train import distributed

PREFIX = "step-"


class Checkpoints:
    def __init__(self, root: Path, keep: int) -> None:
        self.root = root
        self.keep = keep

    def all(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if p.is_dir() and p.name.startswith(PREFIX))

    def latest(self) -> Path | None:
        found = self.all()
        return found[-1] if found else None

    def save(self, step: int, core, extra: dict[str, Any]) -> Path:
        """Step's checkpoint of a TrainerCore (core.save, with `extra` in trainer.pt); every
        rank calls, rank 0 writes."""
        main = distributed.current().main
        tmp = self.begin(step) if main else self.partial(step)
        core.save(tmp, extra)
        if main:
            self.commit(tmp, step)
        distributed.barrier()
        return self.root / f"{PREFIX}{step:08d}"

    def begin(self, step: int) -> Path:
        """An empty directory to write step's checkpoint into (not yet a checkpoint)."""
        tmp = self.partial(step)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        return tmp

    def partial(self, step: int) -> Path:
        return self.root / f".{PREFIX}{step:08d}.tmp"

    def commit(self, tmp: Path, step: int) -> Path:
        """Rename a whole checkpoint into place; keep only the last `keep`."""
        final = self.root / f"{PREFIX}{step:08d}"
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for old in self.all()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def remove_partial(self) -> None:
        if self.root.is_dir():
            for tmp in self.root.glob(".*.tmp"):
                shutil.rmtree(tmp, ignore_errors=True)


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    import torch

    return torch.load(checkpoint / "trainer.pt", weights_only=False)


def save_hf_weights(
    model,
    out: Path,
    state: dict | None = None,
    *,
    dtype: str = "bfloat16",
    tokenizer=None,
) -> Path:
    """An HF directory an engine serves: config.json (its dtype `dtype`), safetensors of the
    weights cast to `dtype` (`state`, the whole float32 weights, when the model's own are
    sharded) and `tokenizer`'s files with its chat template, into `out`, which appears whole
    or not at all: what an engine reloads in place (RL weight sync), and a checkpoint's
    model/. A LoRA (peft) model is saved as its adapter, in the dtype it trains in."""
    from obsspec.train.model import is_peft

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    old = out.with_name(f".{out.name}.old")
    shutil.rmtree(tmp, ignore_errors=True)
    if is_peft(model):
        model.save_pretrained(tmp, safe_serialization=True)  # peft takes no state_dict
    else:
        weights = cast(model.state_dict() if state is None else state, dtype)
        model.save_pretrained(tmp, safe_serialization=True, state_dict=weights)
        config = copy.deepcopy(model.config)  # the trained model's own says float32
        config.dtype = dtype
        config.save_pretrained(tmp)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    if out.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    return out


def cast(state: dict, dtype: str) -> dict:
    """`state`'s tensors in `dtype` (on the CPU); tensors that share storage (tied input and
    output embeddings) still share it, so they are saved once."""
    import torch

    target = getattr(torch, dtype)
    done: dict = {}
    out = {}
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tensor.shape)
        if key not in done:
            done[key] = tensor.detach().to("cpu", target)
        out[name] = done[key]
    return out


def read_full_weights(model, folder: Path) -> dict:
    """The safetensors weights saved in `folder`, checked against `model`'s parameter names."""
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ConfigError(f"--resume: {folder} holds no weights")
    state: dict = {}
    for path in files:
        state.update(load_file(path))
    names = set(model.state_dict())
    missing, unexpected = names - set(state), set(state) - names
    # tied output embeddings are saved once; anything else missing is a broken checkpoint
    if unexpected or any("lm_head" not in name for name in missing):
        raise ConfigError(f"--resume: {folder} does not match the model being trained")
    return state


def save_final(model, base: Path, out: Path, dtype: str) -> None:
    """Merge any LoRA adapter, save weights and the base's tokenizer into `out`."""
    import torch

    from obsspec.train.model import is_peft

    if is_peft(model):
        model = model.merge_and_unload()
    model = model.to(dtype=getattr(torch, dtype))
    tmp = out / ".model.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    load_tokenizer(base).save_pretrained(tmp)
    for path in sorted(tmp.iterdir(), key=lambda p: p.name == "config.json"):
        os.replace(path, out / path.name)  # config.json last: a loader sees weights first
    tmp.rmdir()


RECORD = "obsspec-train.json"  # what was trained, on what, and how it went


def prepare_out(
    out: Path, *, resume: bool, overwrite: bool, command: str, inputs: Inputs | None = None
) -> None:
    """Refuse to train over something unless told to resume it or replace it; replace only
    an earlier run of `command` that holds none of its inputs (obsspec.rundirs)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a directory")
    if overwrite and out.exists():
        check_replaceable(out, command, inputs)  # before anything is deleted
        shutil.rmtree(out)
    if out.exists() and not is_empty(out) and not resume:
        raise ConfigError(
            f"--out {out} is not empty (a trained model or its checkpoints?); use --resume to "
            "continue its training, --overwrite to replace it, or another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    mark(out, command)


def write_record(out: Path, record: dict[str, Any]) -> None:
    tmp = out / f".{RECORD}.tmp"
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n")
    os.replace(tmp, out / RECORD)


def read_record(model_dir: Path) -> dict[str, Any] | None:
    """The training record of a model trained here, or None (any other model)."""
    path = model_dir / RECORD
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: unreadable training record: {e}") from e
