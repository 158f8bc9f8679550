"""The policy a rollout session runs: one shared engine, or the oracle (one per episode).

policy = Policy(name, builder, engine, action_format)   # the session builds it
engine = policy.engine_for(task)                        # the shared engine, or an oracle
limits = policy.limits_for(task, settings.limits)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from obsspec.agent.context import ChatContextBuilder
from obsspec.agent.episode import EpisodeLimits
from obsspec.agent.oracle import oracle_policy, unplayable
from obsspec.agent.protocol import ActionFormat
from obsspec.config import DEFAULT_MODEL
from obsspec.environments.errors import TaskFormatError
from obsspec.environments.tasks.model import Task
from obsspec.errors import ConfigError
from obsspec.inference.base import Engine
from obsspec.models.registry import resolve_model
from obsspec.rollout.config import RolloutSettings


@dataclass
class Policy:
    name: str  # what the dataset records as the model
    builder: ChatContextBuilder
    engine: Engine | None  # None for the oracle
    action_format: ActionFormat
    _solutions: dict[str, list[str]] = field(default_factory=dict)  # task id -> commands

    def engine_for(self, task: Task) -> Engine:
        if self.engine is not None:
            return self.engine
        return oracle_policy(self.builder, self.solution(task), self.action_format)

    def limits_for(self, task: Task, limits: EpisodeLimits) -> EpisodeLimits:
        """The oracle needs a turn per solution command plus one to say done."""
        if self.engine is not None:
            return limits
        turns = max(limits.max_turns, len(self.solution(task)) + 1)
        return limits.model_copy(update={"max_turns": turns})

    def solution(self, task: Task) -> list[str]:
        """The oracle's commands for task (cut once per task: it runs bash's parser)."""
        if task.id not in self._solutions:
            problem = oracle_problem(task, self.action_format)
            if problem is not None:
                raise ConfigError(f"the oracle cannot play task {task.id}: {problem}")
            self._solutions[task.id] = task.solution_commands()
        return self._solutions[task.id]


def oracle_problem(task: Task, fmt: ActionFormat) -> str | None:
    """Why the oracle cannot play task (no solution, one it cannot cut or carry), or None:
    collect skips such tasks up front, naming the reason."""
    if task.solution is None:
        return f"{task.path}: no reference solution for the oracle to play"
    try:
        commands = task.solution_commands()
    except TaskFormatError as e:
        return str(e)
    problem = unplayable(commands, fmt)
    return None if problem is None else f"{task.solution}: {problem}"


def playable_tasks(
    tasks: list[Task], fmt: ActionFormat, *, strict: bool
) -> tuple[list[Task], dict[str, str]]:
    """The tasks the oracle can play, and {task path: why not} of the others (with strict,
    the first one is raised instead)."""
    playable: list[Task] = []
    refused: dict[str, str] = {}
    for task in tasks:
        problem = oracle_problem(task, fmt)
        if problem is None:
            playable.append(task)
        elif strict:
            raise ConfigError(f"the oracle cannot play task {task.id}: {problem}")
        else:
            refused[str(task.path)] = f"the oracle cannot play it: {problem}"
    return playable, refused


def policy_model(config: RolloutSettings, models_dir: Path) -> Path:
    """The model directory whose tokenizer (and, unless oracle, weights) the policy uses."""
    name = (config.tokenizer or DEFAULT_MODEL) if config.is_oracle else config.policy
    return resolve_model(name, models_dir)


def check_policy_model(config: RolloutSettings, models_dir: Path) -> Path:
    """The policy's model directory, refused before anything is made when its tokenizer does
    not load or has no chat template, or when the weights an engine here would serve do not
    open (an oracle, or a --server, serves none of them)."""
    from obsspec.models.tokenizer import load_tokenizer
    from obsspec.models.weights import check_weights

    model_dir = policy_model(config, models_dir)
    load_tokenizer(model_dir)
    if not config.is_oracle and not config.engine.server:
        check_weights(model_dir)
    return model_dir
