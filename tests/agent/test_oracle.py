"""The oracle policy replays a solution as a model's replies, token for token."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from obsspec.agent.context import ChatContextBuilder, TokenContext
from obsspec.agent.oracle import oracle_policy, unplayable
from obsspec.agent.protocol import SYSTEM_PROMPTS, ActionFormat, observation_role, parse_action
from obsspec.environments.tasks import load_task
from obsspec.errors import ConfigError
from obsspec.inference.base import Sampling
from obsspec.rollout.policy import oracle_problem, playable_tasks

GREETING = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"
COMMANDS = ["cd /srv", "name=$(cat user.txt)", 'echo "Hello, $name!" > /root/greeting.txt']


def grow(builder: ChatContextBuilder, context: TokenContext, reply_ids: list[int], obs: str):
    context.extend(reply_ids, generated=True, logprobs=[0.0] * len(reply_ids))
    context.extend(builder.turn_end_ids(reply_ids) + builder.observation_ids(obs), generated=False)


@pytest.mark.parametrize("fmt", list(ActionFormat))
async def test_one_command_per_turn_then_done(tokenizer, fmt):
    builder = ChatContextBuilder(tokenizer, observation_role(fmt))
    oracle = oracle_policy(builder, COMMANDS, fmt)
    context = TokenContext()
    context.extend(builder.prompt_ids(SYSTEM_PROMPTS[fmt], "Task:\nsay hello"), generated=False)
    replies = []
    for turn in range(len(COMMANDS) + 1):
        reply = await oracle.generate(context.ids, Sampling())
        replies.append(reply)
        grow(builder, context, reply.token_ids, f"output of turn {turn}\n[exit code: 0]")
    actions = [parse_action(r.text, fmt) for r in replies]
    assert [a.command for a in actions[:-1]] == COMMANDS
    assert actions[-1].kind == "done"
    for reply in replies:  # ended by the end-of-turn token, as a model's reply is
        assert reply.token_ids[-1] == tokenizer.eos_token_id and reply.finish_reason == "stop"
        assert tokenizer.decode(reply.token_ids[:-1]) == reply.text
        assert reply.logprobs == [0.0] * len(reply.token_ids)


async def test_the_reply_is_a_function_of_the_context(builder):
    """Asked again on an earlier context (a speculative branch), it answers that turn again."""
    oracle = oracle_policy(builder, COMMANDS, ActionFormat.markdown)
    prompt = builder.prompt_ids(SYSTEM_PROMPTS[ActionFormat.markdown], "Task:\nsay hello")
    context = TokenContext()
    context.extend(prompt, generated=False)
    first = await oracle.generate(context.ids, Sampling())
    grow(builder, context, first.token_ids, "(no output)\n[exit code: 0]")
    second = await oracle.generate(context.ids, Sampling())
    again = await oracle.generate(context.ids, Sampling())
    assert parse_action(first.text, ActionFormat.markdown).command == COMMANDS[0]
    assert second.text == again.text
    assert parse_action(second.text, ActionFormat.markdown).command == COMMANDS[1]
    assert (await oracle.generate(prompt, Sampling())).text == first.text


async def test_replies_are_never_cut_at_max_tokens(builder):
    """A long solution command comes back whole (a cut one would be another command)."""
    command = "cat > /app/solve.py <<'EOF'\n" + "print('x' * 80)\n" * 60 + "EOF"
    oracle = oracle_policy(builder, [command], ActionFormat.markdown)
    prompt = builder.prompt_ids(SYSTEM_PROMPTS[ActionFormat.markdown], "Task:\nwrite it")
    reply = await oracle.generate(prompt, Sampling(max_tokens=16))
    assert len(reply.token_ids) > 16 and reply.finish_reason == "stop"
    assert parse_action(reply.text, ActionFormat.markdown).command == command


def test_commands_a_format_cannot_carry_are_named():
    fenced = "cat > README.md <<'EOF'\n```bash\nmake\n```\nEOF"
    problem = unplayable(["ls", fenced], ActionFormat.markdown)
    assert problem is not None and problem.startswith('command 2 ("cat > README.md')
    assert unplayable(["ls", fenced], ActionFormat.hermes) is None


def write_task(root: Path, solution: str) -> Path:
    shutil.copytree(GREETING, root)
    (root / "solution" / "solve.sh").write_text(solution)
    return root


def test_tasks_the_oracle_cannot_play_are_refused_up_front(tmp_path):
    good = load_task(write_task(tmp_path / "good", "echo hi > /root/x\n"))
    broken = load_task(write_task(tmp_path / "broken", "if true; then\n  echo\n"))
    fenced = load_task(write_task(tmp_path / "fenced", "cat > a.md <<'EOF'\n```\nEOF\n"))
    shutil.rmtree(write_task(tmp_path / "unsolved", "") / "solution")
    unsolved = load_task(tmp_path / "unsolved")
    tasks = [good, broken, unsolved, fenced]
    playable, refused = playable_tasks(tasks, ActionFormat.markdown, strict=False)
    assert playable == [good] and len(refused) == 3
    assert "line 1 never ends" in refused[str(broken.path)]
    assert "no reference solution" in refused[str(unsolved.path)]
    assert "does not survive the markdown action format" in refused[str(fenced.path)]
    assert str(fenced.path / "solution" / "solve.sh") in refused[str(fenced.path)]
    with pytest.raises(ConfigError, match="the oracle cannot play task fenced"):
        playable_tasks([fenced], ActionFormat.markdown, strict=True)
    assert oracle_problem(fenced, ActionFormat.hermes) is None  # JSON carries any text


HEREDOC_AND_LOOP = """#!/bin/bash
# Write a helper, then run it in a loop
cat > /root/greet.sh <<'EOF'
# reads the user's name (this line is kept)
name=$(cat /srv/user.txt)
printf 'Hello, %s!\\n' "$name"
EOF

