"""Reading a verifier's reward files, and the one number RL and `env validate` use.

Harbor verifiers write /logs/verifier/reward.json or /logs/verifier/reward.txt:

    reward.txt    one number                               -> {"reward": x}
    reward.json   an object of one or more numeric keys    -> every key, e.g.
                  {"reward": 1}, {"score": 0.5}, {"correctness": 1, "performance": 0.5}

Every key is kept (the dataset's `rewards` column). The scalar reward, the one RL trains on
and `env validate` expects to be 1 for the reference solution and 0 for doing nothing, is:

    1. the key named by the task's `[verifier] reward_key`, if set (missing: an error);
    2. else the key "reward", if present;
    3. else the only key, if there is one;
    4. else the keys aggregated by `[verifier] reward_aggregate`: "min" (the default),
       "mean" or "product".

"min" is the default because several keys are, in Harbor's own examples, separate criteria
(correctness, performance): the episode succeeds (scalar 1) only when every criterion does,
so a policy cannot earn full reward by excelling at one while failing another, and validate's
"solution gets 1" means every criterion passed. "mean" gives partial credit; "product" is
"min" with graded penalties.

Values must be finite floats (JSON true/false count as 1/0): an integer too big for a float
(400 digits), an infinity, anything not a number, an empty object or a file that is not JSON
is a VerifierError naming the file and the key: a broken task, never a zero reward, and an
error of that episode alone (collect records it and goes on). The verifier reads at most
REWARD_FILE_MAX_BYTES of a reward file: a bigger one is a VerifierError too.
"""

from __future__ import annotations

import json
import math
from typing import Literal

from obsspec.environments.errors import VerifierError

RewardAggregate = Literal["min", "mean", "product"]
DEFAULT_KEY = "reward"
REWARD_FILE_MAX_BYTES = 64 * 1024  # a few numbers; more is no reward file (and no 400 MB read)


def parse_reward_txt(raw: bytes, where: str) -> dict[str, float]:
    """reward.txt: one number."""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        value = float(text)
    except ValueError:
        raise VerifierError(f"{where} is not a number: {text[:100]!r}") from None
    return {DEFAULT_KEY: finite(value, where, DEFAULT_KEY)}


def parse_reward_json(raw: bytes, where: str) -> dict[str, float]:
    """reward.json: an object of one or more numeric keys."""
    try:
        data = json.loads(raw.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError) as e:  # RecursionError: nested thousands deep
        raise VerifierError(f"{where} is not valid JSON ({e}): {raw[:100]!r}") from None
    if not isinstance(data, dict):
        raise VerifierError(
            f'{where} must be a JSON object of numeric rewards, e.g. {{"reward": 1}}; '
            f"got {type(data).__name__}: {raw[:100]!r}"
        )
    if not data:
        raise VerifierError(f"{where} is an empty object: it names no reward")
    return {str(key): number(value, where, str(key)) for key, value in data.items()}


def number(value: object, where: str, key: str) -> float:
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, int | float):
        raise VerifierError(f"{where}: key {key!r} is not a number: {json.dumps(value)[:100]}")
    try:
        return finite(float(value), where, key)
    except OverflowError:  # an integer of hundreds of digits: JSON has no limit, floats do
        digits = len(str(abs(value)))
        raise VerifierError(
            f"{where}: key {key!r} is an integer of {digits} digits, not a finite number"
        ) from None


def finite(value: float, where: str, key: str) -> float:
    if not math.isfinite(value):
        raise VerifierError(f"{where}: key {key!r} is {value}, not a finite number")
    return value


def scalar_reward(
    rewards: dict[str, float],
    *,
    key: str | None = None,
    aggregate: RewardAggregate = "min",
    where: str = "the reward file",
) -> float:
    """The one reward of an episode, by the rule in the module docstring."""
    if key is not None:
        if key not in rewards:
            raise VerifierError(
                f"{where} has no key {key!r} (the task's [verifier] reward_key); "
                f"it has {sorted(rewards)}"
            )
        return rewards[key]
    if DEFAULT_KEY in rewards:
        return rewards[DEFAULT_KEY]
    values = list(rewards.values())
    if len(values) == 1:
        return values[0]
    if aggregate == "min":
        return min(values)
    if aggregate == "mean":
        return sum(values) / len(values)
    return math.prod(values)
