"""The state-keyed cache: (task, commands run so far, command), whatever the policy wrote."""

from __future__ import annotations

import asyncio

from obsspec.speculation.predictor import SpeculationContext
from obsspec.world_model.cascade import default_cascade
from obsspec.world_model.state_cache import StateCachePredictor, state_key
from obsspec.world_model.turns import turn_records

LS = "a b\n[exit code: 0]"


def ctx(ids=(1, 2), commands=("cd /app",), task="h") -> SpeculationContext:
    return SpeculationContext(task, tuple(ids), commands)


def test_the_key_is_the_task_the_history_and_the_command():
    assert state_key(ctx(ids=(1,)), "ls") == state_key(ctx(ids=(9, 9, 9)), "ls")  # any reply
    assert state_key(ctx(), "ls") != state_key(ctx(task="g"), "ls")
    assert state_key(ctx(), "ls") != state_key(ctx(), "ls -a")
    assert state_key(ctx(), "ls") != state_key(ctx(commands=()), "ls")
    assert state_key(ctx(commands=("cd /app", "make")), "ls") != state_key(ctx(), "ls")
    # order matters, and joining commands cannot fake another history
    assert state_key(ctx(commands=("a", "b")), "ls") != state_key(ctx(commands=("b", "a")), "ls")
    assert state_key(ctx(commands=("a b",)), "ls") != state_key(ctx(commands=("a", "b")), "ls")
    assert state_key(ctx(commands=None), "ls") is None


async def test_siblings_with_different_replies_share_an_answer():
    cache = StateCachePredictor()
    assert await cache.predict(ctx(ids=(1, 2)), "ls") == []
    cache.observe(ctx(ids=(1, 2)), "ls", LS)
    [hit] = await cache.predict(ctx(ids=(5, 6, 7)), "ls")
    assert (hit.text, hit.source) == (LS, "state") and hit.confidence == cache.confidence
    assert await cache.predict(ctx(commands=("cd /app", "rm b")), "ls") == []  # another state


async def test_an_unknown_state_is_neither_answered_nor_stored():
    cache = StateCachePredictor()
    cache.observe(ctx(commands=None), "ls", LS)
    assert len(cache) == 0
    cache.observe(ctx(), "ls", LS)
    assert await cache.predict(ctx(commands=None), "ls") == []


async def test_two_different_outputs_in_one_state_make_the_command_volatile():
    cache = StateCachePredictor()
    cache.observe(ctx(), "date", "Mon 10:00\n[exit code: 0]")
    cache.observe(ctx(), "date", "Mon 10:00\n[exit code: 0]")  # the same again: still trusted
    assert await cache.predict(ctx(), "date")
    cache.observe(ctx(), "date", "Mon 10:01\n[exit code: 0]")
    assert cache.is_volatile("h", "date")
    assert await cache.predict(ctx(), "date") == []
    cache.observe(ctx(commands=()), "date", "Mon 10:02\n[exit code: 0]")
    assert await cache.predict(ctx(commands=()), "date") == []  # in any state of the task
    cache.observe(ctx(task="g"), "date", "Mon 10:02\n[exit code: 0]")
    assert await cache.predict(ctx(task="g"), "date")  # another task has its own record


async def test_memory_is_bounded_least_recently_used_first():
    cache = StateCachePredictor(max_entries=2)
    cache.observe(ctx(), "ls", LS)
    cache.observe(ctx(), "pwd", "/app\n[exit code: 0]")
    await cache.predict(ctx(), "ls")  # touched: pwd is now the oldest
    cache.observe(ctx(), "id", "root\n[exit code: 0]")
    assert len(cache) == 2
    assert await cache.predict(ctx(), "pwd") == [] and await cache.predict(ctx(), "ls")


async def test_the_default_cascade_asks_the_state_cache_first():
    cascade = default_cascade()
    cascade.observe(ctx(ids=(1,)), "cat f", "x\n[exit code: 0]")
    [hit] = await cascade.predict(ctx(ids=(2,)), "cat f")
    assert hit.source == "state"


def turn(action: str, command: str = "", timed_out: bool = False) -> dict:
    return {
        "action": action,
        "command": command,
        "timed_out": timed_out,
        "action_ids": [7],
        "observation_ids": [8],
        "observation": "",
        "exec_s": 0.1,
    }


def test_dataset_turns_carry_their_history_until_a_timeout():
    turns = [turn("command", "cd /app"), turn("invalid"), turn("command", "make", True)]
    turns.append(turn("command", "ls"))
    records = list(turn_records({"prompt_ids": [1], "task_hash": "h", "turns": turns}))
    assert [r.context.commands for r in records] == [(), ("cd /app",), None]
    assert records[1].context.ids == (1, 7, 8, 7, 8, 7)


async def test_a_sibling_waits_for_the_output_of_the_same_state_being_run():
    cache = StateCachePredictor(wait_s=5)
    owner, sibling = ctx(ids=(1,)), ctx(ids=(2,))
    end = cache.running(owner, "make")
    assert await cache.predict(owner, "make") == []  # never waits for its own command
    waiting = asyncio.create_task(cache.predict(sibling, "make"))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    cache.observe(owner, "make", "built\n[exit code: 0]")
    end()
    [hit] = await waiting
    assert hit.text == "built\n[exit code: 0]" and hit.latency_s >= 0.01
    assert cache.running(owner, "make")() is None  # answered already: nothing to wait for


async def test_waiting_ends_with_nothing_when_the_command_gives_no_output_or_takes_too_long():
    cache = StateCachePredictor(wait_s=5)
    end = cache.running(ctx(ids=(1,)), "make")
    waiting = asyncio.create_task(cache.predict(ctx(ids=(2,)), "make"))
    await asyncio.sleep(0.01)
    end()  # the sandbox failed under it
    assert await waiting == []
    impatient = StateCachePredictor(wait_s=0.05)
    impatient.running(ctx(ids=(1,)), "make")
    assert await impatient.predict(ctx(ids=(2,)), "make") == []
    never = StateCachePredictor(wait_s=0)
    never.running(ctx(ids=(1,)), "make")
    assert await asyncio.wait_for(never.predict(ctx(ids=(2,)), "make"), 0.01) == []
