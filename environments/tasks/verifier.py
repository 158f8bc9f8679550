"""Verifiers: run after the agent phase only, in the agent's sandbox, on a fresh shell.

Harbor: tests/ is copied to /tests, `bash /tests/test.sh` runs under the verifier timeout with
the task's `[verifier] env`, and the rewards are read from /logs/verifier/reward.json (one or
more numeric keys) or else /logs/verifier/reward.txt (one number); environments.tasks.rewards
says how they become the one scalar reward. /logs/verifier is emptied first, so that nothing
the agent wrote there counts. No reward file is a VerifierError, never a zero.
TB v1: tests/ is copied to /tests and run-tests.sh runs (TEST_DIR=/tests); the reward is 1 if
and only if pytest ran tests and none failed ({"reward": 0 or 1}).

The verifier's stdout and stderr (interleaved, as a terminal shows them) are kept, cut to
their last OUTPUT_CHARS characters: on the result, and on a VerifierError as `output`, so that
a verifier that could not run (a missing tool, no network) is told apart from a wrong answer.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from obsspec.environments.errors import VerifierError
from obsspec.environments.sandbox_protocol import Sandbox
from obsspec.environments.tasks.model import Task
from obsspec.environments.tasks.rewards import parse_reward_json, parse_reward_txt, scalar_reward
from obsspec.environments.tasks.text import env_prefix
from obsspec.types import ExecResult

REWARD_DIR = "/logs/verifier"
TBV1_RUNNER_DIR = "/obsspec-verifier"
OUTPUT_CHARS = 4000


@dataclass(frozen=True)
class VerifierResult:
    reward: float  # the scalar reward (environments.tasks.rewards)
    rewards: dict[str, float]  # every key the verifier wrote (reward.txt: {"reward": x})
    seconds: float
    output: str  # the tail of the verifier's stdout and stderr (output_tail)


async def verify(task: Task, sandbox: Sandbox) -> VerifierResult:
    await sandbox.upload(task.tests_dir, "/")  # -> /tests
    if task.format == "harbor":
        command = (
            f"rm -rf {REWARD_DIR} && mkdir -p {REWARD_DIR} && "
            f"{env_prefix(task.verifier_env)}bash /tests/test.sh 2>&1"
        )
    else:
        await sandbox.upload(task.verifier_script, TBV1_RUNNER_DIR)
        script = f"{TBV1_RUNNER_DIR}/{task.verifier_script.name}"
        command = f"TEST_DIR=/tests bash {shlex.quote(script)} 2>&1"
    result = await sandbox.run_fresh(command, task.verifier_timeout_s)
    output = output_tail(result.stdout + result.stderr)
    try:
        if result.timed_out:
            raise VerifierError(
                f"task {task.id}: the verifier timed out after {task.verifier_timeout_s:g} s"
            )
        if task.format == "harbor":
            rewards = await read_rewards(sandbox, task)
        else:
            rewards = {"reward": pytest_reward(result, task.id)}
        reward = scalar_reward(
            rewards,
            key=task.reward_key,
            aggregate=task.reward_aggregate,
            where=f"task {task.id}: the verifier's rewards",
        )
    except VerifierError as e:
        e.output = output  # what the verifier printed says why it gave no reward
        raise
    return VerifierResult(reward, rewards, result.duration_s, output)


def output_tail(text: str, limit: int = OUTPUT_CHARS) -> str:
    """The last `limit` characters of text, after a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"[... {len(text) - limit} earlier characters cut ...]\n" + text[-limit:]


async def read_rewards(sandbox: Sandbox, task: Task) -> dict[str, float]:
    raw = await sandbox.read_file(f"{REWARD_DIR}/reward.json")
    if raw is not None:
        return parse_reward_json(raw, f"task {task.id}: {REWARD_DIR}/reward.json")
    raw = await sandbox.read_file(f"{REWARD_DIR}/reward.txt")
    if raw is None:
        raise VerifierError(
            f"task {task.id}: the verifier wrote no reward file "
            f"({REWARD_DIR}/reward.json or reward.txt)"
        )
    return parse_reward_txt(raw, f"task {task.id}: {REWARD_DIR}/reward.txt")


SUMMARY = re.compile(r"=+ (.*\b(?:passed|failed|error|errors|no tests ran)\b.*) in [\d.]+s")


def pytest_reward(result: ExecResult, task_id: str = "?") -> float:
    """1.0 if pytest's final summary reports passes and no failures or errors, else 0.0.
    No summary at all means pytest never ran (run-tests.sh could not install or find it,
    e.g. without a network): a VerifierError, never a zero."""
    summaries = SUMMARY.findall(result.stdout + "\n" + result.stderr)
    if not summaries:
        raise VerifierError(
            f"task {task_id}: the verifier (run-tests.sh) printed no pytest summary, so pytest "
            "never ran "
            f"(exit code {result.exit_code}; a missing tool or no network? see --network)"
        )
    last = summaries[-1]
    passed = re.search(r"(\d+) passed", last)
    broken = re.search(r"\d+ (failed|error|errors)\b", last)
    return 1.0 if passed and not broken and result.exit_code == 0 else 0.0
