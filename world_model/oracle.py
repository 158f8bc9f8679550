"""OraclePredictor: the recorded real observation, after a delay: the ceiling in profiling.

    oracle = OraclePredictor.from_rows(rows, delay_s=0.05)

It answers exactly what the command printed when the episode was collected (looked up by
task, exact context and command), as a perfect world model taking `delay_s` would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from obsspec.speculation.predictor import Prediction, SpeculationContext
from obsspec.world_model.turns import turn_records

SOURCE = "oracle"


class OraclePredictor:
    def __init__(self, table: dict[tuple[str, str], str], delay_s: float = 0.0) -> None:
        self.table = table
        self.delay_s = delay_s

    @classmethod
    def from_rows(cls, rows: Iterable[dict], delay_s: float = 0.0) -> OraclePredictor:
        table = {
            (record.context.key, record.command): record.observation
            for row in rows
            for record in turn_records(row)
        }
        return cls(table, delay_s)

    async def predict(
        self, context: SpeculationContext, command: str, n: int = 1
    ) -> list[Prediction]:
        text = self.table.get((context.key, command))
        if text is None:
            return []
        await asyncio.sleep(self.delay_s)
        return [Prediction(text, SOURCE, 1.0, self.delay_s)]

    def observe(self, context: SpeculationContext, command: str, observation: str) -> None:
        pass
