"""`env validate` on hand-made tasks in both formats: solutions run as scripts, as Harbor and
Terminal-Bench run them, and a failure says why (exit code, output tails)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from obsspec.environments.sandbox import DockerSandbox
from obsspec.environments.tasks import load_task
from obsspec.environments.tasks.images import TaskImages
from obsspec.environments.tasks.solution_run import run_solution_script
from obsspec.environments.validate import output_tail, validate_task

# Everything a line-by-line runner gets wrong: `set -euo pipefail`, a function, a heredoc with
# `#` lines, a for loop, an if block; relative paths (the task's WORKDIR) and a file next to
# the script (the whole solution directory is uploaded).
SOLUTION = """#!/bin/bash
set -euo pipefail
greet() {
    printf 'Hello, %s%s\\n' "$1" "$SUFFIX"
}
cat > notes.txt <<'EOF'
# a comment line that must stay
name: [bold]Ada[/] [@]
EOF
for name in Ada Grace Linus; do
    greet "$name" >> greetings.txt
done
if grep -q '^# a comment' notes.txt; then
    cp "$(dirname "$0")/extra.txt" done.txt
fi
"""
RUN_HARBOR = "SUFFIX='!' bash /solution/solve.sh"  # with the task's [solution.env]
NOTES = "# a comment line that must stay\nname: [bold]Ada[/] [@]\n"
GREETINGS = "Hello, Ada!\nHello, Grace!\nHello, Linus!\n"
HARBOR_TEST = """#!/bin/bash
echo "checking /app [/] [@]"
if cmp -s /app/notes.txt /tests/notes.txt && cmp -s /app/greetings.txt /tests/greetings.txt \\
    && [ "$(cat /app/done.txt 2>/dev/null)" = extra ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
"""
TB_TEST = f"""from pathlib import Path


def test_notes():
    assert Path("/app/notes.txt").read_text() == {NOTES!r}


def test_greetings_and_done():
    assert Path("/app/greetings.txt").read_text() == {GREETINGS!r}
    assert Path("/app/done.txt").read_text() == "extra\\n"
"""
# The first two lines are those of tests/fixtures/tasks/tbv1-wordcount: its cached layers.
TB_DOCKERFILE = """FROM {base}
RUN apt-get update -q && apt-get install -y -q --no-install-recommends python3-pytest \\
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def harbor_task(root: Path, base: str, solve: str, name: str = "", test: str = HARBOR_TEST):
    return write(
        root,
        {
            "task.toml": f'[metadata]\nname = "{name or root.name}"\n[agent]\ntimeout_sec = 60\n'
            '[solution.env]\nSUFFIX = "!"\n',
            "instruction.md": "Write the notes, the greetings and done.txt in /app.\n",
            "environment/Dockerfile": f"FROM {base}\nWORKDIR /app\n",
            "solution/solve.sh": solve,
            "solution/extra.txt": "extra\n",
            "tests/test.sh": test,
            "tests/notes.txt": NOTES,
            "tests/greetings.txt": GREETINGS,
        },
    )


def tbv1_task(root: Path, base: str) -> Path:
    # No [solution.env] and no solution directory in TB v1: the script does without them.
    solution = SOLUTION.replace("pipefail\n", "pipefail\nSUFFIX='!'\n")
    solution = solution.replace('cp "$(dirname "$0")/extra.txt"', "echo extra >")
    return write(
        root,
        {
            "task.yaml": "instruction: Write the notes and greetings in /app.\n"
            "max_agent_timeout_sec: 60\nmax_test_timeout_sec: 60\n",
            "Dockerfile": TB_DOCKERFILE.format(base=base),
            "solution.sh": solution,
            "run-tests.sh": 'python3 -m pytest "$TEST_DIR/test_outputs.py" -rA\n',
            "tests/test_outputs.py": TB_TEST,
        },
    )


def test_output_tail_keeps_the_last_lines_and_caps_characters():
    text = "\n".join(f"line {i}" for i in range(100)) + "\n"
    assert output_tail(text, lines=3).splitlines() == ["line 97", "line 98", "line 99"]
    capped = output_tail("x" * 5000, chars=100)
    assert capped.startswith("...") and len(capped) == 103


@pytest.mark.docker
async def test_harbor_script_solution_gets_reward_1(tmp_path, docker_client, base_image, run_id):
    task = load_task(harbor_task(tmp_path / "harbor-script", base_image, SOLUTION))
    report = await validate_task(task, docker_client, TaskImages(docker_client), run_id)
    assert report.ok, (report.problems(), report.verifier_output)
    assert report.solution_exit_code == 0 and report.solution_reward == 1.0
    assert report.noop_reward == 0.0 and report.row()["problems"] == []


@pytest.mark.docker
async def test_tbv1_script_solution_gets_reward_1(tmp_path, docker_client, base_image, run_id):
    task = load_task(tbv1_task(tmp_path / "tbv1-script", base_image))
    report = await validate_task(task, docker_client, TaskImages(docker_client), run_id)
    assert report.ok, (report.problems(), report.solution_output, report.verifier_output)


@pytest.mark.docker
async def test_failing_solution_is_reported_with_its_output(
    tmp_path, docker_client, base_image, run_id
):
    solve = "echo 'step one [/]'\necho 'it broke [bold]' >&2\nexit 3\necho never\n"
    task = load_task(harbor_task(tmp_path / "fails", base_image, solve))
    report = await validate_task(task, docker_client, TaskImages(docker_client), run_id)
    assert not report.ok and report.solution_exit_code == 3
    assert f"reference solution `{RUN_HARBOR}` exited 3" in report.problems()
    assert "reference solution got reward 0, not 1" in report.problems()
    assert report.solution_output == "step one [/]\nit broke [bold]"
    assert "checking /app [/] [@]" in report.verifier_output  # why the verifier said 0
    assert report.noop_verifier_output == ""  # the no-op arm was as expected


@pytest.mark.docker
async def test_env_shell_solution_runs_in_the_shell_it_leaves(
    tmp_path, docker_client, base_image, run_id
):
    task = load_task(harbor_task(tmp_path / "shell", base_image, SOLUTION))
    image = await TaskImages(docker_client).ensure(task)
    async with DockerSandbox(docker_client, image, task.limits, run_id=run_id) as sandbox:
        run = await run_solution_script(task, sandbox)
        assert run.ok and run.command == RUN_HARBOR
        # The script's `set -e` and cwd stayed in its own bash; the shell is still at WORKDIR.
        after = await sandbox.run("pwd; cat greetings.txt; false; echo alive")
    assert after.stdout == f"/app\n{GREETINGS}alive\n"


def obsspec(*args: str) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).with_name("obsspec")), *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.docker
def test_cli_prints_task_text_literally_and_json_rows(tmp_path, base_image):
    """A task id and outputs full of rich markup: printed as typed, JSON stays valid."""
    name = "odd-[/]-[@]-[bold]x"
    solve = "echo 'ran [/] [@] [red]'\nexit 1\n"
    harbor_task(tmp_path / "tasks" / "odd", base_image, solve, name=name)
    harbor_task(tmp_path / "tasks" / "good", base_image, SOLUTION)
    tasks = str(tmp_path / "tasks")

    human = obsspec("env", "validate", tasks)
    assert human.returncode == 1, human.stderr
    assert f"FAIL {name} (" in human.stderr and "| ran [/] [@] [red]" in human.stderr
    assert f"{name}:" in human.stdout and "| checking /app [/] [@]" in human.stdout

    result = obsspec("env", "validate", tasks, "--json")
    assert result.returncode == 1, result.stderr
    payload = json.loads(result.stdout)
    rows = {row["task"]: row for row in payload["rows"]}
    assert (payload["tasks"], payload["ok"]) == (2, 1)
    odd, good = rows[name], rows["good"]
    assert odd["solution_exit_code"] == 1 and odd["solution_output"] == "ran [/] [@] [red]"
    assert odd["problems"][0] == f"reference solution `{RUN_HARBOR}` exited 1"
    assert (odd["solution_reward"], odd["noop_reward"]) == (0.0, 0.0)
    assert good["problems"] == [] and good["solution_reward"] == 1.0 and good["seconds"] > 0
    assert payload["failures"] == [{"task": name, "problems": odd["problems"]}]


@pytest.mark.docker
def test_env_shell_runs_the_solution_script_and_shows_the_verifier(tmp_path, base_image):
    root = harbor_task(tmp_path / "shell-cli", base_image, SOLUTION, name="shell-[/]-[@]")
    command = [str(Path(sys.executable).with_name("obsspec")), "env", "shell", str(root)]
    result = subprocess.run(
        [*command, "--solution", "--verify"],
        input="cat notes.txt\n",
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert "shell-[/]-[@]: Write the notes" in result.stderr
    assert result.stdout.startswith(f"$ {RUN_HARBOR}\n")
    assert f"$ cat notes.txt\n{NOTES}[exit code: 0]" in result.stdout
    verifier_at = result.stdout.index("checking /app [/] [@]")
    assert verifier_at < result.stdout.index("reward: 1 (verifier")
