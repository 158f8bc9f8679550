"""The sequential episode on a real sandbox, with a scripted engine (logic) and vLLM (path)."""

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from obsspec.agent.context import ChatContextBuilder
from obsspec.agent.episode import EpisodeLimits, run_episode
from obsspec.agent.protocol import CORRECTIVE_OBSERVATIONS, ActionFormat
from obsspec.environments.pool import SandboxPool
from obsspec.environments.tasks import load_task
from obsspec.environments.tasks.images import TaskImages
from obsspec.errors import EngineError
from obsspec.inference.scripted import ScriptedEngine

pytestmark = pytest.mark.docker
TASK_DIR = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"


@pytest.fixture
async def task_and_pool(docker_client, base_image, run_id):
    task = load_task(TASK_DIR)
    image = await TaskImages(docker_client).ensure(task)
    async with SandboxPool(docker_client, image, task.limits, size=1, run_id=run_id) as pool:
        yield task, pool


def script(*replies: str):
    """Replies in order, one per turn (the turn is the number of replies so far)."""

    def reply(context_text: str) -> str:
        turn = context_text.count("<|im_start|>assistant") - 1
        return replies[min(turn, len(replies) - 1)]

    return reply


SOLVE = [
    "Let me check the name.\n```bash\ncat /srv/user.txt\n```",
    "No command here, just thinking.",
    "```bash\necho wrong > /root/greeting.txt\n```\nActually:\n"
    '```bash\necho "Hello, $(cat /srv/user.txt)!" > /root/greeting.txt\n```',
    "```bash\ndone\n```",
]


async def test_solved_episode_and_the_context_invariant(task_and_pool, tokenizer, builder):
    task, pool = task_and_pool
    engine = ScriptedEngine(tokenizer, script(*SOLVE))
    traj = await run_episode(task, pool, engine, builder, EpisodeLimits(), seed=3)
    assert (traj.finish_reason, traj.declared_done, traj.reward) == ("done", True, 1.0)
    assert [t.action for t in traj.turns] == ["command", "invalid", "command", "done"]
    assert traj.turns[0].observation == "Ada\n[exit code: 0]"
    assert traj.turns[1].observation == CORRECTIVE_OBSERVATIONS[ActionFormat.markdown]
    assert traj.turns[2].command.startswith('echo "Hello')  # the last block wins

    # The context is exactly prompt + (action ids + observation ids) per turn, in order.
    expected = list(traj.prompt_ids)
    for turn in traj.turns:
        expected += turn.action_ids + turn.observation_ids
    assert traj.context_ids == expected
    generated = [i for t in traj.turns for i in t.action_ids]
    assert [i for i, m in zip(traj.context_ids, traj.mask, strict=True) if m] == generated
    assert sum(traj.mask) == len(generated)
    # Every generation saw exactly the context so far.
    assert engine.prompts[2] == expected[: len(engine.prompts[2])]
    # Decoding the context reproduces the transcript as the chat template renders it.
    messages = [
        {
            "role": "system",
            "content": tokenizer.decode(traj.prompt_ids)
            .split("<|im_start|>system\n")[1]
            .split("<|im_end|>")[0],
        },
        {"role": "user", "content": "Task:\n" + task.instruction.strip()},
    ]
    for turn in traj.turns:
        messages.append({"role": "assistant", "content": turn.reply})
        if turn.action != "done":
            messages.append({"role": "user", "content": turn.observation})
    rendered = tokenizer.apply_chat_template(messages, tokenize=False)
    assert tokenizer.decode(traj.context_ids) + "\n" == rendered


async def test_limits_end_the_episode_with_a_reason(task_and_pool, tokenizer, builder):
    task, pool = task_and_pool
    engine = ScriptedEngine(tokenizer, script("```bash\nls\n```"))
    traj = await run_episode(task, pool, engine, builder, EpisodeLimits(max_turns=3))
    assert (traj.finish_reason, len(traj.turns), traj.reward) == ("max_turns", 3, 0.0)

    short = ScriptedEngine(tokenizer, script("```bash\nseq 1 400\n```"), max_model_len=600)
    traj = await run_episode(task, pool, short, builder, EpisodeLimits())
    assert traj.finish_reason == "context_length" and "limit is 600" in traj.error
    assert traj.error_kind is None and traj.reward == 0.0  # the policy's outcome: data

    slow = ScriptedEngine(tokenizer, script("```bash\nsleep 30\n```"))
    traj = await run_episode(task, pool, slow, builder, EpisodeLimits(deadline_s=3))
    assert traj.finish_reason == "deadline" and traj.agent_s < 10


