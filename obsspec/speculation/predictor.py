"""The Predictor contract: what the speculative runner asks of anything that guesses output.

    predictions = await predictor.predict(context, command, n=1)
    ...the command really runs...
    predictor.observe(context, command, real_observation)

`context` is the exact token context the policy saw up to and including the action, with the
task's content hash (a fresh sandbox of the same task starts in the same state) and the
commands that will have run in the episode's sandbox before this one (`commands`: the real
ones, then, for a reply built on guesses, the commands whose outputs were guessed, which run
first if the branch is kept; None when the sandbox's state is not a function of them, i.e. a
command before this one timed out and was killed at an unknown point). A prediction
is the full canonical observation text (obsspec.types.render_observation), so checking it is
string equality with the real one. Implementations live in `world_model` (the state cache,
the context cache, rules, repeats, the LM world model, the cascade, the oracle); the runner
depends only on this module. An optional
hook, `running` (see `running` below), tells a predictor that a command has begun for real.
Another, `predict_cheap(context, command, n)`, answers without any predictor marked `costly`
(an attribute: the world model, which makes an engine work); the runner asks it when the
gate declines to ask the world model, so free answers (cache, rules, repeats) still count.

A cascade asks several predictors and returns one's answer; it says whom it asked and what each
offered in an `Answer` (a list of the chosen predictions, with `offered` beside it), so the
runner can score the world model on its own (`offered_by(predictions, WORLD_MODEL)`).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

WORLD_MODEL = "lm"  # the source of the LM world model's predictions (world_model.lm)


@dataclass(frozen=True)
class SpeculationContext:
    task_hash: str
    ids: tuple[int, ...]  # the policy context up to and including the action's tokens
    commands: tuple[str, ...] | None = None  # run in the sandbox before this one (see above)
    key: str = field(init=False, repr=False, compare=False)  # a digest of both, for lookups

    def __post_init__(self) -> None:
        digest = hashlib.blake2b(self.task_hash.encode(), digest_size=16)
        digest.update(b"\0" + b",".join(str(i).encode() for i in self.ids))
        object.__setattr__(self, "key", digest.hexdigest())


@dataclass(frozen=True)
class Prediction:
    text: str  # a whole canonical observation, exit-code line included
    source: str  # which predictor answered: state, rules/<rule>, repeat, lm, oracle
    confidence: float  # the predictor's estimate that text is exactly right, 0..1
    latency_s: float = 0.0
    tokens: int = 0  # tokens a model generated for it (0 for lookups)


class Predictor(Protocol):
    async def predict(
        self, context: SpeculationContext, command: str, n: int = 1
    ) -> list[Prediction]:
        """Up to n guesses, most likely first; [] when the predictor has nothing to offer."""
        ...

    def observe(self, context: SpeculationContext, command: str, observation: str) -> None:
        """The real observation of a command (predictors that learn online keep it)."""
        ...


class Answer(list[Prediction]):
    """Chosen predictions (the list itself) and, in `offered`, what every predictor that was
    asked offered, by source, in the order asked (a predictor that offered nothing: [])."""

    def __init__(self, chosen: list[Prediction], offered: dict[str, list[Prediction]]) -> None:
        super().__init__(chosen)
        self.offered = offered


def offered_by(predictions: list[Prediction], source: str) -> list[Prediction] | None:
    """What the predictor `source` offered for this command; None when it was not asked. An
    `Answer` says so exactly; a plain list only shows who answered (a predictor that offered
    nothing cannot be told from one that was not asked)."""
    if isinstance(predictions, Answer):
        return predictions.offered.get(source)
    return [p for p in predictions if p.source == source] or None


@contextlib.contextmanager
def running(predictor: Predictor, context: SpeculationContext, command: str) -> Iterator[None]:
    """Around a command's real execution (and its `observe`). A predictor may have an optional
    hook `running(context, command) -> end`: it learns that the output is on its way (the state
    cache lets siblings asking about the same state wait for it), and `end()` is called when the
    execution is over, observed or not (the sandbox failed, the episode was cancelled)."""
    hook = getattr(predictor, "running", None)
    end = hook(context, command) if hook is not None else None
    try:
        yield
    finally:
        if end is not None:
            end()
