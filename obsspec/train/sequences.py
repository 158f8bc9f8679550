"""Samples packed into training sequences by shared prefixes, with an exact label mask.

    Sample(prompt_ids, target_ids)       learn target_ids after prompt_ids
    Sequence(ids, labels)                labels[i] is True where ids[i] is learned

The turns of one episode share their history: turn 2's prompt begins with turn 1's prompt
and target whenever turn 1's target tokens are exactly what the context holds. `pack` then
chains them into one sequence, and causal attention makes each target see exactly its own
prompt, so one forward pass trains every turn of an episode for the cost of its longest
prompt, not the sum of all prompts. A sample whose prompt does not extend the sequence so
far starts a new one; nothing is approximated.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sample:
    prompt_ids: list[int]
    target_ids: list[int]


@dataclass
class Sequence:
    ids: list[int] = field(default_factory=list)
    labels: list[bool] = field(default_factory=list)
    samples: int = 0

    def extends(self, sample: Sample) -> bool:
        n = len(self.ids)
        return n > 0 and len(sample.prompt_ids) >= n and sample.prompt_ids[:n] == self.ids

    def add(self, sample: Sample) -> None:
        rest = sample.prompt_ids[len(self.ids) :]
        self.ids += rest + sample.target_ids
        self.labels += [False] * len(rest) + [True] * len(sample.target_ids)
        self.samples += 1

    @property
    def target_tokens(self) -> int:
        return sum(self.labels)


@dataclass(frozen=True)
class Packing:
    sequences: list[Sequence]
    too_long: int  # samples longer than max_len on their own: not trained on
    samples: int


def pack(samples: Iterable[Sample], max_len: int) -> Packing:
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
        current.add(sample)
    return Packing(sequences, too_long, total)
