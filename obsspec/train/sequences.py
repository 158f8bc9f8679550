"""Samples packed into training sequences by shared prefixes, with an exact label mask.

    Sample(prompt_ids, target_ids)       learn target_ids after prompt_ids
    Sequence(ids, labels)                labels[i] > 0 where ids[i] is learned: its weight

The turns of one episode share their history: turn 2's prompt begins with turn 1's prompt
and target whenever turn 1's target tokens are exactly what the context holds. `pack` then
chains them into one sequence, and causal attention makes each target see exactly its own
prompt, so one forward pass trains every turn of an episode for the cost of its longest
prompt, not the sum of all prompts. A sample whose prompt does not extend the sequence so
far starts a new one; nothing is approximated.

A label is the weight of its token's loss. With `weighting="token"` every learned token
weighs 1, so long targets dominate the loss; with `"observation"` each token of a target
weighs 1/len(target), so every target (an observation, an action) counts as much as any
other, as exact match counts them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

Weighting = Literal["token", "observation"]


@dataclass(frozen=True)
class Sample:
    prompt_ids: list[int]
    target_ids: list[int]


@dataclass
class Sequence:
    ids: list[int] = field(default_factory=list)
    labels: list[float] = field(default_factory=list)  # 0: context; > 0: learned, its weight
    samples: int = 0

    def extends(self, sample: Sample) -> bool:
        n = len(self.ids)
        return n > 0 and len(sample.prompt_ids) >= n and sample.prompt_ids[:n] == self.ids

    def add(self, sample: Sample, weight: float = 1.0) -> None:
        rest = sample.prompt_ids[len(self.ids) :]
        self.ids += rest + sample.target_ids
        self.labels += [0.0] * len(rest) + [weight] * len(sample.target_ids)
        self.samples += 1

    @property
    def target_tokens(self) -> int:
        return sum(label > 0 for label in self.labels)

    @property
    def target_weight(self) -> float:
        """What the loss is normalised by: target_tokens when every token weighs 1."""
        return sum(self.labels)


@dataclass(frozen=True)
class Packing:
    sequences: list[Sequence]
    too_long: int  # samples longer than max_len on their own: not trained on
    samples: int


def pack(samples: Iterable[Sample], max_len: int, weighting: Weighting = "token") -> Packing:
    """Chain consecutive samples that extend each other, in the order given."""
    sequences: list[Sequence] = []
    current: Sequence | None = None
    too_long = total = 0
    for sample in samples:
        total += 1
        if not sample.target_ids:
            continue
        if len(sample.prompt_ids) + len(sample.target_ids) > max_len:
            too_long += 1
            continue
        # The chained sequence is this sample's prompt and target, so it fits too.
        if current is None or not current.extends(sample):
            current = Sequence()
            sequences.append(current)
        current.add(sample, 1.0 if weighting == "token" else 1.0 / len(sample.target_ids))
    return Packing(sequences, too_long, total)
