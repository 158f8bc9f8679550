"""What one RL step runs and learns from: its episodes, their rewards and advantages.

    specs = plan_step(task_ids, step, config)        # tasks_per_step groups of group_size
    batch = build_batch(specs, trajectories, grpo)   # advantages; failed groups masked

Tasks are taken in epochs: each epoch is a fresh permutation of the task set (by seed and
epoch), and step s takes the next `tasks_per_step` of them, so the data cursor is a function
of the step and a resumed run continues exactly where it stopped. Every episode's seed
derives from the run's seed, the step, the task and its place in the group.

A group with an episode the infrastructure failed on every attempt is masked: none of its
episodes are trained on (a missing member would bias the group's baseline), and nothing is
counted as reward 0. An episode that ran but ended badly (no `done`, out of turns, context
too long) is data and keeps its reward, 0 when the agent did not declare done and the
reward requires it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from obsspec.rl.config import GRPOSettings, RLConfig
from obsspec.rl.grpo import group_advantages
from obsspec.rl.policy_trainer import PolicyEpisode
from obsspec.rl.rollout import EpisodeSpec
from obsspec.rollout.plan import episode_seed
from obsspec.trajectory import Trajectory


def step_tasks(task_ids: list[str], step: int, per_step: int, seed: int) -> list[str]:
    chosen = []
    for index in range(step * per_step, (step + 1) * per_step):
        epoch, position = divmod(index, len(task_ids))
        order = sorted(task_ids)
        random.Random(f"{seed}:{epoch}").shuffle(order)
        chosen.append(order[position])
    return chosen


def plan_step(task_ids: list[str], step: int, config: RLConfig) -> list[EpisodeSpec]:
    grpo = config.grpo
    specs = []
    for group, task_id in enumerate(step_tasks(task_ids, step, grpo.tasks_per_step, config.seed)):
        for member in range(grpo.group_size):
            seed = episode_seed(config.seed, f"step{step}/group{group}/{task_id}", member)
            specs.append(EpisodeSpec(task_id, group, seed))
    return specs


def episode_reward(trajectory: Trajectory, requires_done: bool) -> float:
    if requires_done and not trajectory.declared_done:
        return 0.0
    return float(trajectory.reward or 0.0)


@dataclass
class StepBatch:
    episodes: list[PolicyEpisode] = field(default_factory=list)  # what the trainer learns from
    rewards: list[float] = field(default_factory=list)  # of every episode that ran
    trajectories: list[Trajectory] = field(default_factory=list)  # every episode that ran
    masked_groups: int = 0  # groups dropped for an infrastructure failure
    flat_groups: int = 0  # groups whose episodes all earned the same reward (no signal)
    failed_episodes: int = 0


def build_batch(
    specs: list[EpisodeSpec], trajectories: list[Trajectory | None], grpo: GRPOSettings
) -> StepBatch:
    batch = StepBatch()
    groups: dict[int, list[tuple[EpisodeSpec, Trajectory | None]]] = {}
    for spec, trajectory in zip(specs, trajectories, strict=True):
        groups.setdefault(spec.group, []).append((spec, trajectory))
        if trajectory is None:
            batch.failed_episodes += 1
        else:
            batch.trajectories.append(trajectory)
            batch.rewards.append(episode_reward(trajectory, grpo.reward_requires_done))
    for members in groups.values():
        played = [t for _, t in members if t is not None]
        if len(played) < len(members):
            batch.masked_groups += 1
            continue
        rewards = [episode_reward(t, grpo.reward_requires_done) for t in played]
        advantages = group_advantages(
            rewards, [0] * len(rewards), scale_by_std=grpo.scale_by_std, std=grpo.std
        )
        if all(a == 0 for a in advantages):
            batch.flat_groups += 1  # no gradient but the KL's: not worth a forward pass
            if grpo.kl_coef == 0:
                continue
        batch.episodes += [training_episode(t, a) for t, a in zip(played, advantages, strict=True)]
    return batch


def training_episode(trajectory: Trajectory, advantage: float) -> PolicyEpisode:
    return PolicyEpisode(
        list(trajectory.context_ids),
        list(trajectory.mask),
        list(trajectory.logprobs),
        advantage,
    )
