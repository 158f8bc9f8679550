"""The gate learns, per load, what speculation returns: late answers and slowdowns turn the
world model off there (not elsewhere), exploration asks again now and then. A fake clock or
injected latencies drive it; nothing is timed."""

from __future__ import annotations

import contextlib

import pytest

from obsspec.agent.episode import EpisodeLimits, play
from obsspec.speculation.gate import Ask, Gate, GateReason, GateSettings
from obsspec.speculation.regimes import Regimes, SlowdownMeter, regime_of
from obsspec.speculation.runner import SpeculativeLoop
from obsspec.speculation.settings import SpeculationSettings
from obsspec.world_model.cascade import CascadePredictor
from tests.speculation.fakes import TablePredictor, fake_policy, new_episode, step_sandbox


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def taught(clock=None, **settings) -> Gate:
    """Replies take 1 s, `make` 3 s, predictions 0.2 s: a hit would save 1 s."""
    gate = Gate(GateSettings(**settings), clock=clock or FakeClock())
    for _ in range(5):
        gate.observe_generation(1.0)
        gate.observe_prediction(0.2)
    gate.observe_execution("task", "make", 3.0)
    return gate


def ask(load: int = 0) -> Ask:
    return Ask("task", "make", load)


@contextlib.contextmanager
def episodes(gate: Gate, n: int):
    """n episodes in flight on the gate's loop (its regime)."""
    with contextlib.ExitStack() as stack:
        for _ in range(n):
            stack.enter_context(gate.regimes.episode())
        yield


@pytest.mark.parametrize(
    ("n", "name"),
    [(0, "1"), (1, "1"), (2, "2"), (3, "3-4"), (4, "3-4"), (5, "5-8"), (8, "5-8"), (9, "9-16"),
     (16, "9-16"), (17, "17-32"), (32, "17-32"), (33, "33+"), (500, "33+")],
)  # fmt: skip
def test_regimes_are_powers_of_two_of_episodes_at_once(n, name):
    assert regime_of(n) == name


def test_late_answers_at_one_load_turn_the_world_model_off_there_only():
    gate = taught(explore_every=0)
    with episodes(gate, 8):
        assert gate.decide(ask()).reason == GateReason.asked  # the prior: answers come in time
        regime, _ = gate.regimes.now()
        for _ in range(10):  # each cancelled when its 3 s command ended, after 3.5 s
            gate.observe_answer(regime, on_time=False, latency_s=3.5)
        decision = gate.decide(ask())
        assert not decision.ask_world_model and decision.reason == GateReason.late
        assert decision.regime == "5-8"
    with episodes(gate, 1):
        assert gate.decide(ask()).ask_world_model  # another load: nothing learned against it
    assert gate.decisions[GateReason.late] == 1 and gate.decisions[GateReason.asked] == 2


def test_a_world_model_slower_than_the_command_is_late_not_too_fast():
    gate = taught(explore_every=0)
    with episodes(gate, 16):
        regime, _ = gate.regimes.now()
        for _ in range(5):  # cancelled when the 3 s command ended: at least 3 s
            gate.observe_answer(regime, on_time=False, latency_s=3.0)
        assert gate.decide(ask()).reason == GateReason.late
    gate.observe_execution("task", "true", 0.001)
    assert gate.decide(Ask("task", "true", 0)).reason == GateReason.too_fast


def test_exploration_asks_again_and_a_recovered_regime_is_used_again():
    gate = taught(explore_every=4, regime_window=10)
    with episodes(gate, 8):
        regime, _ = gate.regimes.now()
        for _ in range(10):
            gate.observe_answer(regime, on_time=False, latency_s=3.5)
        reasons = [gate.decide(ask()).reason for _ in range(8)]
        assert reasons == [GateReason.late] * 3 + [GateReason.explore] + [GateReason.late] * 3 + [
            GateReason.explore
        ]
        for _ in range(10):  # the explored questions came back in time (the load fell)
            gate.observe_answer(regime, on_time=True, latency_s=0.2)
        assert gate.decide(ask()).reason == GateReason.asked


def test_late_answers_to_short_commands_do_not_count_against_long_ones():
    gate = taught(explore_every=0)
    gate.observe_execution("task", "cat config", 0.5)
    gate.observe_execution("task", "make build", 5.0)
    with episodes(gate, 8):
        regime, _ = gate.regimes.now()
        for _ in range(10):  # 2 s answers: later than `cat` (cancelled at 0.5 s), in time else
            gate.observe_answer(regime, on_time=False, latency_s=0.5, answered=None)
            gate.observe_answer(regime, on_time=True, latency_s=2.0, answered=True)
        assert gate.decide(Ask("task", "cat config", 0)).reason == GateReason.late
        assert gate.decide(Ask("task", "make build", 0)).reason == GateReason.asked


