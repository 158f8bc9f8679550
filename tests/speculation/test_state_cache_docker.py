"""The state cache on a GRPO group in real Docker sandboxes (bench/state_cache.py's workload):
siblings whose replies differ but whose commands are the same share answers; the clock, and
whatever follows a command killed by its timeout, are not answered from it."""

from __future__ import annotations

import pytest

from bench.state_cache import COMMANDS, cascades, figures, play_group
from obsspec.environments.pool import SandboxPool
from obsspec.speculation.gate import GateMode, GateSettings
from obsspec.speculation.runner import SpeculativeLoop
from obsspec.speculation.settings import SpeculationSettings

pytestmark = pytest.mark.docker

SETTINGS = SpeculationSettings(gate=GateSettings(mode=GateMode.always))
CLOCK, AFTER_TIMEOUT = COMMANDS.index("date +%s%N"), len(COMMANDS) - 1


async def test_siblings_share_the_state_cache_in_real_sandboxes(
    docker_client, base_image, run_id, builder
):
    async with SandboxPool(docker_client, base_image, size=4, run_id=run_id) as pool:
        loop = SpeculativeLoop(cascades()["state_cache"](), settings=SETTINGS)
        group = await play_group(
            pool, builder, loop, size=4, together=False, first_salt=0, seconds_per_token=0
        )
        old = SpeculativeLoop(cascades()["context_cache"](), settings=SETTINGS)
        together = await play_group(
            pool, builder, old, size=4, together=True, first_salt=0, seconds_per_token=0
        )

    assert len({tuple(t.context_ids) for t in group}) == 4  # the replies differ
    for sibling in group[1:]:
        records = [t.speculation for t in sibling.turns if t.action == "command"]
        state = [i for i, r in enumerate(records) if r.matched and r.source == "state"]
        assert state == [i for i in range(len(COMMANDS)) if i not in (CLOCK, AFTER_TIMEOUT)]
        assert not records[CLOCK].matched  # a clock never repeats
        assert records[AFTER_TIMEOUT].source != "state"  # the state after a kill is unknown
    assert figures(group)["matched_by_source"]["state"] == 3 * (len(COMMANDS) - 2)
    assert "cache" not in figures(together)["matched_by_source"]  # contexts never repeat
