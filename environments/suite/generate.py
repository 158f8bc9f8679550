"""Writing generated tasks to disk (see the package docstring for the layout)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from obsspec.environments.suite.families import FAMILIES
from obsspec.environments.suite.registry import GeneratedTask

GENERATOR_VERSION = 2  # 2: files the setup writes have a fixed date
BASE_IMAGE = "obsspec/base:latest"


# Every file and directory the setup writes is dated FIXED_MTIME (2024-01-01 00:00 UTC, as git
# dates in the agent's shell: environments/deterministic_shell.py) instead of the moment of the
# build, so that `ls -l` prints the same in every build of the task. Dates the setup sets
# itself (older than the build) are kept: -newer picks only what the build touched.
FIXED_MTIME = 1704067200
DOCKERFILE = f"""FROM {BASE_IMAGE}
COPY setup/ /tmp/setup/
RUN touch /tmp/.obsspec-build && cd /tmp/setup && bash setup.sh && cd / && rm -rf /tmp/setup \\
 && find / -xdev -newer /tmp/.obsspec-build ! -path /tmp/.obsspec-build \\
    -exec touch -h -d @{FIXED_MTIME} {{}} + \\
 && rm /tmp/.obsspec-build && touch -h -d @{FIXED_MTIME} /tmp
WORKDIR /root
"""

TEST_SH = """#!/bin/bash
# Verifier entry point: reward 1 if check.sh passes, else 0.
mkdir -p /logs/verifier
if bash "$(dirname "$0")/check.sh"; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
"""


def task_toml(name: str, fam: str, seed: int, index: int, task: GeneratedTask) -> str:
    return f"""version = "1.0"

[metadata]
name = "{name}"
family = "{fam}"
seed = {seed}
index = {index}
generator_version = {GENERATOR_VERSION}

[agent]
timeout_sec = {task.agent_timeout_s}

[verifier]
timeout_sec = {task.verifier_timeout_s}

[environment]
build_timeout_sec = 600
cpus = 1
memory_mb = 2048
allow_internet = false
"""


def write_files(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in sorted(files.items()):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def write_task(out: Path, name: str, fam: str, seed: int, index: int, task: GeneratedTask):
    root = out / name
    if root.exists():
        shutil.rmtree(root)
    for line in task.solution:
        if "\n" in line or not line.strip():
            raise ValueError(f"{name}: solution commands must be single non-empty lines")
    files: dict[str, str | bytes] = {
        "instruction.md": task.instruction.strip() + "\n",
        "task.toml": task_toml(name, fam, seed, index, task),
        "environment/Dockerfile": DOCKERFILE,
        "environment/setup/setup.sh": "#!/bin/bash\nset -euo pipefail\n" + task.setup_sh,
        "tests/test.sh": TEST_SH,
        "tests/check.sh": "#!/bin/bash\nset -euo pipefail\n" + task.check_sh,
        "solution/solve.sh": "#!/bin/bash\n" + "\n".join(task.solution) + "\n",
    }
    files.update({f"environment/setup/{k}": v for k, v in task.setup_files.items()})
    files.update({f"tests/{k}": v for k, v in task.test_files.items()})
    write_files(root, files)
    return root


def generate(out: Path, n: int, seed: int, families: list[str] | None = None) -> list[Path]:
    """Write n tasks, cycling through the chosen families in registry order."""
    chosen = families or sorted(FAMILIES)
    unknown = [f for f in chosen if f not in FAMILIES]
    if unknown:
        raise ValueError(
            f"unknown families: {', '.join(unknown)}; known: {', '.join(sorted(FAMILIES))}"
        )
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(n):
        fam = chosen[index % len(chosen)]
        rng = random.Random(f"obsspec:{seed}:{fam}:{index}")
        name = f"{fam}-{index:03d}"
        paths.append(write_task(out, name, fam, seed, index, FAMILIES[fam](rng)))
    return paths
