"""examples/ci/: the GitHub Actions workflow and the GitLab CI job run the same commands, and
those commands, run here as a job runs them (all but `make setup`, which this session has
done), pass their gates on the tiny model, write the job summary, and fail with exit 3 on a
gate that cannot hold. README.md shows the workflow file as it is."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[2]
GITHUB = ROOT / "examples" / "ci" / "github-actions.yml"
GITLAB = ROOT / "examples" / "ci" / "gitlab-ci.yml"
# What a user sets (GitHub: repository variables; GitLab: CI/CD variables), and GitHub's own.
SETTINGS = {
    "POLICY",
    "WORLD_MODEL",
    "MIN_LATENCY_REDUCTION",
    "BASELINE_PROFILE",
    "N_TASKS",
    "MAX_TURNS",
    "MAX_TOKENS",
}
OUT = "obsspec-ci/"  # what both upload


def github_job() -> dict:
    return yaml.safe_load(GITHUB.read_text())["jobs"]["profile"]


def github_steps() -> tuple[str, dict[str, str]]:
    """(the setup step's script, the later steps' scripts by name, in order)."""
    runs = [step for step in github_job()["steps"] if "run" in step]
    return runs[0]["run"], {step["name"]: step["run"].strip() for step in runs[1:]}


def gitlab_job() -> dict:
    return yaml.safe_load(GITLAB.read_text())["obsspec-profile"]


def test_both_files_run_the_same_commands_and_keep_the_same_files():
    setup, steps = github_steps()
    gitlab = gitlab_job()
    assert list(steps.values()) == [command.strip() for command in gitlab["script"]]
    # Setup: `make setup`, then the venv's commands on PATH (GitHub: for the later steps).
    assert setup.splitlines() == ["make setup", 'echo "$PWD/.venv/bin" >> "$GITHUB_PATH"']
    assert gitlab["before_script"][-2:] == ["make setup", 'export PATH="$PWD/.venv/bin:$PATH"']
    # Every setting the commands read can be set on GitHub, and nothing else is mapped.
    commands = "\n".join(steps.values())
    read = set(re.findall(r"\$\{?(\w+)", commands)) - {"GITHUB_STEP_SUMMARY"}
    assert read == SETTINGS == set(github_job()["env"])
    assert all(value == f"${{{{ vars.{key} }}}}" for key, value in github_job()["env"].items())
    # The profile, its tasks and the summary are kept, whether the gates passed or not.
    assert f"--out {OUT}profile" in commands and f"--out {OUT}tasks" in commands
    assert f'"${{GITHUB_STEP_SUMMARY:-{OUT}summary.md}}"' in commands
    upload = next(s for s in github_job()["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["with"]["path"] == OUT and upload["if"] == "always()"
    assert gitlab["artifacts"]["paths"] == [OUT] and gitlab["artifacts"]["when"] == "always"


def test_readme_shows_the_workflow_file_as_it_is():
    readme = (ROOT / "README.md").read_text()
    assert f"```yaml\n{GITHUB.read_text()}```\n" in readme


def job_env(tmp_path: Path, policy: Path, **settings: str) -> dict[str, str]:
    """The environment of a job with these settings: the others unset, whatever this shell
    has; the venv on PATH as the setup step puts it there."""
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS | {"GITHUB_STEP_SUMMARY"}}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    cheap = {"POLICY": str(policy), "N_TASKS": "1", "MAX_TURNS": "2", "MAX_TOKENS": "16"}
    return {**env, **cheap, "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), **settings}


def bash(script: str) -> list[str]:
    """A step as GitHub runs it (bash -eo pipefail), and strict about unset variables."""
    return ["bash", "-euo", "pipefail", "-c", script]


def run(script: str, cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    done = subprocess.run(bash(script), cwd=cwd, env=env, capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


@contextlib.contextmanager
def in_background(script: str, cwd: Path, env: dict[str, str], log: Path):
    """The step running while the block does (its output in `log`, so that it never waits on
    a full pipe); killed if the block fails before it ends."""
    with log.open("w") as out:
        process = subprocess.Popen(
            bash(script), cwd=cwd, env=env, stdout=out, stderr=out, start_new_session=True
        )
        try:
            yield process
        finally:
            if process.poll() is None:  # the engine's process too: the whole group
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.mark.docker
@pytest.mark.vllm
@pytest.mark.slow
def test_the_job_passes_its_gates_and_fails_on_one_that_cannot_hold(
    tmp_path, base_image, tiny_model_dir
):
    _, steps = github_steps()
    tasks_step, validate, profile, compare = steps.values()
    job_dir, failing_dir = tmp_path / "job", tmp_path / "failing"
    job_dir.mkdir()
    # The tiny random model writes no command, so both arms do the same work and the latency
    # reduction is noise around 0 of sub-second episodes, which a busy machine (here: the
    # failing run beside it) can make large: a bound of -10 keeps it from failing the job by
    # chance. No profile reaches 0.99.
    job = job_env(job_dir, tiny_model_dir, MIN_LATENCY_REDUCTION="-10")
    failing = job_env(failing_dir, tiny_model_dir, MIN_LATENCY_REDUCTION="0.99")

    code, _, stderr = run(tasks_step, job_dir, job)
    assert code == 0, stderr
    # The validation first, alone: once, beside the failing run's engine start and the rest
    # of the suite, a workflow-ci reference solution earned 0 (not yet explained; see the
    # closing note of the session that saw it).
    code, _, stderr = run(validate, job_dir, job)
    assert code == 0, stderr
    assert "gate passed: solution_pass_rate >= 1, measured 1" in stderr
    # The failing run profiles the same tasks in a directory of its own, beside the job's
    # profile.
    shutil.copytree(job_dir / OUT / "tasks", failing_dir / OUT / "tasks")
    log = tmp_path / "failing.log"
    with in_background(profile, failing_dir, failing, log) as failing_run:
        code, stdout, stderr = run(profile, job_dir, job)
        assert code == 0, stderr
        assert stdout == ""  # the Markdown went to the job summary
        assert "gate passed: latency_reduction >= -10, measured" in stderr
        assert "gate passed: lossless_violations <= 0, measured 0" in stderr
        failing_code = failing_run.wait(timeout=600)
    failing_stderr = log.read_text()
    assert failing_code == 3, failing_stderr
    assert "gate FAILED: latency_reduction >= 0.99, measured" in failing_stderr
    assert "error: 1 gate(s) failed: latency_reduction" in failing_stderr
    assert "| latency_reduction | >= 0.99 |" in (failing_dir / "summary.md").read_text()

    code, stdout, _ = run(compare, job_dir, job)  # no baseline: skipped
    assert (code, stdout) == (0, "BASELINE_PROFILE is not set: no comparison\n")
    summary = (job_dir / "summary.md").read_text()
    assert "| lossless_violations | <= 0 | 0 | passed |" in summary
    assert "| latency reduction |" in summary and "**CI gates**" in summary
    report = json.loads((job_dir / OUT / "profile" / "report.json").read_text())
    assert report["episodes"] == 1 and report["lossless_violations"] == 0
    print(f"latency_reduction of the tiny run: {report['latency_reduction']}")

    # A baseline: the run compared with its own report changes nothing, and says so.
    baseline = {**job, "BASELINE_PROFILE": str(job_dir / OUT / "profile" / "report.json")}
    code, stdout, stderr = run(compare, job_dir, baseline)
    assert code == 0 and stdout == "", stderr
    assert "**profile compare, 1 episode(s) at once**" in (job_dir / "summary.md").read_text()
