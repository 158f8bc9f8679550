"""RolloutSession: the one place where episodes' engines, images and sandboxes are opened.

Engine settings need nothing; the rest runs real Docker sandboxes with the oracle policy or
a ScriptedEngine handed in (no vLLM)."""

from __future__ import annotations

import pytest

from obsspec.inference.base import Sampling
from obsspec.rollout.config import RolloutSettings
from obsspec.rollout.engines import engine_settings
from obsspec.rollout.events import TaskSkipped
from obsspec.rollout.session import NoRunnableTask, RolloutSession
from obsspec.speculation.regimes import BUSY_TAIL_S
from tests.rollout.test_collect import greeting_tasks
from tests.speculation.fakes import fake_policy


def test_policy_and_world_model_engines_share_the_context_and_keep_their_own_memory(tmp_path):
    settings = RolloutSettings.model_validate(
        {
            "concurrency": 40,
            "engine": {"max_model_len": 2048, "kv_cache_gb": 2.0, "cpu_cores": "0"},
            "speculation": {
                "enabled": True,
                "breadth": 2,
                "world_model": "wm",
                "wm_kv_cache_gb": 0.25,
                "wm_cpu_cores": "1",
            },
        }
    )
    policy = engine_settings(tmp_path, settings, role="policy", seed=3)
    wm = engine_settings(tmp_path, settings, role="world_model", seed=3)
    assert (policy.kv_cache_gb, policy.cpu_cores) == (2.0, "0")
    assert (wm.kv_cache_gb, wm.cpu_cores) == (0.25, "1")
    assert policy.max_model_len == wm.max_model_len == 2048 and policy.seed == wm.seed == 3
    # every episode in flight may ask `breadth` replies at once: slots to spare
    assert policy.max_num_seqs == wm.max_num_seqs == 2 * 40 * 2
    sequential = RolloutSettings(concurrency=2)
    assert engine_settings(tmp_path, sequential, role="policy").max_num_seqs == 64


@pytest.mark.docker
async def test_the_oracle_plays_and_a_task_whose_image_fails_is_skipped(
    tmp_path, settings, base_image
):
    tasks = greeting_tasks(tmp_path / "tasks", ["greet-a", "broken-b"])
    dockerfile = tasks / "broken-b" / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN exit 3\n")
    from obsspec.rollout.plan import load_task_set

    loaded, _ = load_task_set(str(tasks), strict=False)
    events = []
    rollout = RolloutSettings(policy="oracle", concurrency=2)
    async with RolloutSession(
        rollout, settings.paths.models_dir, loaded, name="test-session", emit=events.append
    ) as session:
        assert session.can_play("greet-a") and not session.can_play("broken-b")
        assert (
            list(session.skipped) == ["broken-b"]
            and "image build failed" in (session.skipped["broken-b"])
        )
        assert [e.task_id for e in events if isinstance(e, TaskSkipped)] == ["broken-b"]
        task = session.tasks["greet-a"]
        session.expect([task.id, task.id])
        played = [await session.play(task, seed) for seed in (0, 1)]
        for _ in played:
            await session.finished(task.id)
    for trajectory, attempts in played:
        assert trajectory.reward == 1.0 and attempts == 1 and trajectory.model == "oracle"
    broken = [t for t in loaded if t.id == "broken-b"]
    with pytest.raises(NoRunnableTask, match=r"no task can run: .*broken-b"):
        async with RolloutSession(rollout, settings.paths.models_dir, broken, name="test-none"):
            pass


@pytest.mark.docker
async def test_the_session_numbers_weight_versions_and_engines_stamp_them(
    tmp_path, settings, base_image, tokenizer, default_model_dir
):
    """Engines handed in are used (and left open); the session owns the version numbers."""
    policy_engine = fake_policy(tokenizer, salt=2, commands=["cat /srv/user.txt", "pwd"])
    wm_engine = fake_policy(tokenizer, salt=3)
    tasks = greeting_tasks(tmp_path / "tasks", ["greet-a"])
    from obsspec.rollout.plan import load_task_set

    loaded, _ = load_task_set(str(tasks), strict=False)
    rollout = RolloutSettings.model_validate(
        {
            "policy": str(default_model_dir),
            "limits": {"max_turns": 3, "max_tokens": 48},
            "speculation": {"enabled": True, "world_model": "wm", "gate": {"mode": "always"}},
        }
    )
    async with RolloutSession(
        rollout,
        settings.paths.models_dir,
        loaded,
        name="test-versions",
        engine=policy_engine,
        wm_engine=wm_engine,
    ) as session:
        assert session.loop is not None  # speculation on: the cascade has the world model
        lm = session.loop.predictor.predictors[-1]
        assert lm.engine is wm_engine
        # an engine not known to be obsspec's local vLLM: its worker is taken to spin vLLM's 1 s
        assert session.loop.gate.regimes.tail_s == BUSY_TAIL_S == 1.0
        # its answers hold a full observation: the policy's context, shorter than 10,000 chars
        assert lm.max_tokens == rollout.wm_answer_tokens == rollout.engine.max_model_len
        await session.load_policy(tmp_path / "step-7", 7)
        await session.load_world_model(tmp_path / "wm-1")
        await session.load_world_model(tmp_path / "wm-2")
        session.expect(["greet-a"])
        played = await session.play(session.tasks["greet-a"], 0)
        await session.finished("greet-a")
    assert session.weight_version == policy_engine.weight_version == 7
    assert session.wm_version == wm_engine.weight_version == 2
    assert played is not None
    trajectory, _ = played
    assert trajectory.turns and {t.weight_version for t in trajectory.turns} == {7}
    gen = await policy_engine.generate([1, 2, 3], Sampling(max_tokens=2))  # still open
    assert gen.weight_version == 7