async def test_cut_off_reply_gets_a_corrective_and_the_turn_end(task_and_pool, tokenizer, builder):
    task, pool = task_and_pool
    engine = ScriptedEngine(tokenizer, script("```bash\nls -la /srv && echo and more text"))
    traj = await run_episode(task, pool, engine, builder, EpisodeLimits(max_turns=1, max_tokens=5))
    turn = traj.turns[0]
    assert turn.generation_finish == "length" and turn.action == "invalid"
    assert turn.observation_ids[0] == builder.end_of_turn_id


async def test_engine_failure_is_infrastructure_and_frees_the_sandbox(
    task_and_pool, tokenizer, builder
):
    task, pool = task_and_pool

    def dies(context_text: str) -> str:
        if context_text.count("<|im_start|>assistant") > 1:
            raise EngineError("engine process died")
        return "```bash\npwd\n```"

    traj = await run_episode(task, pool, ScriptedEngine(tokenizer, dies), builder, EpisodeLimits())
    assert (traj.finish_reason, traj.error_kind, traj.reward) == ("infra_error", "infra", None)
    assert len(traj.turns) == 1 and not pool._leased


@pytest.mark.vllm
async def test_real_engine_runs_the_same_path(task_and_pool, tiny_engine, tiny_model_dir):
    task, pool = task_and_pool
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    builder = ChatContextBuilder(tokenizer)
    limits = EpisodeLimits(max_turns=3, max_tokens=24)
    traj = await run_episode(task, pool, tiny_engine, builder, limits, seed=1)
    assert traj.finish_reason in ("max_turns", "done") and traj.reward is not None
    expected = list(traj.prompt_ids)
    for turn in traj.turns:
        expected += turn.action_ids + turn.observation_ids
        assert len(turn.action_logprobs) == len(turn.action_ids)
    assert traj.context_ids == expected


@pytest.mark.vllm
async def test_episode_through_an_openai_compatible_server(
    task_and_pool, vllm_server, tiny_model_dir
):
    from obsspec.inference.openai_http import OpenAIEngine

    task, pool = task_and_pool
    builder = ChatContextBuilder(AutoTokenizer.from_pretrained(tiny_model_dir))
    async with OpenAIEngine(vllm_server, "tiny") as engine:
        traj = await run_episode(
            task, pool, engine, builder, EpisodeLimits(max_turns=2, max_tokens=16), seed=2
        )
    assert len(traj.turns) >= 1 and traj.reward is not None
    expected = list(traj.prompt_ids)
    for turn in traj.turns:
        expected += turn.action_ids + turn.observation_ids
    assert traj.context_ids == expected


@pytest.mark.vllm
@pytest.mark.slow
async def test_default_model_episode_end_to_end(task_and_pool, default_model_dir, builder):
    """The one test that starts the real default model (a start costs half a minute on CPUs):
    it answers a plain question sensibly, then runs an episode."""
    from obsspec.agent.transcript import format_transcript
    from obsspec.inference.base import Sampling
    from obsspec.inference.vllm_local import EngineSettings, LocalVLLMEngine
    from tests.helpers import chat_ids

    task, pool = task_and_pool
    settings = EngineSettings(model=default_model_dir, max_model_len=4096, kv_cache_gb=0.5)
    async with LocalVLLMEngine(settings) as engine:
        gen = await engine.generate(
            chat_ids(default_model_dir, "What is 2+2?"), Sampling(max_tokens=40)
        )
        assert "4" in gen.text
        assert gen.finish_reason == "stop"
        traj = await run_episode(
            task, pool, engine, builder, EpisodeLimits(max_turns=2, max_tokens=96), seed=0
        )
    assert traj.error_kind is None and traj.reward is not None
    transcript = format_transcript(traj, task.instruction)
    assert "--- turn 1:" in transcript and "finished:" in transcript
