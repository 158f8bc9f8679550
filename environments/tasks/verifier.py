"""Verifiers: run after the agent phase only, in the agent's sandbox, on a fresh shell.

Harbor: tests/ is copied to /tests, `bash /tests/test.sh` runs under the verifier timeout,
and the reward is read from /logs/verifier/reward.json (key "reward") or else
/logs/verifier/reward.txt (one number). /logs/verifier is emptied first, so that nothing the
agent wrote there counts. No reward file is a VerifierError, never a zero.
TB v1: tests/ is copied to /tests and run-tests.sh runs (TEST_DIR=/tests); the reward is 1 if
and only if pytest ran tests and none failed.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from environments.errors import VerifierError
from environments.sandbox import DockerSandbox
from environments.shell import PersistentShell
from environments.tasks.model import Task
from obsspec.types import ExecResult

REWARD_DIR = "/logs/verifier"
TBV1_RUNNER_DIR = "/obsspec-verifier"


@dataclass(frozen=True)
class VerifierResult:
    reward: float
    seconds: float
    output: str  # the verifier's stdout and stderr, for debugging tasks


async def verify(task: Task, sandbox: DockerSandbox) -> VerifierResult:
    await sandbox.upload(task.tests_dir, "/")  # -> /tests
    if task.format == "harbor":
        result = await run_fresh(
            sandbox,
            f"rm -rf {REWARD_DIR} && mkdir -p {REWARD_DIR} && bash /tests/test.sh",
            task.verifier_timeout_s,
        )
        reward = await read_reward(sandbox, task)
    else:
        await sandbox.upload(task.verifier_script, TBV1_RUNNER_DIR)
        script = f"{TBV1_RUNNER_DIR}/{task.verifier_script.name}"
        result = await run_fresh(
            sandbox, f"TEST_DIR=/tests bash {shlex.quote(script)}", task.verifier_timeout_s
        )
        reward = pytest_reward(result)
    if result.timed_out:
        raise VerifierError(
            f"task {task.id}: the verifier timed out after {task.verifier_timeout_s:g} s"
        )
    return VerifierResult(reward, result.duration_s, result.stdout + result.stderr)


async def run_fresh(sandbox: DockerSandbox, command: str, timeout_s: float) -> ExecResult:
    """Run in a new shell of the sandbox: none of the agent's shell state applies."""
    shell = PersistentShell(sandbox.client, sandbox.id, sandbox.shell_settings)
    await shell.start()
    try:
        return await shell.run(command, timeout_s)
    finally:
        await shell.close()


async def read_reward(sandbox: DockerSandbox, task: Task) -> float:
    raw = await sandbox.read_file(f"{REWARD_DIR}/reward.json")
    if raw is not None:
        try:
            return float(json.loads(raw)["reward"])
        except (ValueError, KeyError, TypeError) as e:
            raise VerifierError(
                f"task {task.id}: {REWARD_DIR}/reward.json has no numeric 'reward': {raw[:100]!r}"
            ) from e
    raw = await sandbox.read_file(f"{REWARD_DIR}/reward.txt")
    if raw is None:
        raise VerifierError(
            f"task {task.id}: the verifier wrote no reward file "
            f"({REWARD_DIR}/reward.json or reward.txt)"
        )
    try:
        return float(raw.decode().strip())
    except ValueError as e:
        raise VerifierError(
            f"task {task.id}: {REWARD_DIR}/reward.txt is not a number: {raw[:100]!r}"
        ) from e


SUMMARY = re.compile(r"=+ (.*\b(?:passed|failed|error|errors|no tests ran)\b.*) in [\d.]+s")


def pytest_reward(result: ExecResult) -> float:
    """1.0 if pytest's final summary reports passes and no failures or errors, else 0.0."""
    summaries = SUMMARY.findall(result.stdout + "\n" + result.stderr)
    if not summaries:
        return 0.0
    last = summaries[-1]
    passed = re.search(r"(\d+) passed", last)
    broken = re.search(r"\d+ (failed|error|errors)\b", last)
    return 1.0 if passed and not broken and result.exit_code == 0 else 0.0
