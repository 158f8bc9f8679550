"""The speculative runner's settings: how far ahead, how wide, and when (the gate).

loop = SpeculativeLoop(predictor, settings=SpeculationSettings(depth=2, breadth=2))
"""

from __future__ import annotations

from pydantic import Field

from obsspec.config import StrictModel
from obsspec.speculation.gate import GateSettings


class SpeculationSettings(StrictModel):
    depth: int = Field(
        default=1, ge=1, le=8, description="Turns the policy may run ahead on guessed output."
    )
    breadth: int = Field(
        default=1, ge=1, le=8, description="Distinct guesses tried per command, a branch each."
    )
    gate: GateSettings = Field(default_factory=GateSettings)
    predict_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="A prediction later than this is given up (recorded as failed).",
    )
