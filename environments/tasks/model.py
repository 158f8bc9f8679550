"""The Task record every loader produces and every runner consumes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from obsspec.config import StrictModel
from obsspec.environments.sandbox import SandboxLimits
from obsspec.environments.tasks.rewards import RewardAggregate
from obsspec.environments.tasks.solution_split import plan_solution_file
from obsspec.environments.verifier_kit.plan import KitPlan


class Task(StrictModel):
    id: str = Field(description="Task name (the directory name unless the task names itself).")
    path: Path = Field(description="The task directory.")
    format: Literal["harbor", "tbv1"]
    content_hash: str = Field(description="sha256 over every file of the task directory.")
    instruction: str = Field(description="What the agent is asked to do.")
    image: str | None = Field(default=None, description="Prebuilt image to use as is.")
    build_context: Path | None = Field(default=None, description="Docker build context.")
    dockerfile: str = Field(default="Dockerfile", description="Dockerfile inside the context.")
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    agent_timeout_s: float = Field(default=900, gt=0)
    verifier_timeout_s: float = Field(default=180, gt=0)
    build_timeout_s: float = Field(default=600, gt=0)
    tests_dir: Path = Field(description="Copied to /tests only after the agent phase.")
    verifier_script: Path = Field(description="Harbor tests/test.sh, or TB v1 run-tests.sh.")
    solution: Path | None = Field(default=None, description="Reference solution script.")
    solution_env: dict[str, str] = Field(
        default_factory=dict, description="Environment of the reference solution (Harbor)."
    )
    verifier_env: dict[str, str] = Field(
        default_factory=dict, description="Environment of the verifier script (Harbor)."
    )
    reward_key: str | None = Field(
        default=None, description="The reward file's key that is the scalar reward."
    )
    reward_aggregate: RewardAggregate = Field(
        default="min", description="How several reward keys make the scalar reward."
    )
    format_warnings: list[str] = Field(
        default_factory=list,
        description="What the loader ignored in the task's files (e.g. unknown keys).",
    )
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier_kit: KitPlan | None = Field(
        default=None,
        description="What the verifier kit serves this task's verifier (set before a run by "
        "environments.verifier_kit.attach; None: the verifier runs as written).",
    )

    @property
    def storage_mb(self) -> int | None:
        """Disk the task asks for (Harbor's `storage`), MiB; None: the default
        (environments/disk_limit.py)."""
        return self.limits.storage_mb

    def solution_commands(self) -> list[str]:
        """The reference solution as the commands an agent would type, cut by bash's parser
        (or the whole script as one command where cutting is unsafe); see
        environments/tasks/solution_split.py. Raises TaskFormatError for a solution that does
        not parse or needs files the agent's sandbox lacks."""
        if self.solution is None:
            return []
        # Harbor uploads the whole solution/ folder, so its other files may be used; TB v1
        # uploads solution.sh alone.
        return plan_solution_file(
            self.solution, folder=self.format == "harbor", env=self.solution_env, root=self.path
        ).commands
