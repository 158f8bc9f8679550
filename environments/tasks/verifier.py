"""Verifiers: run after the agent phase only, in the agent's sandbox, on a fresh shell.

`verify` is the whole verifier phase, in one order, the same for every caller (an episode,
`env validate`, `env shell --verify`), so that nothing the agent did can set the reward:

    1. end the agent phase: every process it started is killed, its shell included (a
       `nohup` loop rewriting reward.txt, a job waiting for the verifier's network), and
       /tests, /logs/verifier and the TB v1 runner directory are deleted (a planted
       conftest.py is not merged into the uploaded tests; no reward file is left over);
    2. upload the tests (and TB v1's run-tests.sh);
    3. under `--network verify`, only now attach the network, for the verifier alone;
    4. where the task carries a verifier kit (environments.verifier_kit), upload it (uv, the
       shims, the wheels) to a fresh /obsspec-kit and export its environment;
    5. run the verifier in a fresh shell, with /logs/verifier created empty;
    6. after it exits, read the rewards: at most REWARD_FILE_MAX_BYTES of a reward file.

Harbor: `bash /tests/test.sh` runs under the verifier timeout with the task's `[verifier]
env`, and the rewards are read from /logs/verifier/reward.json (one or more numeric keys) or
else /logs/verifier/reward.txt (one number); environments.tasks.rewards says how they become
the one scalar reward. No reward file is a VerifierError, never a zero.
TB v1: run-tests.sh runs (TEST_DIR=/tests); the reward is 1 if and only if pytest ran tests
and none failed ({"reward": 0 or 1}).

A verifier that never started its test runner is a VerifierError too, not a 0: when the
reward is 0, its output shows no test run (no pytest count of passed or failed tests) and it
shows why (`curl: command not found` and the like for curl, wget, uv, uvx, pip, pytest,
python; `Could not resolve host`; `Temporary failure in name resolution`; `No module named
pytest`; pytest's `no tests ran`, `collected 0 items`, `ERROR: file or directory not found`).
The error names that line and --network. A verifier that ran its tests and saw them fail,
or wrote reward 1 despite such a line, is believed.

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
from obsspec.environments.tasks.rewards import (
    REWARD_FILE_MAX_BYTES,
    parse_reward_json,
    parse_reward_txt,
    scalar_reward,
)
from obsspec.environments.tasks.text import env_prefix
from obsspec.environments.verifier_kit.serve import KIT_ROOT, serve_kit, served_lines
from obsspec.types import ExecResult

REWARD_DIR = "/logs/verifier"
TESTS_DIR = "/tests"  # where tests/ lands (uploaded to /)
TBV1_RUNNER_DIR = "/obsspec-verifier"
OUTPUT_CHARS = 4000


@dataclass(frozen=True)
class VerifierResult:
    reward: float  # the scalar reward (environments.tasks.rewards)
    rewards: dict[str, float]  # every key the verifier wrote (reward.txt: {"reward": x})
    seconds: float
    output: str  # the tail of the verifier's stdout and stderr (output_tail), + kit_note
    kit: dict | None = None  # what the verifier kit held and served (KitPlan.summary, served)


async def verify(task: Task, sandbox: Sandbox) -> VerifierResult:
    """The verifier phase, steps 1 to 6 of the module docstring; the agent phase is over."""
    await sandbox.end_agent_phase([TESTS_DIR, REWARD_DIR, TBV1_RUNNER_DIR, KIT_ROOT])
    await sandbox.upload(task.tests_dir, "/")  # -> /tests
    kit = task.verifier_kit
    if task.format == "harbor":
        command = (
            f"mkdir -p {REWARD_DIR} && {env_prefix(task.verifier_env)}bash /tests/test.sh 2>&1"
        )
    else:
        await sandbox.upload(task.verifier_script, TBV1_RUNNER_DIR)
        script = f"{TBV1_RUNNER_DIR}/{task.verifier_script.name}"
        command = f"TEST_DIR={TESTS_DIR} bash {shlex.quote(script)} 2>&1"
    if kit is not None:
        command = await serve_kit(sandbox, kit) + command
    async with sandbox.network_for_verifier():  # the run's --network verify
        result = await sandbox.run_fresh(command, task.verifier_timeout_s)
    kit_record = {**kit.summary(), "served": await served_lines(sandbox)} if kit else None
    output = output_tail(result.stdout + result.stderr) + kit_note(kit_record)
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
        if reward == 0:
            check_tests_ran(result.stdout + result.stderr, task, sandbox)
    except VerifierError as e:
        e.output = output  # what the verifier printed says why it gave no reward
        e.kit = kit_record
        raise
    return VerifierResult(reward, rewards, result.duration_s, output, kit_record)


def kit_note(record: dict | None) -> str:
    """The line the verifier's output ends with when the kit served it: what it held and
    what its shims served (uv's installer, apt-get, each uv command)."""
    if record is None:
        return ""
    held = f"uv {record['uv']}, " if record["uv"] else ""
    served = "; ".join(record["served"]) or "nothing"
    return f"\n[obsspec verifier kit: {held}{len(record['wheels'])} wheels; served: {served}]"


def output_tail(text: str, limit: int = OUTPUT_CHARS) -> str:
    """The last `limit` characters of text, after a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"[... {len(text) - limit} earlier characters cut ...]\n" + text[-limit:]


async def read_rewards(sandbox: Sandbox, task: Task) -> dict[str, float]:
    raw = await read_reward_file(sandbox, task, "reward.json")
    if raw is not None:
        return parse_reward_json(raw, f"task {task.id}: {REWARD_DIR}/reward.json")
    raw = await read_reward_file(sandbox, task, "reward.txt")
    if raw is None:
        raise VerifierError(
            f"task {task.id}: the verifier wrote no reward file "
            f"({REWARD_DIR}/reward.json or reward.txt)"
        )
    return parse_reward_txt(raw, f"task {task.id}: {REWARD_DIR}/reward.txt")


async def read_reward_file(sandbox: Sandbox, task: Task, name: str) -> bytes | None:
    """A reward file's bytes, read no further than the cap: a bigger one is no reward."""
    path = f"{REWARD_DIR}/{name}"
    raw = await sandbox.read_file(path, max_bytes=REWARD_FILE_MAX_BYTES)
    if raw is not None and len(raw) > REWARD_FILE_MAX_BYTES:
        raise VerifierError(
            f"task {task.id}: {path} is larger than {REWARD_FILE_MAX_BYTES} bytes: not a "
            "reward file (a reward is a few numbers); only its start was read"
        )
    return raw


# Why a verifier's test runner never started, as its output says it (see the docstring).
# "collected 0 items / 1 error" is not one: a test file that fails to import the agent's code
# is an honest 0.
NEVER_RAN = re.compile(
    r"^.*?(?:(?<![\w./-])(?:curl|wget|uvx?|pip3?|pytest|python3?): (?:command )?not found"
    r"|Could not resolve host|Temporary failure in name resolution|No module named pytest"
    r"|\bno tests ran\b|\bcollected 0 items\b(?! /)|ERROR: file or directory not found"
    # uv offline (the verifier kit): a package or a Python it does not hold; apt offline
    r"|No interpreter found for Python|not found in the provided package locations"
    r"|was not found in the cache|No solution found when resolving"
    r"|Unable to locate package|No module named pip\b).*$",
    re.MULTILINE,
)
TESTS_RAN = re.compile(r"=+ .*\b[1-9]\d* (?:passed|failed)\b.* in [\d.]+s")


def never_ran_cause(output: str) -> str | None:
    """The first line saying the verifier's test runner never started, unless pytest's
    summary shows that tests ran after all; None when nothing says so."""
    if TESTS_RAN.search(output):
        return None
    match = NEVER_RAN.search(output)
    if match is None:
        return None
    cause = match.group(0).strip()
    if "No solution found" in cause:  # uv says which package on the next line
        following = output[match.end() :].strip().splitlines()[:1]
        cause += " " + " ".join(line.strip(" ╰─▶") for line in following)
    return cause[:300]


def check_tests_ran(output: str, task: Task, sandbox: Sandbox) -> None:
    """A reward of 0 from a verifier that never ran its tests is a VerifierError, not a 0."""
    cause = never_ran_cause(output)
    if cause is None:
        return
    network = sandbox.limits.network
    if task.verifier_kit is not None:
        where = (
            "the verifier kit served it and lacks that (`obsspec env kit TASKS` says what it "
            f"holds); --network verify lets the verifier fetch it (--network {network} now)"
        )
    elif network == "none":
        where = "it ran without a network (--network none): try --network verify"
    else:
        where = f"it had a network (--network {network}); is the host reachable from here?"
    raise VerifierError(
        f"task {task.id}: the verifier never ran its tests ({cause!r}), so its reward 0 "
        f"says nothing of the agent; {where}"
    )


SUMMARY = re.compile(r"=+ (.*\b(?:passed|failed|error|errors|no tests ran)\b.*) in [\d.]+s")


def pytest_reward(result: ExecResult, task_id: str = "?") -> float:
    """1.0 if pytest's final summary reports passes and no failures or errors, else 0.0.
    No summary at all means pytest never ran (run-tests.sh could not install or find it,
    e.g. without a network): a VerifierError, never a zero."""
    summaries = SUMMARY.findall(result.stdout + "\n" + result.stderr)
    if not summaries:
        cause = never_ran_cause(result.stdout + "\n" + result.stderr)
        raise VerifierError(
            f"task {task_id}: the verifier (run-tests.sh) printed no pytest summary, so pytest "
            "never ran "
            f"(exit code {result.exit_code}{f'; {cause!r}' if cause else ''}; "
            "a missing tool or no network? see --network)"
        )
    last = summaries[-1]
    passed = re.search(r"(\d+) passed", last)
    broken = re.search(r"\d+ (failed|error|errors)\b", last)
    return 1.0 if passed and not broken and result.exit_code == 0 else 0.0
