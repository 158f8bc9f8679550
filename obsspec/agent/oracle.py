"""The oracle policy: a task's reference solution replayed as if a model had typed it.

    engine = OraclePolicy(tokenizer, task.solution_commands(), ActionFormat.markdown)
    trajectory = await run_episode(task, pool, engine, builder, limits)

Turn k's reply is command k rendered in the action format (exactly what `parse_action` reads
back), tokenised with the policy's tokenizer and ended with its end-of-turn token, as a model's
reply is; after the last command the reply declares the task done. The episode therefore runs
through the same loop, context builder and verifier as a model's, and its trajectories are
realistic expert data with real observations. One OraclePolicy serves one episode: it counts
the turns it has answered. Logprobs are 0 (the expert is certain).
"""

from __future__ import annotations

import time
from pathlib import Path

from obsspec.agent.protocol import Action, ActionFormat, format_action
from obsspec.inference.base import EngineStats, Generation, Sampling, Timings, context_room

ORACLE = "oracle"  # the policy name that selects it


class OraclePolicy:
    def __init__(
        self,
        tokenizer,
        commands: list[str],
        fmt: ActionFormat,
        *,
        max_model_len: int = 1 << 20,
    ) -> None:
        self.tokenizer = tokenizer
        self.replies = [format_action(Action("command", c), fmt) for c in commands]
        self.replies.append(format_action(Action("done"), fmt))
        self.max_model_len = max_model_len
        self.turn = 0

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: Sampling,
        *,
        request_id: str | None = None,
        priority: int = 0,
    ) -> Generation:
        context_room(prompt_ids, self.max_model_len)
        start = time.monotonic()
        text = self.replies[min(self.turn, len(self.replies) - 1)]
        self.turn += 1
        ids = [
            *self.tokenizer(text, add_special_tokens=False)["input_ids"],
            self.tokenizer.eos_token_id,
        ]
        total = time.monotonic() - start
        return Generation(ids, [0.0] * len(ids), text, "stop", Timings(0.0, 0.0, total, total))

    async def load_weights(self, checkpoint: Path) -> None:
        raise NotImplementedError("the oracle policy has no weights")

    def stats(self) -> EngineStats:
        return EngineStats(0, 0, 0)

    async def aclose(self) -> None:
        pass
