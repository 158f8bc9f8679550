"""Sharded checkpoints of a trainer's weights and optimizer, written by every rank at once.

    save_sharded(folder / "state", module, optimizer)   collective: each rank writes its shards
    if has_sharded(folder / "state"):
        load_sharded(folder / "state", module, optimizer)  collective: each rank reads its part

torch.distributed.checkpoint (DCP) keys everything by parameter name (`get_state_dict`), so
each rank saves only the shards it holds (FSDP2) instead of gathering the float32 weights and
the AdamW moments (three times the weights) to rank 0; at 8B that gather is ~100 GB on one
host. On load DCP reads whatever slice of each tensor the loading rank holds now, so a
checkpoint of N ranks resumes on M. One process (no process group) uses the same format.
Several hosts must share the folder's filesystem.

Frozen parameters (the base model under a LoRA adapter) are left out: the trainer rebuilds
them from its base model.
"""

from __future__ import annotations

from pathlib import Path

from obsspec.errors import ConfigError

METADATA = ".metadata"  # DCP's index of a saved state, written last by rank 0


def options():
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    # not strict: the frozen parameters left out are not missing
    return StateDictOptions(ignore_frozen_params=True, strict=False)


def grouped() -> bool:
    """Whether a process group runs (without one, DCP reads and writes alone)."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def has_sharded(folder: Path) -> bool:
    """Whether `folder` holds a whole DCP state (older checkpoints have none)."""
    return (folder / METADATA).is_file()


def trained_state(module, optimizer) -> dict:
    """{"model": the trainable weights, "optimizer": their state}, keyed by name; each rank's
    tensors are the shards it holds (DTensors under FSDP2), views of the live ones."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(module, optimizer, options=options())
    trainable = {name for name, p in module.named_parameters() if p.requires_grad}
    # a frozen output layer tied to the input embeddings is no parameter of its own, so
    # ignore_frozen_params keeps it; the trainable weights are all a resume needs
    model_state = {name: t for name, t in model_state.items() if name in trainable}
    return {"model": model_state, "optimizer": optimizer_state}


def save_sharded(folder: Path, module, optimizer) -> None:
    """The module's trainable weights and the optimizer state into `folder`, every rank its
    own shards (collective). The folder must exist on every rank before the call."""
    import torch.distributed.checkpoint as dcp

    dcp.save(trained_state(module, optimizer), checkpoint_id=folder, no_dist=not grouped())


def load_sharded(folder: Path, module, optimizer) -> None:
    """Put a state saved by save_sharded (on any number of ranks) back into the module and
    the optimizer (collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import set_state_dict

    # the current state's shapes and shards say what each rank reads; DCP loads in place
    state = trained_state(module, optimizer)
    try:
        dcp.load(state, checkpoint_id=folder, no_dist=not grouped())
    except (CheckpointException, RuntimeError, KeyError) as e:
        cause = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(
            f"--resume: {folder} does not match the model being trained ({cause[:300]})",
            hint="resume with the model and settings the checkpoint was trained with",
        ) from e
    set_state_dict(
        module,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
        options=options(),
    )
