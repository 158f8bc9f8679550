"""Running a task's reference solution as a script, the way its own harness runs it.

Harbor:  the task's whole solution/ directory is uploaded to /solution (solve.sh may use the
         files next to it) and `bash /solution/solve.sh` runs.
TB v1:   solution.sh is uploaded to /oracle/solution.sh (where Terminal-Bench's oracle agent
         puts it) and `bash /oracle/solution.sh` runs.

Both run in the sandbox's persistent shell, so from the task's working directory (the image's
WORKDIR, where that shell starts) with the agent's environment plus Harbor's `[solution] env`,
under the task's agent timeout. The script runs in a child bash: its `set -e`, `exit` or traps
end the script, never the shell, and the shell's later commands (`env shell`) see the files
it left.

The oracle policy is different on purpose: it plays the solution as an agent's turns.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from obsspec.environments.errors import TaskFormatError
from obsspec.environments.sandbox_protocol import Sandbox
from obsspec.environments.tasks.model import Task
from obsspec.environments.tasks.text import env_prefix, inside_task
from obsspec.types import ExecResult

TBV1_SOLUTION_DIR = "/oracle"


@dataclass(frozen=True)
class SolutionRun:
    command: str  # what ran in the shell, e.g. `bash /solution/solve.sh`
    result: ExecResult

    @property
    def ok(self) -> bool:
        return self.result.exit_code == 0 and not self.result.timed_out

    def problem(self) -> str | None:
        """One line saying how the script failed, or None when it exited 0."""
        if self.result.timed_out:
            return f"reference solution `{self.command}` timed out after {self.timeout_text()}"
        if self.result.exit_code != 0:
            return f"reference solution `{self.command}` exited {self.result.exit_code}"
        return None

    def timeout_text(self) -> str:
        limit = self.result.timeout_s
        return f"{limit:g} s (the agent timeout)" if limit is not None else "its timeout"


def solution_upload(task: Task) -> tuple[Path, str, str]:
    """(what to upload, the sandbox directory it goes into, the script's path in there)."""
    if task.solution is None:
        raise TaskFormatError(task.path, f"task {task.id} has no reference solution")
    inside_task(task.path, task.solution)  # tar ships links inside as links, never followed
    if task.format == "harbor":
        folder = task.solution.parent  # solution/, uploaded whole: solve.sh may use its files
        return folder, "/", str(PurePosixPath("/", folder.name, task.solution.name))
    return task.solution, TBV1_SOLUTION_DIR, f"{TBV1_SOLUTION_DIR}/{task.solution.name}"


async def run_solution_script(task: Task, sandbox: Sandbox) -> SolutionRun:
    """Upload the reference solution and run it with bash in the sandbox's shell."""
    source, dest_dir, script = solution_upload(task)
    await sandbox.upload(source, dest_dir)
    command = f"{env_prefix(task.solution_env)}bash {shlex.quote(script)}"
    result = await sandbox.run(command, timeout_s=task.agent_timeout_s)
    return SolutionRun(command, result)
