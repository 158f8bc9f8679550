"""Length-bucketed batches: sequences of similar length together, so padding stays small.

A batch holds as many sequences as fit `batch_tokens` counted with padding (rows x longest
row), which bounds the memory of one forward pass. The batch order is shuffled per epoch by
the seed, so a resumed run replays exactly the same plan.
"""

from __future__ import annotations

import random


def plan_batches(
    lengths: list[int], batch_tokens: int, *, seed: int, epoch: int
) -> list[list[int]]:
    """Indices into `lengths`, grouped into batches; deterministic in (seed, epoch)."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    batch: list[int] = []
    for index in order:
        # sorted ascending, so this sequence is the longest of the batch so far
        if batch and (len(batch) + 1) * lengths[index] > batch_tokens:
            batches.append(batch)
            batch = []
        batch.append(index)
    if batch:
        batches.append(batch)
    random.Random(f"{seed}:{epoch}").shuffle(batches)
    return batches


def padded_tokens(lengths: list[int], batch: list[int]) -> int:
    return len(batch) * max(lengths[i] for i in batch)
