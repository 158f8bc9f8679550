"""The world model's prompt (shared by training and serving) and the LM predictor."""

from __future__ import annotations

import copy
import itertools

import pytest

from obsspec.errors import ConfigError
from obsspec.inference.scripted import ScriptedEngine
from obsspec.speculation.predictor import SpeculationContext
from obsspec.world_model.lm import LMPredictor
from obsspec.world_model.prompt import WorldModelPrompt, check_same_tokenizer

OBSERVATIONS = [
    "(no output)\n[exit code: 0]",
    "total 8\ndrwxr-xr-x 2 root root 4096 .\n[exit code: 0]",
    "grep: /nope: No such file or directory\n[exit code: 2]",
    "naïve — ünïcode ✓\n\ttabbed\n[exit code: 0]",
]


def policy_context(builder) -> list[int]:
    prompt = builder.prompt_ids("system", "Task:\nlist /srv")
    action = [*builder.encode("```bash\nls /srv\n```"), builder.end_of_turn_id]
    return prompt + action


@pytest.mark.parametrize("observation", OBSERVATIONS)
def test_the_wm_continues_the_policy_conversation_where_the_observation_goes(
    builder, tokenizer, observation
):
    wm = WorldModelPrompt(builder)
    context = policy_context(builder)
    predicted = wm.prompt_ids(context) + wm.target_ids(observation)
    real = context + builder.turn_end_ids(context) + builder.observation_ids(observation)
    assert tokenizer.decode(real).startswith(tokenizer.decode(predicted))
    assert wm.observation_text(wm.target_ids(observation)) == observation
    assert wm.observation_text(wm.target_ids(observation)[:-1]) is None  # cut off: no answer


def test_a_cut_off_action_gets_its_end_of_turn_before_the_observation(builder):
    wm = WorldModelPrompt(builder)
    cut = policy_context(builder)[:-1]
    assert wm.prompt_ids(cut)[len(cut)] == builder.end_of_turn_id


def test_each_turns_prompt_extends_the_last_turns(builder):
    """The engine's prefix cache then prefills only a turn's new tokens. An observation that
    begins with a run of whitespace may merge with the opening's last newline: then all but
    that one token is shared (what prefix caching loses is at most one block)."""
    wm = WorldModelPrompt(builder)
    context = builder.prompt_ids("system", "Task:\nfix the build")
    observations = [*OBSERVATIONS, "  3 foo\n[exit code: 0]", "\n\n\nx\n[exit code: 0]"]
    prompts = []
    for turn, observation in enumerate(observations):
        action = builder.encode(f"```bash\nmake step{turn}\n```")
        if turn % 2 == 0:
            action.append(builder.end_of_turn_id)  # odd turns are cut off before it
        context = context + action
        prompts.append(wm.prompt_ids(context))
        context = context + builder.turn_end_ids(action) + builder.observation_ids(observation)
    for turn, (earlier, later) in enumerate(itertools.pairwise(prompts)):
        if observations[turn][0].isspace():
            assert later[: len(earlier) - 1] == earlier[:-1]
        else:
            assert later[: len(earlier)] == earlier, observations[turn]


def test_policy_and_wm_must_share_a_tokenizer(tokenizer):
    check_same_tokenizer(tokenizer, tokenizer, policy="p", wm="w")
    other = copy.deepcopy(tokenizer)
    other.add_tokens(["<obsspec-extra>"])
    with pytest.raises(ConfigError, match="different tokenizers"):
        check_same_tokenizer(tokenizer, other, policy="p", wm="w")


async def test_lm_predictor_answers_with_its_own_probability(builder, tokenizer):
    wm = WorldModelPrompt(builder)
    engine = ScriptedEngine(tokenizer, lambda _context: OBSERVATIONS[1], logprob=-0.01)
    context = SpeculationContext("h", tuple(policy_context(builder)))
    [prediction] = await LMPredictor(engine, wm).predict(context, "ls /srv")
    assert prediction.text == OBSERVATIONS[1] and prediction.source == "lm"
    assert engine.prompts[-1] == wm.prompt_ids(context.ids)  # the shared prompt, exactly
    assert 0 < prediction.confidence < 1
    short = LMPredictor(engine, wm, max_tokens=3)  # cut off before the end: no prediction
    assert await short.predict(context, "ls /srv") == []
