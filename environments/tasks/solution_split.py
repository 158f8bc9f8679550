"""A reference solution as the commands an agent would type: the oracle policy's turns.

    plan = plan_solution(script_text, source=path)
    plan.commands   # ["cd /app", "cat > main.py <<'EOF'\\n# a comment\\n...\\nEOF", ...]
    plan.reason     # "cut into 5 commands", or "whole script because: set -e at line 3"

THE CUT (environments.tasks.bash_commands): bash's own parser decides where a command ends,
so a heredoc, a loop, a function, an `if`/`case` block, a `{ }` group or a continued line is
one command each, the units bash itself runs one after another when it reads the script.

WHOLE SCRIPT (environments.tasks.whole_script): where typing the commands one per turn into a
persistent shell would not do what `bash solve.sh` does (another interpreter, `set -e`,
`trap`, `exit`, the script's own arguments or path, ...), the oracle's only action writes the
script to /tmp and runs it, as an agent would.

REFUSED (TaskFormatError naming the file): a solution that uses files the agent's sandbox does
not have, i.e. a path under /solution or /oracle (where harnesses upload solutions) or the name
of another file of a Harbor solution/ directory. The oracle plays an agent, and an agent only
has what the task's image has; run such tasks with `obsspec env validate`, which uploads them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from obsspec.environments.errors import TaskFormatError
from obsspec.environments.tasks.bash_commands import top_level_commands
from obsspec.environments.tasks.text import read_task_text
from obsspec.environments.tasks.whole_script import (
    shebang,
    whole_script_action,
    whole_script_reason,
)

SHELLS = {"bash", "sh", "dash"}  # harnesses run solve.sh with bash whatever its shebang says


@dataclass(frozen=True)
class SolutionPlan:
    commands: list[str]  # the oracle's actions, in order
    whole_script_because: str | None  # None: cut at top-level commands

    @property
    def reason(self) -> str:
        if self.whole_script_because is None:
            return f"cut into {len(self.commands)} commands"
        return f"whole script because: {self.whole_script_because}"


def plan_solution(
    script: str,
    *,
    source: Path,
    siblings: Iterable[str] = (),
    run_dir: str = "/tmp",
    env: Mapping[str, str] | None = None,
) -> SolutionPlan:
    """How the oracle replays script (read from source): cut, or whole. siblings are the names
    of the other files shipped next to it (a Harbor solution/ directory); env is the task's
    [solution] env, which only a whole-script action can give the script (as its harness
    does) without an extra `export` turn in the expert data."""
    check_self_contained(script, source, siblings)
    env = env or {}
    interpreter = shebang(script)
    if interpreter is not None and interpreter[0] not in SHELLS:
        whole = whole_script_action(script, source.name, run_dir, interpreter=True, env=env)
        return SolutionPlan([whole], f"its shebang names {interpreter[0]}")
    commands = top_level_commands(script, source)
    if interpreter is not None and len(interpreter) > 1:
        reason: str | None = f"its shebang passes {' '.join(interpreter[1:])} to the shell"
    elif env:
        reason = f"the task sets [solution] env ({', '.join(env)})"
    else:
        reason = whole_script_reason(commands)
    if reason is None:
        return SolutionPlan([c.text for c in commands], None)
    return SolutionPlan([whole_script_action(script, source.name, run_dir, env=env)], reason)


def plan_solution_file(
    path: Path, *, folder: bool, env: Mapping[str, str] | None = None, root: Path | None = None
) -> SolutionPlan:
    """plan_solution for a solution file of the task directory root (by default, the
    directory that holds path, or its solution/ folder's); with folder, the files next to it
    ship with it."""
    script = read_task_text(path, root=root or (path.parent.parent if folder else path.parent))
    siblings = []
    if folder:
        siblings = [
            str(p.relative_to(path.parent))
            for p in sorted(path.parent.rglob("*"))
            if p.is_file() and p != path
        ]
    return plan_solution(script, source=path, siblings=siblings, env=env)


def check_self_contained(script: str, source: Path, siblings: Iterable[str]) -> None:
    """Refuse a solution that needs files the agent's sandbox lacks (see the module doc)."""
    needs = [(r"(?<![\w.-])/(?:solution|oracle)(?:/|\b)", "where harnesses upload the solution")]
    needs += [
        (rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", "a file shipped next to the solution")
        for name in siblings
    ]
    for pattern, what in needs:
        found = re.search(pattern, script)
        if found:
            line = script.count("\n", 0, found.start()) + 1
            raise TaskFormatError(
                source,
                f"line {line} uses {found.group(0).rstrip('/')}, {what}; the oracle types "
                "commands into the task's own image, which lacks it (`obsspec env validate` "
                "runs such solutions)",
            )
