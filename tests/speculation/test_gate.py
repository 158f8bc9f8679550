"""The gate: command families, and the auto rule's decisions as its estimates change."""

from __future__ import annotations

import pytest

from obsspec.speculation.gate import Ask, Gate, GateMode, GateSettings, command_family
from obsspec.speculation.predictor import Prediction


@pytest.mark.parametrize(
    ("command", "family"),
    [
        ("ls -la /srv", "ls"),
        ("cd src && make -j4", "make"),
        ("LC_ALL=C sort f | uniq -c", "sort"),
        ("sudo apt-get install -y jq", "apt-get"),
        ("/usr/bin/python3 -m pytest -q", "python3"),
        ("timeout 5 ./run.sh", "run.sh"),
        ("cd /tmp", "cd"),
        ("echo 'unbalanced", "echo"),
        ("", "(empty)"),
    ],
)
def test_command_family(command, family):
    assert command_family(command) == family


def ask(command: str, load: int = 0, elapsed_s: float = 0.0) -> Ask:
    return Ask("task", command, load, elapsed_s)


def guess(confidence: float, source: str = "lm") -> Prediction:
    return Prediction("x\n[exit code: 0]", source, confidence)


def taught(**settings) -> Gate:
    """A gate that has seen replies take 1 s and predictions 0.05 s."""
    gate = Gate(GateSettings(**settings))
    for _ in range(5):
        gate.observe_generation(1.0)
        gate.observe_prediction(0.05)
    return gate


def test_always_and_never_do_not_look_at_anything():
    assert Gate(GateSettings(mode=GateMode.always)).should_predict(ask("true", load=99))
    assert not Gate(GateSettings(mode=GateMode.never)).should_predict(ask("sleep 60"))
    assert not Gate(GateSettings(mode=GateMode.never)).should_branch(ask("sleep 60"), guess(1.0))


def test_fast_commands_stop_being_speculated_once_seen():
    gate = taught()
    assert gate.should_predict(ask("grep -r x ."))  # never seen: the prior says it may pay
    for _ in range(3):
        gate.observe_execution("task", "grep -r y .", 0.004)
    assert not gate.should_predict(ask("grep -r x ."))  # a hit would save ~4 ms
    for _ in range(3):
        gate.observe_execution("task", "make all", 3.0)
    assert gate.should_predict(ask("make test"))


def written_off(misses: int = 30, **settings) -> Gate:
    """A gate that has seen `make` take 3 s and its predictions miss `misses` times."""
    gate = taught(**settings)
    gate.observe_execution("task", "make", 3.0)
    for _ in range(misses):
        gate.observe_outcome("make", "lm", matched=False)
    return gate


def test_a_family_that_never_hits_is_left_alone():
    gate = written_off(explore_every=0)
    assert not gate.should_predict(ask("make"))
    for _ in range(30):
        gate.observe_outcome("make", "lm", matched=True)
    assert gate.should_predict(ask("make"))


def test_with_a_window_a_family_written_off_recovers_after_a_few_hits():
    """A co-trained world model gets better: old misses must not outvote new hits."""
    for window, recovers in ((None, False), (10, True)):
        gate = written_off(100, hit_window=window, explore_every=0)
        assert not gate.should_predict(ask("make"))
        for _ in range(6):
            gate.observe_outcome("make", "lm", matched=True)
        assert gate.should_predict(ask("make")) is recovers, window


def test_explore_every_predicts_every_nth_declined_command_that_could_save_time():
    gate = written_off(explore_every=3)
    gate.observe_execution("task", "ls", 0.001)
    decisions = [gate.should_predict(ask("make")) for _ in range(9)]
    assert decisions == [False, False, True] * 3
    assert not any(gate.should_predict(ask("ls")) for _ in range(9))  # nothing to save
    never = written_off(explore_every=0)  # no exploration
    assert not any(never.should_predict(ask("make")) for _ in range(9))
    default = written_off()  # the default explores every 8th
    assert [default.should_predict(ask("make")) for _ in range(8)] == [False] * 7 + [True]


def test_a_busy_engine_raises_the_bar():
    gate = taught(contention=0.05)
    gate.observe_execution("task", "make", 3.0)
    for hits in (6, 4):  # 60% hit rate on make
        for _ in range(hits):
            gate.observe_outcome("make", "lm", matched=True)
        gate.observe_outcome("make", "lm", matched=False)
    gate.observe_outcome("make", "lm", matched=False)
    assert gate.should_predict(ask("make", load=0))
    assert not gate.should_predict(ask("make", load=200))


def test_after_the_prediction_confidence_and_elapsed_time_decide():
    gate = taught()
    gate.observe_execution("task", "make", 2.0)
    assert gate.should_branch(ask("make", elapsed_s=0.1), guess(0.9))
    assert not gate.should_branch(ask("make", elapsed_s=0.1), guess(0.001))
    assert not gate.should_branch(ask("make", elapsed_s=1.99), guess(0.9))  # about to finish
    for _ in range(40):  # a source whose confident answers are always wrong loses its say
        gate.observe_outcome("make", "lm", matched=False)
    assert not gate.should_branch(ask("make", elapsed_s=0.1), guess(0.9))
    assert gate.should_branch(ask("make", elapsed_s=0.1), guess(0.9, source="cache"))


def test_exec_time_is_per_task_then_per_family():
    gate = taught()
    gate.observe_execution("slow-task", "python3 train.py", 30.0)
    gate.observe_execution("fast-task", "python3 -c 1", 0.02)
    assert gate.expected_exec_s("slow-task", "python3 x") == 30.0
    assert gate.expected_exec_s("fast-task", "python3 x") == 0.02
    assert gate.expected_exec_s("new-task", "python3 x") == pytest.approx(15.01)
    assert gate.expected_exec_s("new-task", "cargo build") == 0.5  # the prior
