"""StateCachePredictor: the real observation of a command run before in the same sandbox state.

    cache = StateCachePredictor()
    key = (task content hash, the commands run in the sandbox so far, the command)

A fresh sandbox of a task starts in the same state, and the shell is a function of the
commands run in it, so the same command after the same commands usually prints the same
thing, whatever the policy wrote around them. GRPO samples a group of episodes of one task:
siblings whose replies differ in text but run the same commands share answers here (the
exact-context cache, world_model.cache, never shares them: their contexts differ), and so do
later steps and repeated evaluations. Every answer is exact-match checked like any guess.

What breaks the rule, and what it does about it:
  - A command killed by its timeout stopped at an unknown point, so the state after it is not
    a function of the commands: the runner gives no history then (`commands` is None) and the
    cache neither answers nor stores for the rest of that episode. Its own observation (with
    the timed-out line) is stored: a sibling that runs it gets the guess, checked as usual.
  - Output that depends on the clock or on randomness (`date`, `mktemp`, `ls -l` across
    minutes): two different real observations of one key mark the (task, command) volatile,
    and the cache stops answering it (in every state of that task). The gate's per-family,
    per-source outcome records learn from the misses before that, as for every predictor.
  - A shell restarted by `exit` is not a timing accident: the history stays valid.
Memory is bounded: least recently used entries (and volatile marks) go first.

Siblings played together often ask about a state whose command a sibling is running at that
moment (it began earlier, so it ends earlier): told so by the runner (the `running` hook),
the cache makes them wait for that output, up to `wait_s` seconds, rather than answer nothing.
A reply never waits for its own command.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable

from obsspec.speculation.predictor import Prediction, SpeculationContext

SOURCE = "state"


def state_key(context: SpeculationContext, command: str) -> str | None:
    """A digest of (task, commands run before, command); None when the state is unknown."""
    if context.commands is None:
        return None
    digest = hashlib.blake2b(context.task_hash.encode(), digest_size=16)
    for part in (*context.commands, command):
        # Length-prefixed, so no two different sequences of commands digest the same bytes.
        data = part.encode()
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


class StateCachePredictor:
    def __init__(
        self, max_entries: int = 100_000, confidence: float = 0.95, wait_s: float = 5.0
    ) -> None:
        self.max_entries = max_entries
        self.confidence = confidence
        self.wait_s = wait_s  # for a sibling's running command (0: never wait)
        self._entries: OrderedDict[str, str] = OrderedDict()
        self._volatile: OrderedDict[tuple[str, str], None] = OrderedDict()
        # state key -> (the running reply's context key, its output to come; None: none came)
        self._running: dict[str, tuple[str, asyncio.Future[str | None]]] = {}

    async def predict(
        self, context: SpeculationContext, command: str, n: int = 1
    ) -> list[Prediction]:
        start = time.monotonic()
        key = state_key(context, command)
        if key is None or (context.task_hash, command) in self._volatile:
            return []
        text = self._entries.get(key)
        if text is None:
            text = await self._wait_for_running(key, context.key)
        if text is None or (context.task_hash, command) in self._volatile:
            return []
        if key in self._entries:
            self._entries.move_to_end(key)
        return [Prediction(text, SOURCE, self.confidence, time.monotonic() - start)]

    async def _wait_for_running(self, key: str, asker: str) -> str | None:
        found = self._running.get(key)
        if found is None or found[0] == asker or self.wait_s <= 0:
            return None
        try:
            async with asyncio.timeout(self.wait_s):
                # shielded: one waiter given up must not cancel the output for the others
                return await asyncio.shield(found[1])
        except TimeoutError:
            return None

    def running(self, context: SpeculationContext, command: str) -> Callable[[], None]:
        """The command has begun in a sandbox in this state; call the result when it is over."""
        key = state_key(context, command)
        if key is None or key in self._entries or key in self._running:
            return lambda: None  # answered already, or by the sibling that began first
        output: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._running[key] = (context.key, output)

        def end() -> None:
            if self._running.get(key, (None, None))[1] is output:
                del self._running[key]
            if not output.done():
                output.set_result(None)  # it ended without an observation

        return end

    def observe(self, context: SpeculationContext, command: str, observation: str) -> None:
        key = state_key(context, command)
        if key is None:
            return
        known = self._entries.get(key)
        if known is not None and known != observation:
            remember(self._volatile, (context.task_hash, command), None, self.max_entries)
        remember(self._entries, key, observation, self.max_entries)
        found = self._running.get(key)
        if found is not None and not found[1].done():
            found[1].set_result(observation)  # the waiters have it; the owner's end removes it

    def is_volatile(self, task_hash: str, command: str) -> bool:
        return (task_hash, command) in self._volatile

    def __len__(self) -> int:
        return len(self._entries)


def remember(entries: OrderedDict, key, value, max_entries: int) -> None:
    entries[key] = value
    entries.move_to_end(key)
    while len(entries) > max_entries:
        entries.popitem(last=False)
