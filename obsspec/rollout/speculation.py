"""The check every pipeline runs before starting speculation, and the loop it then runs.

    check_world_model(settings, models_dir)   # before anything is made
    loop = speculative_loop(builder, wm_engine, spec, threshold=0.5, answer_tokens=1024)

Predictors: the state cache, the rules and (with `world_model`) the world model on its own
engine, asked in that order (world_model.cascade); obsspec.rollout.session wires them.
"""

from __future__ import annotations

from pathlib import Path

from obsspec.agent.context import ChatContextBuilder
from obsspec.errors import ModelError
from obsspec.inference.base import Engine
from obsspec.models.registry import resolve_model
from obsspec.models.tokenizer import load_tokenizer
from obsspec.models.weights import check_weights
from obsspec.rollout.config import RolloutSettings
from obsspec.rollout.policy import policy_model
from obsspec.speculation.gate import Gate
from obsspec.speculation.regimes import BUSY_TAIL_S
from obsspec.speculation.runner import SpeculativeLoop
from obsspec.speculation.settings import SpeculationSettings


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
    if not config.engine.server:  # its engine starts here, on these weights
        check_weights(wm_dir)


def speculative_loop(
    builder: ChatContextBuilder,
    wm_engine: Engine | None,
    settings: SpeculationSettings,
    *,
    threshold: float,
    answer_tokens: int,
) -> SpeculativeLoop:
    """A loop with a new cascade (state cache, rules, repeats, and the world model on
    wm_engine when there is one, answering at most answer_tokens) and a new gate. The session
    and obsspec.api both build theirs here."""
    from obsspec.world_model.cascade import default_cascade
    from obsspec.world_model.lm import LMPredictor
    from obsspec.world_model.prompt import WorldModelPrompt

    lm = None
    if wm_engine is not None:
        lm = LMPredictor(wm_engine, WorldModelPrompt(builder), max_tokens=answer_tokens)
    gate = Gate(settings.gate, busy_tail_s=idle_spin_s(wm_engine))
    return SpeculativeLoop(default_cascade(lm, threshold), gate, settings)


def idle_spin_s(engine: Engine | None) -> float:
    """How long the world model's engine keeps its core after an answer, for the gate: a
    local vLLM engine's own figure (obsspec.inference.worker_spin), vLLM's 1 s for any other
    (a server's, whose spin is its own); none without an engine."""
    from obsspec.inference.vllm_local import LocalVLLMEngine

    if engine is None:
        return 0.0
    if isinstance(engine, LocalVLLMEngine):
        return engine.idle_spin_s
    return BUSY_TAIL_S
