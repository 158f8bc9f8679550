"""The repeat predictor: the same command's output earlier on the same episode's path."""

from __future__ import annotations

from obsspec.speculation.predictor import Prediction, SpeculationContext
from obsspec.world_model.cascade import default_cascade
from obsspec.world_model.repeat import RepeatPredictor
from obsspec.world_model.rules import RulePredictor
from obsspec.world_model.state_cache import StateCachePredictor

CRASH = "Segmentation fault\n[exit code: 139]"
PROMPT = (1, 2, 3)


def ctx(*ids: int, task: str = "h", commands=()) -> SpeculationContext:
    """A context: the shared prompt, then this path's tokens."""
    return SpeculationContext(task, (*PROMPT, *ids), commands)


class Recording:
    """A world model stand-in that counts its questions and is always sure."""

    source = "lm"

    def __init__(self) -> None:
        self.asked = 0

    async def predict(self, context, command, n=1):
        self.asked += 1
        return [Prediction("lm\n[exit code: 0]", "lm", 0.9)]

    def observe(self, context, command, observation) -> None:
        pass


async def test_a_repeat_later_on_the_same_path_gets_the_earlier_output():
    repeat = RepeatPredictor()
    assert await repeat.predict(ctx(10), "./line") == []
    repeat.observe(ctx(10), "./line", CRASH)
    [guess] = await repeat.predict(ctx(10, 11, 12, 13), "./line")
    assert (guess.text, guess.source) == (CRASH, "repeat")
    assert guess.confidence == RepeatPredictor.PRIOR


async def test_a_sibling_another_command_or_another_task_gets_nothing():
    repeat = RepeatPredictor()
    repeat.observe(ctx(10), "./line", CRASH)
    assert await repeat.predict(ctx(20, 21), "./line") == []  # a GRPO sibling: only the prompt
    assert await repeat.predict(ctx(10, 11), "./line -v") == []  # another command
    assert await repeat.predict(ctx(10, 11, task="g"), "./line") == []  # another task
    assert await repeat.predict(ctx(10), "./line") == []  # the same context: not earlier
    assert await repeat.predict(ctx(11), "./line") == []  # the same length, other tokens


async def test_the_latest_earlier_run_wins():
    repeat = RepeatPredictor()
    repeat.observe(ctx(10), "make", "error 1\n[exit code: 2]")
    repeat.observe(ctx(10, 11, 12), "cat f", "x\n[exit code: 0]")
    repeat.observe(ctx(10, 11, 12, 13, 14), "make", "ok\n[exit code: 0]")
    [guess] = await repeat.predict(ctx(10, 11, 12, 13, 14, 15, 16), "make")
    assert guess.text == "ok\n[exit code: 0]"
    # a path that left before the second run still sees the first
    [older] = await repeat.predict(ctx(10, 11, 12, 99, 98), "make")
    assert older.text == "error 1\n[exit code: 2]"


async def test_misses_in_a_family_bring_it_under_the_cascade_threshold():
    repeat = RepeatPredictor()
    repeat.observe(ctx(10), "cat log", "a\n[exit code: 0]")
    repeat.observe(ctx(10, 11, 12), "cat log", "a b\n[exit code: 0]")  # it would have missed
    [guess] = await repeat.predict(ctx(10, 11, 12, 13, 14), "cat log")
    assert guess.confidence < 0.5  # below default_cascade's threshold
    repeat.observe(ctx(30), "cat other", "z\n[exit code: 0]")
    [same_family] = await repeat.predict(ctx(30, 31), "cat other")
    assert same_family.confidence == guess.confidence  # learned per family, not per command
    repeat.observe(ctx(40), "./line", CRASH)
    repeat.observe(ctx(40, 41, 42), "./line", CRASH)  # it would have matched
    [proven] = await repeat.predict(ctx(40, 41, 42, 43, 44), "./line")
    assert proven.confidence > RepeatPredictor.PRIOR


async def test_memory_is_bounded_by_tasks_and_by_runs_per_task():
    repeat = RepeatPredictor(max_tasks=2, max_runs_per_task=3)
    for n in range(5):
        repeat.observe(ctx(10 + n), f"cmd{n}", "x\n[exit code: 0]")
    assert len(repeat) == 3
    assert await repeat.predict(ctx(10, 99), "cmd0") == []  # the oldest run went first
    assert await repeat.predict(ctx(14, 99), "cmd4")
    repeat.observe(ctx(10, task="g"), "ls", "a\n[exit code: 0]")
    repeat.observe(ctx(10, task="f"), "ls", "a\n[exit code: 0]")  # a third task: h goes
    assert await repeat.predict(ctx(14, 99), "cmd4") == []
    assert await repeat.predict(ctx(10, 99, task="f"), "ls")


async def test_nine_runs_in_a_row_are_each_guessed_from_the_one_before():
    repeat = RepeatPredictor()
    outputs = [f"line {n}: crash\n[exit code: 1]" for n in range(9)]
    for turn, output in enumerate(outputs):  # each context continues the one before
        context = ctx(*range(10, 12 + 2 * turn))
        if turn:
            assert (await repeat.predict(context, "./line"))[0].text == outputs[turn - 1]
        repeat.observe(context, "./line", output)


async def test_the_default_cascade_asks_repeats_after_the_rules_and_before_the_world_model():
    cascade = default_cascade(Recording())
    kinds = [type(p) for p in cascade.predictors]
    assert kinds == [StateCachePredictor, RulePredictor, RepeatPredictor, Recording]
    assert [type(p) for p in default_cascade().predictors][-1] is RepeatPredictor
    # run `cat f`, then `touch f`: the state cache's key changed, the repeat answers
    first = ctx(10, commands=())
    cascade.observe(first, "cat f", "x\n[exit code: 0]")
    later = ctx(10, 11, 12, commands=("cat f", "touch f"))
    [guess] = await cascade.predict(later, "cat f")
    assert guess.source == "repeat" and cascade.predictors[-1].asked == 0
    assert (await cascade.predict(later, "touch g"))[0].source.startswith("rules")


async def test_the_world_model_is_asked_once_repeats_miss_in_the_family():
    world_model = Recording()
    cascade = default_cascade(world_model)
    unknown = None  # a state the state cache does not answer (after a timeout)
    cascade.observe(ctx(10, commands=unknown), "date", "Mon\n[exit code: 0]")
    cascade.observe(ctx(10, 11, 12, commands=unknown), "date", "Tue\n[exit code: 0]")
    [guess] = await cascade.predict(ctx(10, 11, 12, 13, 14, commands=unknown), "date")
    assert guess.source == "lm" and world_model.asked == 1
