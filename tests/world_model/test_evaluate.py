"""The evaluation's match rates from hand-made answers: `match_rate_wm` is the world model
alone over every turn (as `exact_match_rate`), the cascade's is apart."""

from __future__ import annotations

import pytest

from obsspec.speculation.predictor import Prediction, SpeculationContext
from obsspec.world_model.config import EvalSettings
from obsspec.world_model.evaluate import Scored, replay_cascade, report_keys, summarise
from obsspec.world_model.examples import Example
from obsspec.world_model.novelty import new_lines

SILENT = "(no output)\n[exit code: 0]"


def example(index: int, command: str, observation: str) -> Example:
    context = SpeculationContext("h", (index,))
    return Example("t-000", "t", command, context, observation, [index], [1, 2], 0.5)


async def test_the_world_model_alone_and_the_cascade_are_scored_apart():
    examples = [
        example(1, "mkdir -p x", SILENT),  # the rules know it; the world model got it wrong
        example(2, "ls", "a\n[exit code: 0]"),  # the world model is right
        example(3, "cat f", "b\n[exit code: 0]"),  # wrong
        example(4, "cat g", "c\n[exit code: 0]"),  # cut off: no answer, a miss
    ]
    answers = [
        Prediction("x\n[exit code: 0]", "lm", 0.9, latency_s=0.1),
        Prediction("a\n[exit code: 0]", "lm", 0.9, latency_s=0.1),
        Prediction("nope\n[exit code: 0]", "lm", 0.9, latency_s=0.1),
        None,
    ]
    chosen = await replay_cascade(examples, answers, threshold=0.5)
    scored = [Scored(*turn) for turn in zip(examples, answers, chosen, strict=True)]
    report = summarise(scored, EvalSettings(), max_tokens=2)
    assert report["match_rate_wm"] == pytest.approx(1 / 4)  # every turn, first guess
    assert report["exact_match_rate"] == report["match_rate_wm"]  # the older name
    assert report["cascade_match_rate"] == pytest.approx(2 / 4)  # the rules' mkdir too
    assert report["by_family"]["t"]["match_rate_wm"] == pytest.approx(1 / 4)


def test_turns_longer_than_the_answers_may_be_are_counted():
    examples = [example(1, "ls", "a\n[exit code: 0]"), example(2, "ls", "b\n[exit code: 0]")]
    scored = [Scored(e, None, None) for e in examples]
    assert summarise(scored, EvalSettings(), max_tokens=2)["over_max_tokens"] == 0
    cut = summarise(scored, EvalSettings(), max_tokens=1)  # each target is 2 tokens
    assert (cut["max_tokens"], cut["over_max_tokens"]) == (1, 2)


def test_near_misses_are_counted_apart_and_shown():
    timed = "built 3 targets\nreal\t0m0.013s\n" + "ok\n" * 60 + "[exit code: 0]"
    examples = [
        example(1, "make", timed),  # the world model got all but the timing
        example(2, "ls", "a\n[exit code: 0]"),  # exact: a hit, not a near miss
        example(3, "cat f", "b\n[exit code: 0]"),  # a different output: a plain miss
        example(4, "cat g", timed),  # cut off: no answer
    ]
    answers = [
        Prediction(timed.replace("0.013s", "0.021s"), "lm", 0.9, latency_s=0.1),
        Prediction("a\n[exit code: 0]", "lm", 0.9, latency_s=0.1),
        Prediction("no such file\n[exit code: 1]", "lm", 0.9, latency_s=0.1),
        None,
    ]
    # the cascade chose the exact answer for the timed turn: the near miss is the world model's
    cascade = [Prediction(timed, "cache", 1.0), *answers[1:]]
    scored = [Scored(*turn) for turn in zip(examples, answers, cascade, strict=True)]
    report = summarise(scored, EvalSettings(), max_tokens=100)
    assert report["match_rate_wm"] == pytest.approx(1 / 4)  # a near miss never matches
    assert report["near_miss_rate"] == pytest.approx(1 / 4)  # over every turn
    assert report["by_family"]["t"]["near_miss_rate"] == pytest.approx(1 / 4)
    assert sum(g["near_miss_rate"] * g["turns"] for g in report["by_length"].values()) == 1
    assert report["near_miss_examples"] == [
        {
            "task": "t-000",
            "command": "make",
            "observation_line": "real\t0m0.013s",
            "prediction_line": "real\t0m0.021s",
        }
    ]
    assert {"near_miss_rate", "near_miss_examples"} <= report_keys()


def test_turns_that_print_what_the_context_never_showed_are_scored_apart():
    seen, new = "listing.csv\n[exit code: 0]", "9f86d081884c  data.csv\n[exit code: 0]"
    examples = [example(1, "ls", seen), example(2, "sha256sum data.csv", new)]
    answers = [Prediction(seen, "lm", 0.9, latency_s=0.1), None]
    scored = [Scored(examples[0], answers[0], None, False), Scored(examples[1], None, None, True)]
    report = summarise(scored, EvalSettings(), max_tokens=2)
    assert report["new_content_rate"] == pytest.approx(1 / 2)
    assert report["by_content"]["seen"]["match_rate_wm"] == 1.0
    assert report["by_content"]["new"]["match_rate_wm"] == 0.0
    unknown = summarise([Scored(examples[0], None, None)], EvalSettings(), max_tokens=2)
    assert unknown["new_content_rate"] is None and unknown["by_content"] == {}


def test_new_content_is_a_long_line_the_context_does_not_contain():
    context = "<|im_start|>user\nls\n<|im_end|>\nlisting.csv\nreport.txt\n[exit code: 0]"
    assert new_lines("report.txt\nlisting.csv\n[exit code: 0]", context) == []
    assert new_lines("3\nok\n[exit code: 1]", "") == []  # short lines and the status line
    assert new_lines("(no output)\n[exit code: 0]", "") == []  # the format's own
    fresh = "9f86d081884c7d65  data.csv"
    assert new_lines(f"listing.csv\n{fresh}\n[exit code: 0]", context) == [fresh]
