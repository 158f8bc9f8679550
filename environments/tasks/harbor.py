"""Harbor task directories (Terminal-Bench 2.0, Endless Terminals, our generated suite).

<task>/
    instruction.md           the instruction (UTF-8)
    task.toml                see below
    environment/Dockerfile   unless [environment] docker_image names a prebuilt image
    tests/test.sh            the verifier; writes /logs/verifier/reward.json or reward.txt
    solution/solve.sh        optional reference solution

task.toml, as Harbor's current TaskConfig has it (obsspec's additions marked +):

    version = "1.0"                     (or schema_version)
    [metadata]                          anything; `name` renames the task
    [agent]       timeout_sec
    [verifier]    timeout_sec, env (for test.sh),
                  + reward_key = "correctness" | + reward_aggregate = "min"|"mean"|"product"
                  (environments.tasks.rewards: how several reward keys make one reward)
    [solution]    env (for solve.sh)
    [environment] docker_image, build_timeout_sec, cpus, memory = "4G" (or memory_mb),
                  storage = "10G" (or storage_mb; environments/disk_limit.py), allow_internet, env,
                  + deterministic = false (the agent's shell keeps real git dates, hash seed
                  and $RANDOM; environments/deterministic_shell.py)

Keys obsspec does not know are a warning naming the file and the key (Task.format_warnings),
never silently dropped and never an error: Harbor grows new ones. Harbor keys that change
how a task runs but obsspec does not support (a user, GPUs, health checks, network
allow-lists, MCP servers, steps) are warned about the same way when they are set.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from obsspec.environments.build import tree_hash
from obsspec.environments.errors import TaskFormatError
from obsspec.environments.sandbox import SandboxLimits
from obsspec.environments.tasks.model import Task
from obsspec.environments.tasks.rewards import RewardAggregate
from obsspec.environments.tasks.text import read_task_text

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT])(?:I?B)?\s*\Z", re.IGNORECASE)
MIB_PER_UNIT = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}

# Harbor keys read past without a word (informational), and those warned about when set
# (they would change how the task runs, and obsspec does not do them). "" is the top level.
QUIET = {"": {"schema_version", "task", "source"}, "environment": {"skills_dir"}}
UNSUPPORTED = {
    "": {"steps", "multi_step_reward_mode"},
    "agent": {"user", "network_mode", "allowed_hosts"},
    "verifier": {"user", "network_mode", "allowed_hosts"},
    "environment": {
        "gpus",
        "gpu_types",
        "network_mode",
        "allowed_hosts",
        "mcp_servers",
        "healthcheck",
    },
}


def size_mb(value: Any) -> Any:
    """A size such as "4G", "512M", "1.5g" or "2GiB" in MiB (Harbor's units are binary)."""
    if not isinstance(value, str):
        return value  # a number, or a type error pydantic reports
    match = SIZE.match(value)
    if match is None:
        raise ValueError(f"{value!r} is not a size; write e.g. '4G' or '512M'")
    return int(float(match[1]) * MIB_PER_UNIT[match[2].upper()])


def check_env_names(env: dict[str, str]) -> dict[str, str]:
    for name in env:
        if not ENV_NAME.match(name):
            raise ValueError(f"{name!r} is not an environment variable name")
    return env


class _Section(BaseModel):
    # Unknown keys are kept (model_extra) so that they can be named in a warning.
    model_config = ConfigDict(extra="allow")


class AgentSection(_Section):
    timeout_sec: float = Field(default=900, gt=0)


class VerifierSection(_Section):
    timeout_sec: float = Field(default=180, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    reward_key: str | None = Field(default=None, min_length=1)
    reward_aggregate: RewardAggregate | None = None

    _names = field_validator("env")(check_env_names)

    @model_validator(mode="after")
    def one_reward_rule(self) -> VerifierSection:
        if self.reward_key is not None and self.reward_aggregate is not None:
            raise ValueError("set reward_key or reward_aggregate, not both")
        return self


class SolutionSection(_Section):
    env: dict[str, str] = Field(default_factory=dict)

    _names = field_validator("env")(check_env_names)


class EnvironmentSection(_Section):
    docker_image: str | None = None
    build_timeout_sec: float = Field(default=600, gt=0)
    cpus: float = Field(default=1, gt=0)
    memory: int | None = Field(default=None, ge=64, description='"4G"; wins over memory_mb.')
    memory_mb: int = Field(default=2048, ge=64)
    storage: int | None = Field(default=None, gt=0, description='"10G"; wins over storage_mb.')
    storage_mb: int | None = Field(default=None, gt=0)
    allow_internet: bool = False
    env: dict[str, str] = Field(default_factory=dict)
    deterministic: bool = True

    _sizes = field_validator("memory", "storage", mode="before")(size_mb)
    _names = field_validator("env")(check_env_names)


class TaskToml(_Section):
    version: str | float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    solution: SolutionSection = Field(default_factory=SolutionSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)

    def ignored_keys(self, path: Path) -> list[str]:
        """One warning per unknown or unsupported key, naming the file and the key."""
        sections: dict[str, _Section] = {"": self, "agent": self.agent}
        sections |= {"verifier": self.verifier, "solution": self.solution}
        sections["environment"] = self.environment
        found = []
        for name, section in sections.items():
            for key, value in (section.model_extra or {}).items():
                dotted = f"{name}.{key}" if name else key
                if key in UNSUPPORTED.get(name, ()):
                    if value:
                        found.append(f"{path}: '{dotted}' is not supported by obsspec (ignored)")
                elif key not in QUIET.get(name, ()):
                    found.append(f"{path}: unknown key '{dotted}' (ignored)")
        return found


def parse_task_toml(path: Path) -> TaskToml:
    try:
        data = tomllib.loads(read_task_text(path, root=path.parent))
    except tomllib.TOMLDecodeError as e:
        raise TaskFormatError(path, f"not valid TOML: {e}") from e
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
    instruction = read_task_text(instruction_file, root=root)
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
        instruction=instruction,
        image=env.docker_image,
        build_context=None if env.docker_image else context,
        limits=SandboxLimits(
            cpus=env.cpus,
            memory_mb=env.memory or env.memory_mb,
            allow_internet=env.allow_internet,
            env=env.env,
            deterministic=env.deterministic,
            storage_mb=env.storage or env.storage_mb,
        ),
        agent_timeout_s=config.agent.timeout_sec,
        verifier_timeout_s=config.verifier.timeout_sec,
        build_timeout_s=env.build_timeout_sec,
        tests_dir=root / "tests",
        verifier_script=test_sh,
        solution=solution if solution.is_file() else None,
        solution_env=config.solution.env,
        verifier_env=config.verifier.env,
        reward_key=config.verifier.reward_key,
        reward_aggregate=config.verifier.reward_aggregate or "min",
        format_warnings=config.ignored_keys(root / "task.toml"),
        metadata=config.metadata,
    )
