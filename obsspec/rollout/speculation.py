"""The check every pipeline runs before starting speculation (the session opens the loop).

    check_world_model(settings, models_dir)   # before anything is made

Predictors: the state cache, the rules and (with `world_model`) the world model on its own
engine, asked in that order (world_model.cascade); obsspec.rollout.session wires them.
"""

from __future__ import annotations

from pathlib import Path

from obsspec.errors import ModelError
from obsspec.models.registry import resolve_model
from obsspec.models.tokenizer import load_tokenizer
from obsspec.rollout.config import RolloutSettings
from obsspec.rollout.policy import policy_model


def check_world_model(config: RolloutSettings, models_dir: Path) -> None:
    """The world model exists and shares the policy's tokenizer (guesses are compared as the
    policy's tokens), checked before anything starts."""
    from obsspec.world_model.prompt import check_same_tokenizer

    name = config.speculation.world_model
    if not config.speculation.enabled or name is None:
        return
    try:
        wm_dir = resolve_model(name, models_dir)
    except ModelError as e:
        raise type(e)(f"--world-model (speculation.world_model): {e}", hint=e.hint) from e
    check_same_tokenizer(
        load_tokenizer(policy_model(config, models_dir)),
        load_tokenizer(wm_dir),
        policy=config.policy,
        wm=name,
    )