def test_questions_that_end_without_a_guess_make_it_unlikely_to_pay():
    gate = taught(explore_every=0)
    with episodes(gate, 2):
        regime, _ = gate.regimes.now()
        for _ in range(10):  # fast, but empty or cut off every time
            gate.observe_answer(regime, on_time=False, latency_s=0.2, answered=False)
        assert gate.decide(ask()).reason == GateReason.unlikely
        assert gate.summary()["regimes"]["2"]["answered_rate"] == 0.0


def test_always_and_never_still_learn_per_regime():
    gate = taught(mode="always")
    with episodes(gate, 3):
        decision = gate.decide(ask())
        assert decision.reason == GateReason.always and decision.regime == "3-4"
        gate.observe_answer(decision.regime, on_time=True, latency_s=0.4, answered=True)
    assert gate.summary()["regimes"]["3-4"]["wm_latency_s"] == 0.4
    assert gate.summary()["decisions"] == {"always": 1}


def slowed(gate: Gate, factor: float, samples: int = 4) -> None:
    """Replies decode `factor` times slower while the world model is busy than while idle."""
    for _ in range(samples):
        gate.observe_generation(1.0, decode_s=1.0, tokens=11, busy_fraction=0.0, load=8)
        gate.observe_generation(1.0, decode_s=factor, tokens=11, busy_fraction=1.0, load=8)


def test_a_measured_policy_slowdown_turns_it_off_when_others_would_pay_for_it():
    gate = taught(explore_every=0)
    with episodes(gate, 8):
        slowed(gate, 2.0)  # the world model on the policy's core: each reply twice as slow
        assert gate.summary()["regimes"]["5-8"]["policy"]["slowdown"] == pytest.approx(1.0)
        decision = gate.decide(ask(load=8))  # 8 other requests would each lose 0.2 s
        assert decision.reason == GateReason.slowdown
        assert gate.decide(ask(load=0)).ask_world_model  # nobody else to slow down
    with episodes(gate, 1):  # measured at another load only: the prior here
        assert gate.decide(ask(load=8)).reason == GateReason.slowdown
        assert gate.decide(ask(load=1)).ask_world_model  # one other request: 0.1 s of cost


def test_an_unmeasured_load_assumes_a_slowdown_until_exploring_measures_none():
    """8 episodes at once asking a world model whose cost nobody knows: with no evidence
    either way, the prior (0.1 a reply, and a command) says 8 other requests lose more than a
    hit saves."""
    gate = taught(explore_every=0)
    with episodes(gate, 8):
        assert gate.decide(ask(load=8)).reason == GateReason.slowdown
        assert not gate.summary()["regimes"]["5-8"]["policy"]["measured"]
        slowed(gate, 1.0)  # measured: replies as fast with it as without
        commands_run(gate, [(3.0, 3.0)] * 3)  # and commands
        assert gate.summary()["regimes"]["5-8"]["policy"]["measured"]
        assert gate.decide(ask(load=8)).ask_world_model
    assert taught(prior_slowdown=0.0).decide(ask(load=8)).ask_world_model  # none assumed


def test_no_slowdown_is_claimed_without_busy_and_idle_samples_both():
    meter = SlowdownMeter()
    for _ in range(5):
        meter.add(3.0, busy_fraction=1.0)
    assert meter.slowdown(min_samples=3) == 0.0
    for _ in range(3):
        meter.add(1.0, busy_fraction=0.3)  # neither busy nor idle enough: not counted
    assert meter.slowdown(min_samples=3) == 0.0
    for _ in range(3):
        meter.add(1.0, busy_fraction=0.0)
    assert meter.slowdown(min_samples=3) == pytest.approx(2.0)


def test_a_world_model_always_busy_is_held_back_to_measure_what_it_costs():
    """Asked about everything, the world model's engine is never idle, so the policy's speed
    without it is never seen: the gate holds it back for a while, then judges."""
    clock = FakeClock()
    gate = taught(clock, explore_every=0, prior_slowdown=0.0)  # asked until measured
    with episodes(gate, 8):
        for _ in range(6):  # busy replies only
            gate.observe_generation(1.0, decode_s=2.0, tokens=11, busy_fraction=1.0, load=8)
        assert gate.decide(ask(load=8)).reason == GateReason.baseline
        clock.now += 1.0
        assert gate.decide(ask(load=8)).reason == GateReason.baseline  # still held back
        for _ in range(3):  # the replies run meanwhile: twice as fast without it
            gate.observe_generation(1.0, decode_s=1.0, tokens=11, busy_fraction=0.0, load=8)
        clock.now += 10.0
        assert gate.decide(ask(load=8)).reason == GateReason.slowdown  # measured: it costs