for step in write; do
  bash /root/greet.sh > /root/greeting.txt
done
"""
STRICT = """#!/bin/bash
set -euo pipefail
cd /root || exit 1
echo "Hello, $(cat /srv/user.txt)!" > greeting.txt
"""


@pytest.mark.docker
async def test_oracle_collects_reward_one_on_real_style_solutions(
    tmp_path, settings, base_image, docker_client
):
    from obsspec.rollout.collect import collect
    from obsspec.rollout.config import CollectConfig
    from tests.rollout.test_collect import load_rows

    tasks = tmp_path / "tasks"
    write_task(tasks / "heredoc-loop", HEREDOC_AND_LOOP)
    write_task(tasks / "strict", STRICT)
    config = CollectConfig.model_validate(
        {
            "tasks": str(tasks),
            "out": tmp_path / "run",
            "policy": "oracle",
            "concurrency": 2,
            "limits": {"max_tokens": 24},  # far shorter than the commands: never cut
        }
    )
    summary = await collect(config, settings.paths.models_dir)
    assert summary["episodes"] == 2 and summary["failures"] == {}
    assert summary["mean_reward"] == 1.0
    rows = {row["task_id"]: row for row in load_rows(config.out)}
    commands = [t["command"] for t in rows["heredoc-loop"]["turns"] if t["action"] == "command"]
    assert len(commands) == 2 and "# reads the user's name (this line is kept)" in commands[0]
    assert commands[1].startswith("for step in write; do")
    (whole,) = [t for t in rows["strict"]["turns"] if t["action"] == "command"]
    assert whole["command"].endswith("OBSSPEC_SOLUTION\nbash /tmp/solve.sh")
    assert len(whole["action_ids"]) > 24 and whole["exit_code"] == 0
    assert all(len(t["action_ids"]) > 24 for t in rows["heredoc-loop"]["turns"][:2])
