"""Terminal-Bench v1 task directories.

    <task>/
        task.yaml            instruction, max_agent_timeout_sec, max_test_timeout_sec, ...
        Dockerfile           built with the task directory as context
        docker-compose.yaml  (read for nothing: one container per task here)
        run-tests.sh         the verifier: runs pytest over $TEST_DIR (= /tests)
        tests/               copied to /tests only after the agent phase
        solution.sh          optional reference solution
Reward: 1 if and only if every pytest test passed.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from environments.build import tree_hash
from environments.errors import TaskFormatError
from environments.tasks.model import Task


class TaskYaml(BaseModel):
    model_config = ConfigDict(extra="allow")
    instruction: str = Field(min_length=1)
    max_agent_timeout_sec: float = Field(default=900, gt=0)
    max_test_timeout_sec: float = Field(default=180, gt=0)


def parse_task_yaml(path: Path) -> TaskYaml:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise TaskFormatError(path, f"not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise TaskFormatError(path, "must be a mapping of fields")
    try:
        return TaskYaml.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        raise TaskFormatError(path, first["msg"], field=".".join(map(str, first["loc"]))) from e


def load_tbv1(root: Path) -> Task:
    config = parse_task_yaml(root / "task.yaml")
    for required in ("Dockerfile", "run-tests.sh"):
        if not (root / required).is_file():
            raise TaskFormatError(root / required, "missing")
    if not (root / "tests").is_dir():
        raise TaskFormatError(root / "tests", "missing (the pytest tests)")
    solution = root / "solution.sh"
    return Task(
        id=root.name,
        path=root,
        format="tbv1",
        content_hash=tree_hash(root),
        instruction=config.instruction,
        build_context=root,
        agent_timeout_s=config.max_agent_timeout_sec,
        verifier_timeout_s=config.max_test_timeout_sec,
        tests_dir=root / "tests",
        verifier_script=root / "run-tests.sh",
        solution=solution if solution.is_file() else None,
        metadata=config.model_extra or {},
    )