def test_slowdown_is_compared_at_the_same_engine_load():
    """Replies decode slower with more requests on the engine; the world model is busiest
    when most episodes run. Busy replies at load 8 against idle ones at load 1 say nothing."""
    meter = SlowdownMeter()
    for _ in range(4):
        meter.add(2.0, busy_fraction=1.0, load=8)  # busy, at a high load
        meter.add(1.0, busy_fraction=0.0, load=1)  # idle, at a low one
    assert meter.slowdown(min_samples=3) == 0.0  # no stratum has both
    for _ in range(4):
        meter.add(2.0, busy_fraction=0.0, load=8)  # idle at the same high load: as slow
    assert meter.slowdown(min_samples=3) == 0.0


def test_busy_time_is_the_union_of_overlapping_predictions():
    clock = FakeClock()
    regimes = Regimes(clock=clock, tail_s=0.0)
    span = regimes.span()
    with regimes.predicting():
        clock.now += 1.0
        with regimes.predicting():
            clock.now += 1.0
        clock.now += 1.0
    clock.now += 3.0
    assert regimes.busy_fraction(span) == pytest.approx(0.5)  # 3 s busy of 6


def test_the_engine_counts_as_busy_for_its_spin_after_the_last_question():
    clock = FakeClock()
    regimes = Regimes(clock=clock, tail_s=1.0)
    span = regimes.span()
    with regimes.predicting():
        clock.now += 2.0
    clock.now += 0.5  # within the tail: busy
    with regimes.predicting():  # begun in the tail: the same span goes on
        clock.now += 1.0
    clock.now += 4.5  # 1 s of tail, then idle
    assert regimes.busy_mark() == pytest.approx(4.5)
    assert regimes.busy_fraction(span) == pytest.approx(4.5 / 8)
    with regimes.predicting():  # a new span, after the gap
        clock.now += 1.0
    assert regimes.busy_mark() == pytest.approx(5.5)


def commands_run(gate: Gate, pairs: list[tuple[float, float]]) -> None:
    """Each pair: seconds of one command line while the world model was busy, then idle."""
    for i, (busy, idle) in enumerate(pairs):
        gate.observe_execution("task", f"./ci.sh step{i}", busy, busy_fraction=1.0)
        gate.observe_execution("task", f"./ci.sh step{i}", idle, busy_fraction=0.0)


def test_commands_slowed_while_the_world_model_works_turn_it_off():
    """Sandboxes sharing the world model's core (or everything on the policy's): the same
    command lines run twice as long while it answers. Its cost is then the commands', even
    with no other request on the policy's engine to slow."""
    gate = taught(explore_every=0)
    with episodes(gate, 8):
        assert gate.decide(ask(load=0)).ask_world_model
        commands_run(gate, [(6.0, 3.0)] * 6)
        commands = gate.summary()["regimes"]["5-8"]["commands"]
        assert (commands["busy_samples"], commands["idle_samples"]) == (6, 6)
        assert commands["slowdown"] == pytest.approx(6.3 / 9, abs=1e-4)  # 3 pairs at the prior
        assert gate.decide(ask(load=0)).reason == GateReason.slowdown
    with episodes(gate, 1):
        assert gate.decide(ask(load=0)).ask_world_model  # measured at another load only


def test_command_slowdown_compares_runs_of_the_same_command_line():
    """The world model is asked about the long commands: a busy `make test` against an idle
    `make lint` says nothing of what it costs; and a few pairs that differ by a fifth either
    way (commands vary) do not switch it off."""
    gate = taught(explore_every=0)
    for _ in range(4):
        gate.observe_execution("task", "make test", 30.0, busy_fraction=1.0)
        gate.observe_execution("task", "make lint", 3.0, busy_fraction=0.0)
    assert gate.summary()["regimes"]["1"]["commands"]["slowdown"] == 0.1  # the prior
    commands_run(gate, [(3.6, 3.0), (2.4, 3.0), (3.6, 3.0)])
    assert gate.summary()["regimes"]["1"]["commands"]["slowdown"] < 0.1
    assert gate.decide(ask(load=0)).ask_world_model


