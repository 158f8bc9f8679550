"""The Sandbox contract: DockerSandbox, SandboxPool and the in-memory fakes all keep it, and
FakeSandbox behaves as documented (no Docker needed)."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest

from obsspec.environments.errors import SandboxError
from obsspec.environments.fake_sandbox import FakeSandbox, FakeSandboxPool
from obsspec.environments.pool import SandboxPool
from obsspec.environments.sandbox import DockerSandbox
from obsspec.environments.sandbox_protocol import Sandbox, SandboxProvider
from obsspec.types import ExecResult


def protocol_methods(protocol) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(protocol).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }


@pytest.mark.parametrize(
    ("implementation", "protocol"),
    [
        (DockerSandbox, Sandbox),
        (FakeSandbox, Sandbox),
        (SandboxPool, SandboxProvider),
        (FakeSandboxPool, SandboxProvider),
    ],
)
def test_implementations_keep_the_contract(implementation, protocol):
    """Every method of the protocol, with the same parameters, async where it is async
    (what runtime_checkable's isinstance does not look at)."""
    for name, wanted in protocol_methods(protocol).items():
        method = getattr(implementation, name)
        own = inspect.signature(method)
        assert list(own.parameters) == list(wanted.parameters), name
        for param in wanted.parameters.values():
            assert own.parameters[param.name].default == param.default, (name, param.name)
        is_async = inspect.iscoroutinefunction(method)
        assert is_async == inspect.iscoroutinefunction(getattr(protocol, name)), name


async def test_instances_are_sandboxes_and_providers():
    assert isinstance(DockerSandbox(client=None, image="img"), Sandbox)
    assert isinstance(FakeSandbox(), Sandbox)
    assert isinstance(SandboxPool(client=None, image="img"), SandboxProvider)
    assert isinstance(FakeSandboxPool(), SandboxProvider)
    assert not isinstance(object(), Sandbox)


async def test_answers_from_a_table_with_exit_codes():
    sandbox = FakeSandbox({"ls": "notes.txt", "make": ExecResult("", "boom", 2, 0.0)})
    ls, make, nope = [await sandbox.run(c, timeout_s=5) for c in ("ls", "make", "nope -x")]
    assert (ls.stdout, ls.exit_code, ls.timeout_s) == ("notes.txt", 0, 5)
    assert (make.stderr, make.exit_code) == ("boom", 2)
    assert (nope.stderr, nope.exit_code) == ("bash: nope: command not found", 127)
    assert sandbox.commands == ["ls", "make", "nope -x"]


async def test_answers_from_a_function_of_the_command_and_its_index():
    sandbox = FakeSandbox(lambda command, n: f"{command} #{n}")
    assert [(await sandbox.run(c)).stdout for c in ("a", "b", "a")] == ["a #0", "b #1", "a #2"]
    assert (await sandbox.run_fresh("a")).stdout == "a #0"  # a fresh shell counts on its own
    assert sandbox.fresh_commands == ["a"] and len(sandbox.commands) == 3


async def test_commands_take_their_time_and_time_out():
    sandbox = FakeSandbox(
        {"sleep": "", "ok": "fine"}, exec_s=lambda c, n: 5.0 if c == "sleep" else 0.05
    )
    loop = asyncio.get_running_loop()
    start = loop.time()
    ok = await sandbox.run("ok")
    assert loop.time() - start >= 0.05 and ok.duration_s == 0.05 and not ok.timed_out
    start = loop.time()
    late = await sandbox.run("sleep", timeout_s=0.1)
    assert loop.time() - start < 1.0  # cut off at the timeout, not after the 5 s
    assert late.timed_out and late.exit_code is None and late.timeout_s == 0.1


async def test_a_command_can_be_cancelled_while_it_runs():
    sandbox = FakeSandbox(exec_s=5.0)
    task = asyncio.create_task(sandbox.run("make"))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sandbox.commands == ["make"]  # it had started


async def test_fail_on_raises_a_sandbox_error_for_that_command_only():
    sandbox = FakeSandbox(exec_s=0.01, fail_on=1)
    await sandbox.run("ls")
    with pytest.raises(SandboxError):
        await sandbox.run("ls")
    await sandbox.run("ls")


async def test_uploads_files_and_close():
    reward = "/logs/verifier/reward.txt"
    async with FakeSandbox(files={reward: b"1"}) as sandbox:
        await sandbox.upload(Path("tests"), "/")
        assert await sandbox.read_file(reward) == b"1"
        assert await sandbox.read_file("/nope") is None
        async with sandbox.network_for_verifier():
            pass
        assert sandbox.uploads == [(Path("tests"), "/")] and sandbox.verifier_networks == 1
    assert sandbox.closed
    await sandbox.aclose()  # twice is fine
    with pytest.raises(SandboxError, match="closed"):
        await sandbox.run("ls")


async def test_the_fake_pool_hands_out_fresh_sandboxes_and_closes_them():
    pool = FakeSandboxPool(lambda: FakeSandbox({"ls": "x"}))
    first, second = await pool.acquire(), await pool.acquire()
    assert first is not second and pool.leased == [first, second]
    await pool.release(first)
    assert first.closed and pool.leased == [second]
