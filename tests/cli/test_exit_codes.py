"""How `obsspec` ends, as a script sees it: the exit code, one line of error, and under
--json exactly one JSON object on stdout, whatever happened (cli.exits)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from tests.cli.test_cli import OBSSPEC, obsspec

GREETING = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"


def error_lines(stderr: str) -> list[str]:
    """The error report: the `error:` line and what follows it (progress lines come before)."""
    lines = stderr.strip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("error:")]
    assert starts, stderr
    return lines[starts[0] :]


def test_a_usage_error_is_one_line_and_exit_code_2():
    result = obsspec("collect", "--no-such-flag")
    assert result.returncode == 2
    error, hint = result.stderr.strip().splitlines()  # no usage box
    assert error.startswith("error: no such option: --no-such-flag")
    assert hint == "hint: obsspec collect --help"
    assert result.stdout == ""

    bad_value = obsspec("collect", "-k", "many", "--json")
    assert bad_value.returncode == 2
    outcome = json.loads(bad_value.stdout)  # one object, nothing else on stdout
    assert outcome["status"] == "usage_error" and "--episodes-per-task" in outcome["error"]
    assert outcome["hint"] == "obsspec collect --help" and outcome["exit_code"] == 2


def test_json_error_before_the_run_is_one_object_with_a_hint(tmp_path, default_model_dir):
    # default_model_dir: collect resolves the model (its tokenizer) before it reads --tasks
    result = obsspec(
        "collect", "--tasks", str(tmp_path / "nothing"), "--out", str(tmp_path / "r"), "--json"
    )
    assert result.returncode == 1
    outcome = json.loads(result.stdout)
    assert outcome["status"] == "error" and outcome["exit_code"] == 1
    assert "no task directories found" in outcome["error"]
    assert "obsspec env generate" in outcome["hint"]
    assert error_lines(result.stderr) == [
        f"error: {outcome['error']}",
        f"hint: {outcome['hint']}",
    ]

    validate = obsspec("env", "validate", str(tmp_path / "nothing"), "--json")
    assert validate.returncode == 1
    assert "no task directories found" in json.loads(validate.stdout)["error"]


@pytest.fixture
def broken_tokenizer_model(default_model_dir, tmp_path) -> Path:
    """The default model with a tokenizer.json whose merges use a token its vocabulary lacks
    (as a truncated or hand-edited file does)."""
    model = tmp_path / "broken-tokenizer"
    model.mkdir()
    for path in default_model_dir.iterdir():
        if path.name != "tokenizer.json":
            (model / path.name).symlink_to(path)
    tokenizer = json.loads((default_model_dir / "tokenizer.json").read_text())
    first = tokenizer["model"]["merges"][0]
    del tokenizer["model"]["vocab"][first[0] if isinstance(first, list) else first.split()[0]]
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    return model


@pytest.mark.slow
def test_a_corrupt_tokenizer_is_a_model_error_naming_the_directory(
    broken_tokenizer_model, tmp_path
):
    out, model = tmp_path / "run", broken_tokenizer_model
    args = ["--tasks", str(GREETING), "--out", str(out), "--policy", str(model)]
    result = obsspec("collect", *args)
    assert result.returncode == 1
    error, hint = error_lines(result.stderr)
    assert error.startswith(f"error: model directory {model}: its tokenizer does not load")
    assert "out of vocabulary" in error and "unexpected" not in error
    assert hint.startswith(f"hint: restore tokenizer.json and tokenizer_config.json in {model}")
    assert not out.exists()  # refused before anything was made

    watch = obsspec("episode", str(GREETING), "--model", str(model), "--json")
    assert watch.returncode == 1
    assert json.loads(watch.stdout)["error"] == error.removeprefix("error: ")


@pytest.mark.docker
def test_collect_of_only_broken_tasks_is_not_complete(tmp_path):
    for name in ("bad-a", "bad-b"):
        (tmp_path / "tasks" / name).mkdir(parents=True)
        (tmp_path / "tasks" / name / "task.toml").write_text("[agent]\ntimeout_sec = 'later'\n")
    out = tmp_path / "run"
    args = ["--tasks", str(tmp_path / "tasks"), "--out", str(out), "--policy", "oracle"]
    result = obsspec("collect", *args, "--json")
    assert result.returncode == 1, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "empty" and summary["episodes"] == 0
    assert summary["total"] == 2 and summary["missing"] == 2
    assert len(summary["skipped_tasks"]) == 2
    assert "2 of 2 episodes are not in the dataset" in error_lines(result.stderr)[0]
    assert json.loads((out / "manifest.json").read_text())["status"] == "empty"


@pytest.fixture
def mixed_tasks(tmp_path) -> Path:
    """One good task, one that does not load, one whose image does not build."""
    tasks = tmp_path / "tasks"
    for name in ("good", "no-load", "no-build"):
        shutil.copytree(GREETING, tasks / name)
    (tasks / "no-load" / "task.toml").write_text("[agent]\ntimeout_sec = 'later'\n")
    (tasks / "no-build" / "environment" / "Dockerfile").write_text(
        "FROM obsspec/base:latest\nRUN echo preparing && echo 'it broke' >&2 && exit 3\n"
    )
    return tasks


@pytest.mark.docker
def test_unloadable_and_unbuildable_tasks_count_the_same_and_exit_3(
    mixed_tasks, tmp_path, base_image
):
    out = tmp_path / "run"
    args = ["--tasks", str(mixed_tasks), "--out", str(out), "--policy", "oracle", "-k", "2"]
    result = obsspec("collect", *args, "--json")
    assert result.returncode == 3, result.stderr  # partly done
    summary = json.loads(result.stdout)
    assert summary["status"] == "incomplete" and summary["episodes"] == 2
    assert summary["total"] == 6 and summary["missing"] == 4  # both broken tasks: 2 each
    skipped = summary["skipped_tasks"]
    assert sorted(Path(k).name for k in skipped) == ["no-build", "no-load"]
    assert all("\n" not in reason for reason in skipped.values())  # the log is elsewhere
    records = [json.loads(line) for line in (out / "failures.jsonl").open()]
    by_task = {Path(r["task_id"]).name: r for r in records if r["event"] == "task_skipped"}
    assert by_task.keys() == {"no-load", "no-build"}
    assert by_task["no-load"]["episodes"] == by_task["no-build"]["episodes"] == 2
    assert any("preparing" in line for line in by_task["no-build"]["log_tail"])
    error, hint = error_lines(result.stderr)
    assert "4 of 6 episodes are not in the dataset (2 task(s) skipped as broken)" in error
    assert "rerun the same command" in hint


@pytest.mark.docker
def test_strict_build_failure_is_two_lines_with_the_log_in_the_run_directory(
    mixed_tasks, tmp_path, base_image
):
    out = tmp_path / "run"
    task = str(mixed_tasks / "no-build")
    result = obsspec(
        "collect", "--tasks", task, "--out", str(out), "--policy", "oracle", "--strict"
    )
    assert result.returncode == 1
    error, hint = error_lines(result.stderr)  # exactly two lines, no log tail
    assert "no-build" in error and "returned a non-zero code: 3" in error
    assert hint == f"hint: the log's last lines are in {out / 'failures.jsonl'}"
    record = json.loads((out / "failures.jsonl").read_text().splitlines()[-1])
    assert record["event"] == "run_failed" and record["error_type"] == "ImageBuildError"
    assert any("it broke" in line for line in record["log_tail"])


@pytest.fixture
def slow_tasks(tmp_path) -> Path:
    """Three tasks whose oracle episodes take over a second each (as in test_collect_cli)."""
    for name in ("greet-a", "greet-b", "greet-c"):
        shutil.copytree(GREETING, tmp_path / "tasks" / name)
        solution = tmp_path / "tasks" / name / "solution" / "solve.sh"
        solution.write_text(solution.read_text() + "sleep 1.5\n")
    return tmp_path / "tasks"


@pytest.mark.docker
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stopped_json_collect_prints_one_object(slow_tasks, tmp_path, base_image, signum, code):
    out = tmp_path / "run"
    args = [OBSSPEC, "collect", "--tasks", str(slow_tasks), "--out", str(out), "--policy", "oracle"]
    proc = subprocess.Popen(
        [*args, "-k", "3", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    first_episode = threading.Event()
    lines: list[str] = []

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            if ": reward " in line:
                first_episode.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert first_episode.wait(180), "".join(lines)
    proc.send_signal(signum)
    stdout = proc.stdout.read()
    assert proc.wait(60) == code, "".join(lines)
    outcome = json.loads(stdout)  # exactly one object
    assert outcome["status"] == "interrupted" and outcome["exit_code"] == code
    assert outcome["episodes"] >= 1 and outcome["out"] == str(out)  # the summary so far
    assert outcome["hint"] == "rerun the same command to resume"


@pytest.mark.docker
def test_a_commands_own_json_flag_after_dashdash_is_not_ours(base_image):
    result = obsspec("env", "run", "--", "false", "--json")
    assert result.returncode == 1 and result.stdout == ""  # the command's exit code, as is


@pytest.mark.docker
def test_sigterm_stops_any_command_with_143_and_one_json_object(base_image):
    proc = subprocess.Popen(
        [OBSSPEC, "env", "run", "--json", "--timeout", "120", "--", "sleep", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = subprocess.run(  # the sandbox runs: the command is under way
        ["sh", "-c", "for i in $(seq 600); do docker ps -q --filter label=obsspec.pid="
         f"{proc.pid} | grep -q . && exit 0; sleep 0.1; done; exit 1"],
        timeout=120,
    )  # fmt: skip
    assert started.returncode == 0
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    outcome = json.loads(stdout)
    assert outcome == {
        "status": "interrupted",
        "error": "stopped by SIGTERM",
        "hint": None,
        "exit_code": 143,
    }
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=obsspec.pid={proc.pid}"],
        capture_output=True,
        text=True,
    )
    assert left.stdout.split() == []  # cleanup ran: the container is gone


@pytest.mark.docker
def test_gates_decide_env_validates_exit_code_both_ways(tmp_path):
    """A task that does not load fails validation; gates on the shares decide the exit."""
    broken = tmp_path / "tasks" / "broken"
    broken.mkdir(parents=True)
    (broken / "task.toml").write_text("version = [\n")
    tasks = str(tmp_path / "tasks")
    failed = obsspec("env", "validate", tasks, "--fail-under", "solution_pass_rate=1")
    assert failed.returncode == 3, failed.stderr
    assert "gate FAILED: solution_pass_rate >= 1, measured 0" in failed.stderr
    assert "error: 1 gate(s) failed: solution_pass_rate" in failed.stderr
    passed = obsspec("env", "validate", tasks, "--fail-over", "solution_pass_rate=0.5", "--json")
    assert passed.returncode == 0, passed.stderr  # the gates pass: a failed task is allowed
    payload = json.loads(passed.stdout)
    assert payload["ok_rate"] == 0.0 and payload["gates"][0]["passed"] is True
    typo = obsspec("env", "validate", tasks, "--fail-under", "pass_rate=1")
    assert typo.returncode == 1 and "did you mean solution_pass_rate" in typo.stderr
