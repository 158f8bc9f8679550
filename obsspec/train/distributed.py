"""Data-parallel training over several processes, one device each (torchrun or Ray workers).

    torchrun --nproc-per-node 8 "$(which obsspec)" train-wm --data RUN --out WM

Every rank computes the same batch plan (it depends only on the seed and the epoch) and
takes every world-th batch of each optimizer step; DDP averages the gradients, and the loss
scaling in the loop turns that back into a token mean over the whole step, so N ranks with
`grad_accum` k learn what one process with `grad_accum` N*k learns. Rank 0 alone writes
checkpoints, the final model and reports. On CPUs (tests) the backend is gloo, on GPUs nccl.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1
    local: int = 0  # the device index on this machine

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_from_env(env: Mapping[str, str]) -> Ranks:
    """Join the process group a launcher (torchrun) describes in `env`; one process: no-op."""
    if int(env.get("WORLD_SIZE", "1")) <= 1:
        return Ranks()
    import torch
    import torch.distributed as dist

    local = int(env.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return current()


def current() -> Ranks:
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return Ranks()
    local = torch.cuda.current_device() if torch.cuda.is_available() else 0  # set at init
    return Ranks(dist.get_rank(), dist.get_world_size(), local)


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_sum(values: list[float]) -> list[float]:
    """Element-wise sums over every rank (the values themselves with one process)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return values
    tensor = torch.tensor(values, dtype=torch.float64)
    if dist.get_backend() == "nccl":
        tensor = tensor.cuda()
    dist.all_reduce(tensor)
    return tensor.tolist()


def shutdown() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
