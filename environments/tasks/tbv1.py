"""Terminal-Bench v1 task directories.

    <task>/
        task.yaml            instruction, max_agent_timeout_sec, max_test_timeout_sec, and
                             Terminal-Bench's descriptive keys (KNOWN_KEYS); others warn
        Dockerfile           built with the task directory as context
        docker-compose.yaml  (read for nothing: one container per task here)
        run-tests.sh         the verifier: runs pytest over $TEST_DIR (= /tests)
        tests/               copied to /tests only after the agent phase
        solution.sh          optional reference solution
Reward: 1 if and only if every pytest test passed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from obsspec.environments.build import tree_hash
from obsspec.environments.errors import TaskFormatError
from obsspec.environments.tasks.model import Task
from obsspec.environments.tasks.text import read_task_text

# Terminal-Bench 1's task.yaml keys (its TaskConfig, old and new): read past silently; the
# descriptive ones end up in Task.metadata. Any other key is a warning naming it.
KNOWN_KEYS = {
    "instruction",
    "descriptions",
    "author_name",
    "author_email",
    "difficulty",
    "category",
    "tags",
    "parser_name",
    "max_agent_timeout_sec",
    "max_test_timeout_sec",
    "run_tests_in_same_shell",
    "disable_asciinema",
    "estimated_duration_sec",
    "expert_time_estimate_min",
    "junior_time_estimate_min",
    "test_scripts",
    "env_name",
}


class TaskYaml(BaseModel):
    model_config = ConfigDict(extra="allow")
    instruction: str = Field(min_length=1)
    max_agent_timeout_sec: float = Field(default=900, gt=0)
    max_test_timeout_sec: float = Field(default=180, gt=0)

    @model_validator(mode="before")
    @classmethod
    def base_description(cls, data: Any) -> Any:
        """Early Terminal-Bench tasks give `descriptions: [{key: base, description: ...}]`."""
        if isinstance(data, dict) and "instruction" not in data:
            for entry in data.get("descriptions") or []:
                if isinstance(entry, dict) and entry.get("key") == "base":
                    return {**data, "instruction": entry.get("description")}
        return data


def parse_task_yaml(path: Path) -> TaskYaml:
    try:
        data = yaml.safe_load(read_task_text(path, root=path.parent))
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
        format_warnings=[
            f"{root / 'task.yaml'}: unknown key '{key}' (ignored)"
            for key in config.model_extra or {}
            if key not in KNOWN_KEYS
        ],
        metadata=config.model_extra or {},
    )
