"""Each turn records when its phases began, so a profile can draw the overlap."""

from __future__ import annotations

import itertools

from obsspec.agent.episode import EpisodeLimits, play
from obsspec.speculation.gate import GateMode, GateSettings
from obsspec.speculation.runner import SpeculativeLoop
from obsspec.speculation.settings import SpeculationSettings
from tests.speculation.fakes import TablePredictor, fake_policy, new_episode, step_sandbox, truth_of

LIMITS = EpisodeLimits(max_turns=5, max_tokens=64, temperature=0.7)
EXEC_S = 0.3


async def test_a_sequential_timeline_is_back_to_back(builder):
    trajectory, context = new_episode(builder, 3)
    await play(
        trajectory, context, step_sandbox(EXEC_S), fake_policy(builder.tokenizer), builder, LIMITS
    )
    turns = trajectory.turns
    assert turns[0].gen_start_s < 0.5  # relative to the start of the turns, not the clock
    for turn, after in itertools.pairwise(turns):
        if turn.action == "command":
            assert turn.gen_start_s + turn.gen_s <= turn.exec_start_s + 0.01
            assert turn.exec_start_s + turn.exec_s <= after.gen_start_s + 0.01
        assert turn.predict_start_s == 0.0


async def test_a_kept_guess_overlaps_the_next_reply_with_the_command(builder):
    sequential, context = new_episode(builder, 3)
    await play(
        sequential, context, step_sandbox(EXEC_S), fake_policy(builder.tokenizer), builder, LIMITS
    )
    trajectory, context = new_episode(builder, 3)
    settings = SpeculationSettings(gate=GateSettings(mode=GateMode.always))
    loop = SpeculativeLoop(TablePredictor(truth_of(sequential)), settings=settings)
    engine = fake_policy(builder.tokenizer)
    await play(trajectory, context, step_sandbox(EXEC_S), engine, builder, LIMITS, loop)
    first, second = trajectory.turns[:2]
    assert first.action == "command" and first.speculation.matched
    assert first.exec_start_s <= first.predict_start_s < first.exec_start_s + EXEC_S
    # The second reply began on the guess, while the first command still ran.
    assert first.exec_start_s < second.gen_start_s < first.exec_start_s + first.exec_s
