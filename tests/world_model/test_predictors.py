"""Predictors: the cache, the rules (checked against a real shell), the cascade, the oracle."""

from __future__ import annotations

import pytest

from obsspec.environments.sandbox import DockerSandbox
from obsspec.speculation.predictor import Prediction, SpeculationContext, offered_by
from obsspec.types import render_observation
from obsspec.world_model.cache import CachePredictor
from obsspec.world_model.cascade import CascadePredictor
from obsspec.world_model.oracle import OraclePredictor
from obsspec.world_model.rules import RulePredictor
from obsspec.world_model.turns import turn_records
from tests.rollout.test_dataset import row

CTX = SpeculationContext("h", (1, 2, 3))


def test_contexts_differ_by_task_and_by_every_token():
    assert CTX.key == SpeculationContext("h", (1, 2, 3)).key
    assert CTX.key != SpeculationContext("g", (1, 2, 3)).key
    assert CTX.key != SpeculationContext("h", (1, 2, 4)).key
    assert CTX.key != SpeculationContext("h", (12, 3)).key


async def test_cache_answers_an_exact_repeat_and_forgets_the_oldest():
    cache = CachePredictor(max_entries=2)
    assert await cache.predict(CTX, "ls") == []
    cache.observe(CTX, "ls", "a\n[exit code: 0]")
    [hit] = await cache.predict(CTX, "ls")
    assert hit.text == "a\n[exit code: 0]" and hit.source == "cache"
    assert await cache.predict(CTX, "ls -a") == []  # another command
    assert await cache.predict(SpeculationContext("h", (1, 2)), "ls") == []  # another context
    cache.observe(CTX, "pwd", "/\n[exit code: 0]")
    await cache.predict(CTX, "ls")  # touch: ls is now the most recent
    cache.observe(CTX, "id", "root\n[exit code: 0]")
    assert len(cache) == 2
    assert await cache.predict(CTX, "pwd") == [] and await cache.predict(CTX, "ls")


RULED = [
    "cd /tmp",
    "export GREETING=hello",
    "A=1 B=two",
    "echo hello   world",
    "echo 'single quoted' \"double quoted\"",
    "echo",
    "mkdir -p /tmp/a/b",
    "touch /tmp/file",
    "rm -f /tmp/nothing-here",
    "rm -rf /tmp/a",
    "true",
    ":",
    "unset GREETING",
]
NOT_RULED = [
    "ls",
    "cd -",
    "cd",
    "echo $HOME",
    "echo -n hi",
    "echo *",
    "mkdir -v /tmp/v",
    "cp -av /etc/hostname /tmp/",
    "export",
    "cd /tmp && ls",
    "touch a; ls",
    "echo hi > /tmp/out | cat",
    "echo 'unterminated",
    "cat /etc/hostname",
]


@pytest.mark.parametrize("command", NOT_RULED)
async def test_rules_decline_what_they_cannot_know(command):
    assert await RulePredictor().predict(CTX, command) == []


@pytest.mark.docker
async def test_rule_predictions_equal_what_a_real_shell_prints(docker_client, base_image, run_id):
    rules = RulePredictor()
    async with DockerSandbox(docker_client, base_image, run_id=run_id) as sandbox:
        for command in RULED:
            [prediction] = await rules.predict(CTX, command)
            real = render_observation(await sandbox.run(command, timeout_s=10))
            assert prediction.text == real, command
            assert prediction.source.startswith("rules/") and 0 < prediction.confidence <= 1


class Fixed:
    def __init__(self, *predictions: Prediction) -> None:
        self.predictions = list(predictions)
        self.asked = 0
        self.observed: list[str] = []

    async def predict(self, context, command, n=1):
        self.asked += 1
        return self.predictions

    def observe(self, context, command, observation):
        self.observed.append(observation)


async def test_cascade_takes_the_first_confident_answer():
    unsure = Fixed(Prediction("maybe", "lm", 0.3))
    sure = Fixed(Prediction("yes", "rules/cd", 0.9))
    never = Fixed(Prediction("late", "lm", 0.99))
    cascade = CascadePredictor([Fixed(), unsure, sure, never], threshold=0.5)
    [answer] = await cascade.predict(CTX, "cd /x")
    assert answer.text == "yes" and never.asked == 0
    [fallback] = await CascadePredictor([unsure], threshold=0.5).predict(CTX, "cd /x")
    assert fallback.text == "maybe"  # nothing confident: the best guess, marked unsure
    assert await CascadePredictor([Fixed()]).predict(CTX, "x") == []
    cascade.observe(CTX, "cd /x", "real")
    assert never.observed == ["real"] and sure.observed == ["real"]


class Silent(Fixed):
    source = "lm"  # offers nothing, yet a cascade must know it was asked


async def test_cascade_says_what_the_world_model_offered_even_when_not_chosen():
    lm = Fixed(Prediction("lm guess", "lm", 0.2), Prediction("lm other", "lm", 0.1))
    rules = Fixed(Prediction("rule guess", "rules/cd", 0.4))
    answer = await CascadePredictor([Fixed(), rules, lm], threshold=0.5).predict(CTX, "cd /x")
    assert [p.text for p in answer] == ["rule guess"]  # the best unsure answer was chosen
    assert [p.text for p in offered_by(answer, "lm")] == ["lm guess", "lm other"]
    assert offered_by(answer, "rules/cd") == list(rules.predictions)
    asked = await CascadePredictor([Silent()]).predict(CTX, "x")
    assert asked == [] and offered_by(asked, "lm") == []  # asked, nothing to offer
    cache = Fixed(Prediction("cached", "cache", 0.95))
    stopped = await CascadePredictor([cache, Silent()]).predict(CTX, "x")
    assert offered_by(stopped, "lm") is None  # the cache answered: the LM was never asked
    # a plain list (not a cascade's answer) only shows who answered
    assert offered_by([Prediction("t", "lm", 0.9)], "lm") == [Prediction("t", "lm", 0.9)]
    assert offered_by([Prediction("t", "cache", 0.9)], "lm") is None


async def test_oracle_replays_recorded_observations_at_their_contexts():
    rows = [row("t1", 0)]
    [record] = list(turn_records(rows[0]))
    assert record.context.ids == (1, 2, 5, 6, 2)  # prompt + the turn's action ids
    assert record.command == "ls" and record.observation == "a\n[exit code: 0]"
    oracle = OraclePredictor.from_rows(rows, delay_s=0.01)
    [prediction] = await oracle.predict(record.context, "ls")
    assert prediction.text == record.observation and prediction.source == "oracle"
    assert await oracle.predict(record.context, "pwd") == []
