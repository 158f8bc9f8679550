"""FSDP2 for a trainer spread over several processes (one GPU each; gloo on CPUs in tests).

    shard(root, layers, precision)        each layer, then the rest, split across the ranks
                                          (precision: obsspec.train.precision.fsdp_precision)
    state = full_model_state(root, "model.")  the whole weights, on rank 0 (collective)
    load_model_state(root, state, "model.")   every rank passes the same whole weights
    full_optimizer_state(root, opt) / load_optimizer_state(root, opt, state)

The root is the module whose forward the trainer calls (FSDP2's hooks gather the root's own
parameters in that forward); a prefix names the HF model inside it, whose names the saved
weights keep.
The state dicts are keyed by parameter name, whatever the number of ranks, so a checkpoint
written by N ranks resumes on M. With one process (no process group) the same functions work
on the plain model.
"""

from __future__ import annotations

from typing import Any


def sharded() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def decoder_layers(model) -> list:
    """The repeated transformer blocks: the unit FSDP2 gathers and frees one at a time."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise TypeError(f"{type(model).__name__}: no model.layers to shard")
    return list(layers)


def shard(root, layers: list, precision=None) -> None:
    """Split the parameters over the process group's ranks (in place): each layer is its own
    unit, gathered only while it computes; the root holds the rest (tied weights together).
    `precision`: FSDP2's MixedPrecisionPolicy (None: gathered and reduced as stored)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    device = "cuda" if torch.cuda.is_available() else "cpu"
    mesh = init_device_mesh(device, (torch.distributed.get_world_size(),))
    policy = precision or MixedPrecisionPolicy()
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(root, mesh=mesh, mp_policy=policy)  # embeddings, final norm, the output layer


def options(*, cpu_offload: bool = False):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=cpu_offload, strict=False)


def full_model_state(root, prefix: str = "") -> dict[str, Any]:
    """Every parameter under `prefix` whole, on the CPU, named without the prefix; on ranks
    other than 0 (sharded), empty."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    state = get_model_state_dict(root, options=options(cpu_offload=True))
    return {name.removeprefix(prefix): t for name, t in state.items() if name.startswith(prefix)}


def load_model_state(root, state: dict[str, Any], prefix: str = "") -> None:
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    named = {prefix + name: tensor for name, tensor in state.items()}
    set_model_state_dict(root, named, options=options())


def full_optimizer_state(model, optimizer) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=options(cpu_offload=True))


def load_optimizer_state(model, optimizer, state: dict[str, Any]) -> None:
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=options())


def gather_objects(local: list) -> list:
    """Every rank's list, concatenated in rank order (the list itself with one process)."""
    import torch.distributed as dist

    if not sharded():
        return list(local)
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, local)
    return [item for part in everyone for item in part]


def as_float(value) -> float:
    """A scalar that may be a DTensor (a sharded model's gradient norm) as a float."""
    full = getattr(value, "full_tensor", None)
    return float(full() if full is not None else value)
