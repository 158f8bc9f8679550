"""The world model on its own, apart from the cascade that may have chosen another answer:
what it was asked and offered for a command, and whether its guesses were right.

    node.wm_guesses = note_world_model(record, predictions, breadth)   # when the answer comes
    score_world_model(record, node.wm_guesses, real, match)            # when the output does

The paper's figure is the world model's alone (obsspec.speculation.totals: match_rate_wm).
"""

from __future__ import annotations

from collections.abc import Callable

from obsspec.speculation.near_miss import is_near_miss
from obsspec.speculation.node import distinct_guesses
from obsspec.speculation.predictor import WORLD_MODEL, Prediction, offered_by
from obsspec.trajectory import SpeculationRecord


def note_world_model(
    record: SpeculationRecord, predictions: list[Prediction], breadth: int
) -> list[str]:
    """Record what the world model was asked and spent; its distinct guesses ([] if not
    asked: the cascade stopped at the cache or the rules)."""
    world_model = offered_by(predictions, WORLD_MODEL)
    # every world-model answer was paid for, the ones the cascade did not choose too
    spent = predictions if world_model is None else world_model
    record.wm_tokens += sum(p.tokens for p in spent)
    if world_model is None:
        return []
    record.wm_asked = True
    guesses = [text for text, _ in distinct_guesses(world_model, breadth)]
    record.wm_guesses = len(guesses)
    return guesses


def score_world_model(
    record: SpeculationRecord, guesses: list[str], real: str, match: Callable[[str, str], bool]
) -> None:
    """Its first guess (the paper's figure), any of them, and whether the first was near."""
    hits = [match(guess, real) for guess in guesses]
    record.wm_matched = bool(hits) and hits[0]
    record.wm_matched_any = any(hits)
    record.wm_near_miss = bool(hits) and not hits[0] and is_near_miss(guesses[0], real)
