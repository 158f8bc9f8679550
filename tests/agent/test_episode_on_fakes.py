"""The sequential episode, verifier included, on the in-memory FakeSandbox (no Docker): the
same path as on a real sandbox, down to the verifier's uploads and the reward file."""

from __future__ import annotations

from pathlib import Path

from obsspec.agent.episode import EpisodeLimits, run_episode
from obsspec.environments.errors import SandboxError
from obsspec.environments.fake_sandbox import FakeSandbox, FakeSandboxPool
from obsspec.environments.tasks import load_task
from obsspec.inference.scripted import ScriptedEngine

TASK_DIR = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"
REWARD = "/logs/verifier/reward.json"


def script(*replies: str):
    def reply(context_text: str) -> str:
        turn = context_text.count("<|im_start|>assistant") - 1
        return replies[min(turn, len(replies) - 1)]

    return reply


async def test_an_episode_runs_its_commands_and_reads_the_reward(tokenizer, builder):
    task = load_task(TASK_DIR)
    pool = FakeSandboxPool(
        lambda: FakeSandbox({"cat /srv/user.txt": "Ada"}, files={REWARD: b'{"reward": 1.0}'})
    )
    engine = ScriptedEngine(
        tokenizer, script("```bash\ncat /srv/user.txt\n```", "```bash\ndone\n```")
    )
    traj = await run_episode(task, pool, engine, builder, EpisodeLimits(), seed=1)
    [sandbox] = pool.sandboxes
    assert sandbox.commands == ["cat /srv/user.txt"]
    assert traj.turns[0].observation == "Ada\n[exit code: 0]"
    assert traj.finish_reason == "done" and traj.reward == 1.0
    assert sandbox.uploads == [(task.tests_dir, "/")] and sandbox.verifier_networks == 1
    assert sandbox.fresh_commands[0].endswith("bash /tests/test.sh 2>&1")
    assert sandbox.closed and not pool.leased


async def test_a_sandbox_failure_is_infrastructure_and_skips_the_verifier(tokenizer, builder):
    task = load_task(TASK_DIR)
    pool = FakeSandboxPool(lambda: FakeSandbox(fail_on=0))
    engine = ScriptedEngine(tokenizer, script("```bash\nls\n```"))
    traj = await run_episode(task, pool, engine, builder, EpisodeLimits(), seed=1)
    [sandbox] = pool.sandboxes
    assert traj.finish_reason == "infra_error" and traj.error_kind == "infra"
    assert traj.error_type == SandboxError.__name__
    assert sandbox.fresh_commands == [] and sandbox.closed
