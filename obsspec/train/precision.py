"""Where a trainer computes and in what precision, and the autocast context for it.

    where = placement(settings)         Placement("cuda:0", "bfloat16")
    with autocast(where):               the forward pass; backward and the optimizer
        loss = model(...)               stay outside it

Master weights stay float32 whatever the compute dtype: bfloat16 is only the autocast of the
forward pass, where the device computes it natively.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from obsspec.errors import ConfigError
from obsspec.train.config import TrainSettings


@dataclass(frozen=True)
class Placement:
    device: str
    dtype: str  # "float32" or "bfloat16": the compute dtype (weights stay float32)


def cpu_has_bf16() -> bool:
    """Whether the CPU computes bfloat16 natively (AVX-512 BF16 or AMX): there, autocast to
    bfloat16 trained the 135M model 1.7x faster than float32 (measured on 2 cores)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next((line for line in cpuinfo if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def placement(settings: TrainSettings) -> Placement:
    import torch

    device = settings.device
    if device == "auto":
        device = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
    elif device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {device}: no CUDA device is available here")
    dtype = settings.dtype
    if dtype == "auto":
        native = device.startswith("cuda") or cpu_has_bf16()
        dtype = "bfloat16" if native else "float32"
    return Placement(device, dtype)


def autocast(where: Placement):
    """bfloat16 autocast on the placement's device, or nothing when it computes in float32."""
    import torch

    if where.dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(where.device.split(":")[0], dtype=torch.bfloat16)
