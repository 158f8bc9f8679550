"""Exact checksums of a model's weights, grouped by decoder layer, that compare across
layouts: the trainer's HF tensors (q_proj, k_proj, v_proj) against an engine's fused ones
(qkv_proj), since a sum does not depend on how the values are cut and joined.

    sums = weight_checksums(model.named_parameters())   # {"layer 3": [count, sum, sumsq], ...}
    stale = checksum_mismatches(engine_sums, trainer_sums)   # ["layer 3"]: not what was sent

Per group: how many values, their float64 sum and sum of squares. A float32 or bfloat16
engine holds exactly the bfloat16 values it was sent, so the only difference between two
honest sums is float64 rounding (TOLERANCE, relative to the sum of |x|'s bound); a weight
update, even one that moves 1% of a layer's values by one bfloat16 step, is far beyond it.
A group whose count differs (an engine that pads its vocabulary, a layout this does not
know) cannot be compared: `checksum_mismatches` names it as such, never as equal.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
TOLERANCE = 1e-9
Sums = dict[str, list[float]]  # group -> [count, sum, sum of squares]


def group_of(name: str) -> str:
    match = LAYER.search(name)
    return f"layer {int(match.group(1))}" if match else "other"


def weight_checksums(named: Iterable[tuple[str, Tensor]], into: Sums | None = None) -> Sums:
    """The checksums of named tensors, added to `into` when given (a model sent in parts)."""
    import torch

    sums: Sums = {} if into is None else into
    with torch.no_grad():
        for name, tensor in named:
            values = tensor.detach().to(dtype=torch.float64)
            group = sums.setdefault(group_of(name), [0, 0.0, 0.0])
            group[0] += values.numel()
            group[1] += float(values.sum())
            group[2] += float((values * values).sum())
    return sums


def checksum_mismatches(engine: Mapping[str, list[float]], trainer: Sums) -> list[str]:
    """The groups whose values differ (or cannot be compared), each with why; [] when the
    engine holds exactly what the trainer sent."""
    found = []
    for group in sorted(set(engine) | set(trainer), key=group_order):
        mine, theirs = trainer.get(group), engine.get(group)
        if mine is None or theirs is None:
            found.append(f"{group}: only in the {'engine' if mine is None else 'trainer'}")
        elif int(mine[0]) != int(theirs[0]):
            found.append(f"{group}: {int(theirs[0])} values in the engine, {int(mine[0])} sent")
        else:
            bound = math.sqrt(mine[0] * mine[2])  # >= the sum of |x| (Cauchy-Schwarz)
            if abs(theirs[1] - mine[1]) > TOLERANCE * max(bound, 1.0) or abs(
                theirs[2] - mine[2]
            ) > TOLERANCE * max(mine[2], 1.0):
                found.append(f"{group}: its values differ from those sent")
    return found


def group_order(group: str) -> tuple[int, int]:
    match = re.fullmatch(r"layer (\d+)", group)
    return (0, int(match.group(1))) if match else (1, 0)