def test_command_slowdown_compares_runs_within_one_task():
    """`./ci.sh test` runs 5 s in one task and 3 s in another: a busy run in the first against
    an idle one in the second is the tasks' difference, not the world model's cost."""
    gate = taught(explore_every=0)
    for _ in range(4):
        gate.observe_execution("big-task", "./ci.sh test", 5.0, busy_fraction=1.0)
        gate.observe_execution("small-task", "./ci.sh  test", 3.0, busy_fraction=0.0)
    assert gate.summary()["regimes"]["1"]["commands"]["slowdown"] == 0.1  # the prior
    for _ in range(4):
        gate.observe_execution("big-task", "./ci.sh test", 5.0, busy_fraction=0.0)
    assert gate.summary()["regimes"]["1"]["commands"]["slowdown"] < 0.1  # measured: none


# --- through the runner: injected latencies, no timed assertion ----------------------------
class SlowWorldModel(TablePredictor):
    """A world model that answers right, but after `delay_s`: later than every command."""

    source = "lm"
    costly = True


class Cheap(TablePredictor):
    """Knows the answers of one command only, at once (like a state-cache hit)."""

    source = "cheap"

    def __init__(self, command: str) -> None:
        super().__init__({})
        self.command = command

    async def predict(self, context, command, n=1):
        self.calls += 1
        if command != self.command:
            return []
        return await super().predict(context, command, n)


async def test_a_world_model_that_answers_after_the_commands_stops_being_asked(builder):
    wm = SlowWorldModel({}, delay_s=0.8)
    cheap = Cheap("ls")
    gate = Gate(GateSettings(explore_every=0, prior_slowdown=0.0))  # lateness alone here
    loop = SpeculativeLoop(CascadePredictor([cheap, wm]), gate, SpeculationSettings())
    limits = EpisodeLimits(max_turns=6, max_tokens=64, temperature=0.7)
    records = []
    for seed in range(5):
        trajectory, context = new_episode(builder, seed)
        engine = fake_policy(builder.tokenizer, seconds_per_token=0.005)  # replies ~0.1 s
        await play(trajectory, context, step_sandbox(0.3), engine, builder, limits, loop)
        records += [t.speculation for t in trajectory.turns if t.speculation is not None]
    reasons = [r.gate for r in records]
    assert len(records) >= 12, reasons
    assert reasons[0] == "asked"  # the prior: it may pay
    # Then it learned that the answers come after the commands: asked again only where the
    # optimistic hit prior still says a hit could pay, and declined as late mostly.
    assert wm.calls <= 4, reasons
    assert reasons.count("late") >= len(reasons) // 2, reasons
    assert cheap.calls > wm.calls  # the free predictor is still asked when the world model is not
    assert gate.summary()["decisions"]["late"] == reasons.count("late")


def test_baseline_pauses_are_rare_and_stop_once_a_comparison_exists():
    clock = FakeClock()
    gate = taught(clock, explore_every=0, prior_slowdown=0.0)  # asked until measured
    with episodes(gate, 8):
        for _ in range(6):
            gate.observe_generation(1.0, decode_s=1.0, tokens=11, busy_fraction=1.0, load=8)
        assert gate.decide(ask(load=8)).reason == GateReason.baseline
        # Past the pause (2 of the longer of a reply and a command, `make`'s 3 s, a 0.2 s
        # answer and 1 s of spin: 7.2 s), not again within 5 pauses' time.
        clock.now += 8.0
        assert gate.decide(ask(load=8)).reason == GateReason.asked
        clock.now += 30.0
        assert gate.decide(ask(load=8)).reason == GateReason.baseline  # still nothing to compare
        for _ in range(3):  # idle replies at another load: a comparison exists there
            gate.observe_generation(1.0, decode_s=1.0, tokens=11, busy_fraction=1.0, load=1)
            gate.observe_generation(1.0, decode_s=1.0, tokens=11, busy_fraction=0.0, load=1)
        clock.now += 60.0
        assert gate.decide(ask(load=8)).reason == GateReason.asked


async def test_the_runner_measures_commands_against_the_world_models_busy_time(builder):
    """Every command the runner executes is a sample: busy when the world model answered
    about it (its answer takes longer than the command), and the commands in flight are
    counted while they run."""
    wm = SlowWorldModel({}, delay_s=0.8)
    gate = Gate(GateSettings(explore_every=0, prior_exec_s=5.0))
    loop = SpeculativeLoop(CascadePredictor([wm]), gate, SpeculationSettings())
    limits = EpisodeLimits(max_turns=4, max_tokens=64, temperature=0.7)
    trajectory, context = new_episode(builder, 0)
    engine = fake_policy(builder.tokenizer, seconds_per_token=0.005)
    await play(trajectory, context, step_sandbox(0.3), engine, builder, limits, loop)
    commands = gate.summary()["regimes"]["1"]["commands"]
    assert wm.calls >= 1 and commands["busy_samples"] >= 1, gate.summary()
    assert gate.regimes.commands == 0  # none left counted once they ended
