"""What a step runs and learns from: the plan, rewards, advantages and masking (no engines)."""

from __future__ import annotations

from collections import Counter

import pytest

from obsspec.rl.config import GRPOSettings, RLConfig
from obsspec.rl.steps import build_batch, episode_reward, plan_step, step_tasks
from obsspec.train.sequences import Sample, pack
from obsspec.trajectory import Trajectory
from obsspec.world_model.cotrain import ReplayBuffer


def config(**grpo) -> RLConfig:
    return RLConfig(tasks="t", out="o", seed=3, grpo=GRPOSettings(**grpo))


def test_every_task_comes_once_per_epoch_in_a_seeded_order():
    tasks = [f"task-{i}" for i in range(5)]
    taken = [t for step in range(5) for t in step_tasks(tasks, step, 2, seed=3)]  # 2 epochs
    assert Counter(taken[:5]) == Counter(tasks) and Counter(taken[5:]) == Counter(tasks)
    assert taken[:5] != taken[5:]  # each epoch its own order
    assert step_tasks(tasks, 4, 2, seed=3) == step_tasks(tasks, 4, 2, seed=3)
    assert step_tasks(tasks, 0, 5, seed=3) != step_tasks(tasks, 0, 5, seed=4)


def test_a_step_plan_is_groups_of_distinct_seeds_and_repeats_exactly():
    specs = plan_step(["a", "b", "c"], 7, config(group_size=4, tasks_per_step=2))
    assert len(specs) == 8 and [s.group for s in specs] == [0] * 4 + [1] * 4
    assert len({s.task_id for s in specs[:4]}) == 1 and len({s.seed for s in specs}) == 8
    assert specs == plan_step(["a", "b", "c"], 7, config(group_size=4, tasks_per_step=2))
    assert specs != plan_step(["a", "b", "c"], 8, config(group_size=4, tasks_per_step=2))


def episode(reward: float | None, done: bool = True) -> Trajectory:
    trajectory = Trajectory("t", "h", "m", 0, [1, 2])
    trajectory.context_ids, trajectory.mask = [1, 2, 3, 4], [0, 0, 1, 1]
    trajectory.logprobs = [None, None, -0.5, -0.25]
    trajectory.reward, trajectory.declared_done = reward, done
    return trajectory


def test_the_reward_needs_done_only_when_asked():
    assert episode_reward(episode(1.0, done=False), requires_done=True) == 0.0
    assert episode_reward(episode(1.0, done=False), requires_done=False) == 1.0
    assert episode_reward(episode(None), requires_done=True) == 0.0  # model error: data


def test_infrastructure_failures_mask_their_group_and_flat_groups_are_skipped():
    specs = plan_step(["a", "b", "c"], 0, config(group_size=2, tasks_per_step=3))
    played = [episode(1.0), episode(0.0), episode(1.0), None, episode(0.0), episode(0.0)]
    batch = build_batch(specs, played, GRPOSettings(group_size=2, tasks_per_step=3))
    assert batch.masked_groups == 1 and batch.failed_episodes == 1
    assert batch.flat_groups == 1
    # a group of two, [1, 0]: mean 0.5, unbiased std sqrt(0.5) (population: 0.5)
    assert [e.advantage for e in batch.episodes] == pytest.approx([0.7071, -0.7071], abs=1e-4)
    assert batch.rewards == [1.0, 0.0, 1.0, 0.0, 0.0]  # every episode that ran is reported
    assert batch.episodes[0].mask == [0, 0, 1, 1]
    # with a KL term, flat groups still give a gradient and are kept
    kl = build_batch(specs, played, GRPOSettings(group_size=2, tasks_per_step=3, kl_coef=0.1))
    assert len(kl.episodes) == 4
    population = GRPOSettings(group_size=2, tasks_per_step=3, std="population")
    old = build_batch(specs, played, population)
    assert [e.advantage for e in old.episodes] == pytest.approx([1.0, -1.0], abs=1e-5)


def test_the_replay_buffer_is_bounded_and_its_draws_resume_exactly():
    buffer = ReplayBuffer(3, seed=0)
    buffer.add([[Sample([i], [i]) for i in range(3)], [Sample([3], [3]), Sample([4], [4])]])
    # the oldest episode loses its first turns; the others are kept whole
    assert [s.prompt_ids for s in buffer.samples] == [[2], [3], [4]]
    saved = buffer.state()
    first = buffer.draw(2)
    again = ReplayBuffer(3, seed=99)
    again.load(saved)
    assert again.draw(2) == first and len(buffer.draw(10)) == 3
    assert ReplayBuffer(0, seed=0).draw(4) == []
    empty = ReplayBuffer(0, seed=0)
    empty.add([[Sample([1], [1])]])
    assert len(empty) == 0


def chain(episode: int, turns: int) -> list[Sample]:
    """An episode's samples as build_examples makes them: each prompt extends the last turn."""
    samples, ids = [], [1000 + episode]
    for turn in range(turns):
        prompt = [*ids, 10 * turn]
        samples.append(Sample(prompt, [turn]))
        ids = [*prompt, turn]
    return samples


def test_a_draw_takes_whole_episodes_so_replayed_turns_chain_into_few_sequences():
    buffer = ReplayBuffer(100, seed=3)
    buffer.add([chain(e, 5) for e in range(10)])
    drawn = buffer.draw(12)  # two whole episodes and the first two turns of a third
    assert len(drawn) == 12
    assert len(pack(drawn, max_len=1000).sequences) == 3
