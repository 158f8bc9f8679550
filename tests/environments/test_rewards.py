"""Reward files of every shape, and the one scalar reward made of them."""

import pytest

from obsspec.environments.errors import VerifierError
from obsspec.environments.tasks.rewards import parse_reward_json, parse_reward_txt, scalar_reward

WHERE = "task t: /logs/verifier/reward.json"


@pytest.mark.parametrize(
    ("raw", "rewards"),
    [
        (b'{"reward": 1}', {"reward": 1.0}),
        (b'{"score": 0.5}', {"score": 0.5}),
        (b'{"correctness": 1, "performance": 0.5}', {"correctness": 1.0, "performance": 0.5}),
        (b'{"passed": true, "style": false}', {"passed": 1.0, "style": 0.0}),
        (b'  {"reward": -2.5e-1}\n', {"reward": -0.25}),
    ],
)
def test_reward_json_keeps_every_numeric_key(raw, rewards):
    assert parse_reward_json(raw, WHERE) == rewards


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"reward": "1"}', "key 'reward' is not a number"),
        (b'{"correctness": 1, "notes": {"a": 1}}', "key 'notes' is not a number"),
        (b'{"reward": null}', "key 'reward' is not a number"),
        (b'{"reward": NaN}', "key 'reward' is nan, not a finite number"),
        (b'{"reward": Infinity}', "key 'reward' is inf"),
        (b"{}", "empty object"),
        (b"[1, 0]", "must be a JSON object"),
        (b"0.5", "must be a JSON object"),
        (b"{reward: 1}", "not valid JSON"),
        (b"", "not valid JSON"),
    ],
)
def test_bad_reward_json_names_the_file_and_key(raw, message):
    with pytest.raises(VerifierError, match=r"reward\.json") as info:
        parse_reward_json(raw, WHERE)
    assert message in str(info.value)


def test_reward_txt_is_one_number():
    where = "task t: reward.txt"
    assert parse_reward_txt(b"1\n", where) == {"reward": 1.0}
    assert parse_reward_txt(b" 0.25 ", where) == {"reward": 0.25}
    for bad, message in [(b"pass", "not a number"), (b"", "not a number"), (b"nan", "nan")]:
        with pytest.raises(VerifierError, match=message):
            parse_reward_txt(bad, where)


@pytest.mark.parametrize(
    ("rewards", "rule", "scalar"),
    [
        ({"reward": 0.0, "extra": 1.0}, {}, 0.0),  # "reward" wins over the others
        ({"score": 0.5}, {}, 0.5),  # the only key, whatever its name
        ({"correctness": 1.0, "performance": 0.5}, {}, 0.5),  # min by default
        ({"correctness": 1.0, "performance": 0.5}, {"aggregate": "mean"}, 0.75),
        ({"a": 0.5, "b": 0.5}, {"aggregate": "product"}, 0.25),
        ({"correctness": 1.0, "performance": 0.5}, {"key": "correctness"}, 1.0),
        ({"reward": 0.0, "correctness": 1.0}, {"key": "correctness"}, 1.0),  # key over "reward"
    ],
)
def test_scalar_reward_rule(rewards, rule, scalar):
    assert scalar_reward(rewards, **rule) == scalar


def test_a_named_reward_key_that_is_missing_is_an_error():
    with pytest.raises(VerifierError, match=r"no key 'correctness'.*\['score'\]"):
        scalar_reward({"score": 1.0}, key="correctness", where=WHERE)


def test_tbv1_reward_needs_a_pytest_summary():
    from obsspec.environments.tasks.verifier import pytest_reward
    from obsspec.types import ExecResult

    def run(out: str, code: int) -> ExecResult:
        return ExecResult(stdout=out, stderr="", exit_code=code, duration_s=0.1)

    assert pytest_reward(run("==== 3 passed in 0.12s ====\n", 0)) == 1.0
    assert pytest_reward(run("==== 1 failed, 2 passed in 0.12s ====\n", 1)) == 0.0
    with pytest.raises(
        VerifierError, match=r"t1: the verifier \(run-tests\.sh\) printed no pytest summary"
    ):
        pytest_reward(run("curl: (6) Could not resolve host\n", 127), "t1")
