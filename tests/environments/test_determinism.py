"""`env determinism`: the comparison and the summary on hand-made runs, then real sandboxes:
a solution that prints the clock differs in exactly that command, a stable one never, and a
task whose image does not build is named as not run (exit 3)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from obsspec.environments.determinism import (
    TaskDeterminism,
    compare_runs,
    first_differing_line,
    measure_tasks,
    summarize,
)
from obsspec.environments.tasks import load_task


def test_first_differing_line_names_the_line_and_both_versions():
    assert first_differing_line("a\nb\n[exit 0]", "a\nb\n[exit 0]") is None
    assert first_differing_line("Date: 1\nx", "Date: 2\nx") == (1, "Date: 1", "Date: 2")
    assert first_differing_line("a\nb", "a\nb\nc") == (3, "", "c")
    assert first_differing_line("a", "a\n") == (2, "", "")  # one more (empty) line


def test_compare_runs_compares_every_run_with_the_first():
    commands = ["date", "echo ok"]
    runs = [["1\n[exit 0]", "ok\n[exit 0]"], ["1\n[exit 0]", "ok\n[exit 0]"], ["2", "ok\n[exit 0]"]]
    (diff,) = compare_runs("t", "clock", commands, runs)
    assert (diff.task, diff.command, diff.run, diff.index) == ("t", "date", 3, 0)
    assert diff.first_line == ("1", "2")


def test_summary_groups_by_family_and_counts_tasks_not_run():
    reports = [
        TaskDeterminism("clock-0", "clock", ["date", "echo a"], [["1", "a"], ["2", "a"]]),
        TaskDeterminism("clock-1", "clock", ["echo b"], [["b"], ["b"]]),
        TaskDeterminism("files-0", "files", ["ls"], [["x"], ["x"]]),
        TaskDeterminism("broken-0", "files", error="image build failed"),
    ]
    summary = summarize(reports)
    assert summary["by_family"]["clock"] == {
        "tasks": 2,
        "not_run": 0,
        "commands": 3,
        "compared": 3,
        "differ": 1,
        "differ_share": 0.3333,
    }
    assert summary["by_family"]["files"]["differ_share"] == 0.0
    assert summary["by_family"]["files"]["not_run"] == 1
    assert summary["overall"]["differ"] == 1 and summary["overall"]["compared"] == 4
    assert summary["not_run"] == [
        {"task": "broken-0", "family": "files", "error": "image build failed"}
    ]
    assert [d["command"] for d in summary["differences"]] == ["date"]
    # a family with nothing compared has no share, rather than a share of 0
    assert summarize([reports[3]])["overall"]["differ_share"] is None


def harbor_task(root: Path, dockerfile: str, solve: str, family: str = "") -> Path:
    files = {
        "task.toml": f'[metadata]\nname = "{root.name}"\n'
        + (f'family = "{family}"\n' if family else "")
        + "[agent]\ntimeout_sec = 60\n",
        "instruction.md": "Print things.\n",
        "environment/Dockerfile": dockerfile,
        "solution/solve.sh": solve,
        "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


CLOCK_SOLUTION = "#!/bin/bash\ndate +%s%N\necho stable\n"
STABLE_SOLUTION = "#!/bin/bash\ncd /tmp\necho stable > f.txt\ncat f.txt\n"


@pytest.mark.docker
async def test_only_the_clock_differs(tmp_path, docker_client, base_image, run_id):
    dockerfile = f"FROM {base_image}\nWORKDIR /app\n"
    clock = load_task(harbor_task(tmp_path / "clock-0", dockerfile, CLOCK_SOLUTION, "clock"))
    stable = load_task(harbor_task(tmp_path / "stable-0", dockerfile, STABLE_SOLUTION))
    reports = await measure_tasks([clock, stable], docker_client, run_id, concurrency=2)
    summary = summarize(reports)
    assert summary["by_family"]["clock"]["compared"] == 2
    assert summary["by_family"]["clock"]["differ"] == 1
    (diff,) = summary["differences"]
    assert (diff["task"], diff["command"], diff["line"]) == ("clock-0", "date +%s%N", 1)
    assert diff["first_line"][0] != diff["first_line"][1]
    assert all(line.isdigit() for line in diff["first_line"])
    assert summary["by_family"]["external"] == {
        "tasks": 1,
        "not_run": 0,
        "commands": 3,
        "compared": 3,
        "differ": 0,
        "differ_share": 0.0,
    }
    assert reports[1].runs[0] == reports[1].runs[1]
    assert reports[1].runs[0][2] == "stable\n[exit code: 0]"  # the canonical observation


def obsspec(*args: str) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).with_name("obsspec")), *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.docker
def test_cli_names_a_task_that_could_not_run_and_exits_3(tmp_path, base_image):
    harbor_task(tmp_path / "stable-0", f"FROM {base_image}\nWORKDIR /app\n", STABLE_SOLUTION)
    broken = f"FROM {base_image}\nRUN echo no-such-package-here && exit 7\n"
    harbor_task(tmp_path / "broken-0", broken, STABLE_SOLUTION)
    result = obsspec("env", "determinism", str(tmp_path), "--json")
    assert result.returncode == 3, result.stderr
    summary = json.loads(result.stdout)
    (not_run,) = summary["not_run"]
    assert not_run["task"] == "broken-0" and "no-such-package-here" in not_run["error"]
    assert summary["overall"] == {
        "tasks": 1,
        "not_run": 1,
        "commands": 3,
        "compared": 3,
        "differ": 0,
        "differ_share": 0.0,
    }
    human = obsspec("env", "determinism", str(tmp_path / "stable-0"))
    assert human.returncode == 0, human.stderr
    assert "overall" in human.stdout and "0.0%" in human.stdout
