"""Harbor task directories (Terminal-Bench 2.0, Endless Terminals, our generated suite).

<task>/
    instruction.md           the instruction
    task.toml                [agent] timeout_sec, [verifier] timeout_sec,
                             [environment] docker_image | build_timeout_sec, cpus,
                             memory_mb, allow_internet, env; [metadata] anything
    environment/Dockerfile   unless [environment] docker_image names a prebuilt image
    tests/test.sh            the verifier; writes /logs/verifier/reward.json or reward.txt
    solution/solve.sh        optional reference solution
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from environments.build import tree_hash
from environments.errors import TaskFormatError
from environments.sandbox import SandboxLimits
from environments.tasks.model import Task
from obsspec.config import read_toml
from obsspec.errors import ConfigError


class _Section(BaseModel):
    # Unknown keys are allowed: Harbor grows new ones; known keys are type-checked.
    model_config = ConfigDict(extra="allow")


class AgentSection(_Section):
    timeout_sec: float = Field(default=900, gt=0)


class VerifierSection(_Section):
    timeout_sec: float = Field(default=180, gt=0)


class EnvironmentSection(_Section):
    docker_image: str | None = None
    build_timeout_sec: float = Field(default=600, gt=0)
    cpus: float = Field(default=1, gt=0)
    memory_mb: int = Field(default=2048, ge=64)
    allow_internet: bool = False
    env: dict[str, str] = Field(default_factory=dict)


class TaskToml(_Section):
    version: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)


def parse_task_toml(path: Path) -> TaskToml:
    try:
        data = read_toml(path)
    except ConfigError as e:
        raise TaskFormatError(path, str(e).split(": ", 1)[-1]) from e
    try:
        return TaskToml.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise TaskFormatError(path, first["msg"], field=field) from e


def load_harbor(root: Path) -> Task:
    config = parse_task_toml(root / "task.toml")
    instruction_file = root / "instruction.md"
    if not instruction_file.is_file():
        raise TaskFormatError(instruction_file, "missing (the task's instruction)")
    env = config.environment
    context = root / "environment"
    if env.docker_image is None and not (context / "Dockerfile").is_file():
        raise TaskFormatError(
            context / "Dockerfile", "missing, and task.toml names no [environment] docker_image"
        )
    test_sh = root / "tests" / "test.sh"
    if not test_sh.is_file():
        raise TaskFormatError(test_sh, "missing (the verifier)")
    solution = root / "solution" / "solve.sh"
    return Task(
        id=str(config.metadata.get("name") or root.name),
        path=root,
        format="harbor",
        content_hash=tree_hash(root),
        instruction=instruction_file.read_text(),
        image=env.docker_image,
        build_context=None if env.docker_image else context,
        limits=SandboxLimits(
            cpus=env.cpus, memory_mb=env.memory_mb, allow_internet=env.allow_internet, env=env.env
        ),
        agent_timeout_s=config.agent.timeout_sec,
        verifier_timeout_s=config.verifier.timeout_sec,
        build_timeout_s=env.build_timeout_sec,
        tests_dir=root / "tests",
        verifier_script=test_sh,
        solution=solution if solution.is_file() else None,
        metadata=config.metadata,
    )
