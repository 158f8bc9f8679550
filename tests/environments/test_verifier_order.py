"""The verifier's sequence and judgement on the in-memory FakeSandbox (no Docker): the agent
phase ends before anything of the verifier's is touched, the network comes after the upload,
the rewards are read after the verifier exits and no further than the cap, and a verifier
that never ran its tests is an error, not a 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from obsspec.environments.errors import SandboxError, VerifierError
from obsspec.environments.fake_sandbox import FakeSandbox
from obsspec.environments.sandbox import NetworkPolicy, SandboxLimits
from obsspec.environments.tasks import load_task
from obsspec.environments.tasks.rewards import REWARD_FILE_MAX_BYTES, parse_reward_json
from obsspec.environments.tasks.verifier import (
    REWARD_DIR,
    TBV1_RUNNER_DIR,
    TESTS_DIR,
    never_ran_cause,
    verify,
)
from obsspec.environments.verifier_kit.serve import KIT_ROOT
from obsspec.types import ExecResult

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tasks"
HARBOR = load_task(FIXTURES / "harbor-greeting")
TBV1 = load_task(FIXTURES / "tbv1-wordcount")
REWARD_TXT = f"{REWARD_DIR}/reward.txt"


def harbor_sandbox(output: str, reward: bytes = b"0", **kwargs) -> FakeSandbox:
    """A sandbox whose verifier prints `output` and writes `reward` to reward.txt."""
    return FakeSandbox(
        lambda command, index: ExecResult(output, "", 0, 0.0),
        files={REWARD_TXT: reward},
        **kwargs,
    )


@pytest.mark.parametrize("task", [HARBOR, TBV1], ids=["harbor", "tbv1"])
async def test_the_agent_phase_ends_before_the_upload_and_the_network_after_it(task):
    summary = "============ 2 passed in 0.10s ============"
    sandbox = harbor_sandbox(summary, b"1")
    await sandbox.run("nohup writer &")  # the agent's last command
    await verify(task, sandbox)
    uploads = ["upload /"] + (["upload " + TBV1_RUNNER_DIR] if task is TBV1 else [])
    reads = [] if task is TBV1 else [f"read {REWARD_DIR}/reward.json", f"read {REWARD_TXT}"]
    assert sandbox.events == [
        "run",
        "end_agent_phase",
        *uploads,
        "network",
        "fresh",  # the verifier, the only command with the network
        "network end",
        *reads,  # after it exited
    ]
    assert sandbox.removed == [TESTS_DIR, REWARD_DIR, TBV1_RUNNER_DIR, KIT_ROOT]
    with pytest.raises(SandboxError, match="agent phase is over"):
        await sandbox.run("ls")  # the agent's shell is gone


async def test_a_reward_file_over_the_cap_is_an_error_read_only_in_part():
    sandbox = harbor_sandbox("", b"1" * (REWARD_FILE_MAX_BYTES * 10))
    with pytest.raises(VerifierError, match=rf"reward\.txt is larger than {REWARD_FILE_MAX_BYTES}"):
        await verify(HARBOR, sandbox)


@pytest.mark.parametrize("raw", [b'{"reward": ' + b"9" * 400 + b"}", b"[" * 100_000])
def test_a_reward_no_float_holds_is_a_verifier_error(raw):
    with pytest.raises(VerifierError, match=r"reward\.json"):
        parse_reward_json(raw, "reward.json")


HARBOR_OFFLINE = (
    "E: Unable to locate package curl\n"
    "/tests/test.sh: line 4: curl: command not found\n"
    "/tests/test.sh: line 5: /root/.local/bin/env: No such file or directory\n"
    "/tests/test.sh: line 6: uvx: command not found\n"
)


@pytest.mark.parametrize(
    ("network", "advice"),
    [(NetworkPolicy.none, "try --network verify"), (NetworkPolicy.verify, "--network verify")],
)
async def test_a_harbor_verifier_without_its_tools_is_an_error_naming_the_first(network, advice):
    sandbox = harbor_sandbox(HARBOR_OFFLINE, limits=SandboxLimits(network=network))
    with pytest.raises(VerifierError, match="Unable to locate package curl") as info:
        await verify(HARBOR, sandbox)
    assert advice in str(info.value) and info.value.output == HARBOR_OFFLINE


@pytest.mark.parametrize(
    ("output", "reward"),
    [
        (HARBOR_OFFLINE, b"1"),  # it wrote 1 despite the noise: believed
        ("curl: (6) Could not resolve host: x\n===== 1 failed, 3 passed in 0.2s =====\n", b"0"),
        ("collected 0 items / 1 error\n===== 1 error in 0.1s =====\n", b"0"),  # import error
        ("bash: line 2: grader: command not found\n", b"0"),  # not a test runner's tool
    ],
    ids=["reward-1", "tests-ran", "collection-error", "other-command"],
)
async def test_honest_rewards_stay_rewards(output, reward):
    outcome = await verify(HARBOR, harbor_sandbox(output, reward))
    assert outcome.reward == float(reward)


@pytest.mark.parametrize(
    "line",
    [
        "sh: 1: uv: not found",
        "pip._vendor...: Temporary failure in name resolution",
        "/usr/bin/python3: No module named pytest",
        "============ no tests ran in 0.01s ============",
        "collected 0 items",
        "ERROR: file or directory not found: /tests/test_outputs.py",
        "E: Unable to locate package jq",
        "error: No interpreter found for Python 3.13 in managed installations or search path",
        "╰─▶ Because rdflib was not found in the provided package locations and you require",
        "/usr/bin/python3: No module named pip",
    ],
)
def test_each_sign_of_a_runner_that_never_started_is_named(line):
    assert never_ran_cause(f"something\n{line}\nmore\n") == line


async def test_tbv1_without_a_pytest_summary_names_the_cause():
    sandbox = harbor_sandbox("bash: line 3: curl: command not found\n")
    with pytest.raises(VerifierError, match=r"no pytest summary.*curl: command not found"):
        await verify(TBV1, sandbox)
