"""The Task record every loader produces and every runner consumes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from environments.sandbox import SandboxLimits
from obsspec.config import StrictModel


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
    metadata: dict[str, Any] = Field(default_factory=dict)

    def solution_commands(self) -> list[str]:
        """The reference solution as commands, one per non-empty, non-comment line."""
        if self.solution is None:
            return []
        lines = self.solution.read_text().splitlines()
        return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
