"""Exact match of the world model and of the predictor cascade on held-out turns.

    report = await evaluate(examples, lm_predictor, settings, progress)

The world model answers every held-out turn through the same engine path speculation uses
(world_model.lm.LMPredictor: greedy, stopped at the observation's end, capped), `concurrency`
requests at a time, so its latency is what a busy engine gives. The cascade (state cache,
rules, repeats, then the world model) is then replayed over the turns in episode order,
feeding each real observation back, as a collection run would: the state cache answers a
command after the same commands (a sibling episode of the same task), the rules answer
certain commands, repeats a command run earlier in the same episode.

All rates are pooled over turns (sums of counts, never means of per-task ratios):

    match_rate_wm       the world model alone, its greedy guess, over every held-out turn (it
                        is asked about all of them; an answer cut off counts as a miss): the
                        paper's figure, and the same name and meaning as in `profile` and `rl`
                        (obsspec.speculation.totals)
    exact_match_rate    the same figure under its older name, kept for existing readers
    cascade_match_rate  the cascade's answer (cache, rules, repeat or world model) over every
                        turn
    near_miss_rate      the world model's own answer not exact but within a tenth of the
                        observation by edit distance (obsspec.speculation.near_miss: timings,
                        pids, dates no model can know), over every turn; a near miss is still
                        a miss in match_rate_wm. `near_miss_examples` shows the first few:
                        task, command and the first line where prediction and observation
                        differ.
    new_content_rate    turns whose observation prints a line its context never showed
                        (world_model.novelty: a file read for the first time, a checksum), over
                        every turn; `by_content` gives the match rates of those ("new") and of
                        the rest ("seen") apart: how much of the miss rate is there.
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from obsspec.errors import ContextLengthError
from obsspec.speculation.near_miss import first_difference, is_near_miss
from obsspec.speculation.predictor import WORLD_MODEL, Prediction, SpeculationContext
from obsspec.world_model.cascade import default_cascade
from obsspec.world_model.config import EvalSettings
from obsspec.world_model.examples import Example
from obsspec.world_model.lm import LMPredictor
from obsspec.world_model.novelty import has_new_content

LENGTH_BUCKETS = [(1, 8), (9, 32), (33, 128), (129, None)]  # observation tokens
NO_ANSWER = "none"
NEAR_MISS_EXAMPLES = 5  # how many near misses the report shows


class Recorded:
    """The world model's answers, computed once, replayed inside the cascade."""

    source = WORLD_MODEL  # they are the world model's answers

    def __init__(self, answers: dict[tuple[str, str], Prediction]) -> None:
        self.answers = answers

    async def predict(self, context: SpeculationContext, command: str, n: int = 1):
        found = self.answers.get((context.key, command))
        return [found] if found is not None else []

    def observe(self, context: SpeculationContext, command: str, observation: str) -> None:
        pass


async def predict_all(
    examples: list[Example],
    predictor: LMPredictor,
    concurrency: int,
    progress: Callable[[int, int], None],
) -> list[Prediction | None]:
    """The world model's answer to each example (None: cut off, or the context too long)."""
    slots = asyncio.Semaphore(concurrency)
    answers: list[Prediction | None] = [None] * len(examples)
    done = 0

    async def one(index: int, example: Example) -> None:
        nonlocal done
        async with slots:
            try:
                found = await predictor.predict(example.context, example.command)
            except ContextLengthError:
                found = []
        answers[index] = found[0] if found else None
        done += 1
        progress(done, len(examples))

    await asyncio.gather(*(one(i, e) for i, e in enumerate(examples)))
    return answers


async def replay_cascade(
    examples: list[Example], answers: list[Prediction | None], threshold: float
) -> list[Prediction | None]:
    recorded = Recorded(
        {(e.context.key, e.command): a for e, a in zip(examples, answers, strict=True) if a}
    )
    cascade = default_cascade(recorded, threshold)
    chosen: list[Prediction | None] = []
    for example in examples:
        found = await cascade.predict(example.context, example.command)
        chosen.append(found[0] if found else None)
        cascade.observe(example.context, example.command, example.observation)
    return chosen


def rate(matched: int, total: int) -> float | None:
    return matched / total if total else None


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def length_bucket(tokens: int) -> str:
    for low, high in LENGTH_BUCKETS:
        if high is None or tokens <= high:
            return f"{low}+" if high is None else f"{low}-{high}"
    raise AssertionError("unreachable: the last bucket is open")


def length_bucket_names() -> list[str]:
    """The buckets' names, shortest observations first (the order reports show them in)."""
    return [length_bucket(low) for low, _ in LENGTH_BUCKETS]


@dataclass(frozen=True)
class Scored:
    example: Example
    lm: Prediction | None  # the world model's own answer
    chosen: Prediction | None  # the cascade's answer
    new_content: bool | None = None  # prints a line its context never showed (None: unknown)

    @property
    def lm_hit(self) -> bool:
        return self.lm is not None and self.lm.text == self.example.observation

    @property
    def lm_near_miss(self) -> bool:
        """The world model's own answer was right but for a few characters (still a miss)."""
        return self.lm is not None and is_near_miss(self.lm.text, self.example.observation)

    @property
    def cascade_hit(self) -> bool:
        return self.chosen is not None and self.chosen.text == self.example.observation


def summarise(scored: list[Scored], settings: EvalSettings, max_tokens: int) -> dict:
    """The report; max_tokens: the answers' cap (the predictor's)."""
    families: dict[str, list[Scored]] = defaultdict(list)
    lengths: dict[str, list[Scored]] = defaultdict(list)
    sources: dict[str, list[Scored]] = defaultdict(list)
    contents: dict[str, list[Scored]] = defaultdict(list)
    for turn in scored:
        if turn.new_content is not None:
            contents["new" if turn.new_content else "seen"].append(turn)
        families[turn.example.family].append(turn)
        lengths[length_bucket(len(turn.example.target_ids))].append(turn)
        sources[turn.chosen.source if turn.chosen else NO_ANSWER].append(turn)
    answered = [t for t in scored if t.lm is not None and t.lm.latency_s > 0]
    latencies = [t.lm.latency_s for t in answered]
    slow = [t for t in answered if t.example.exec_s >= settings.slow_command_s]
    return {
        "turns": len(scored),
        "held_out_tasks": len({(t.example.task_id, t.example.context.task_hash) for t in scored}),
        **match_rates(scored),
        "lm_answered_rate": rate(len(answered), len(scored)),
        "by_source": {
            name: {
                "answered": len(group),
                "matched": sum(t.cascade_hit for t in group),
                "match_rate": rate(sum(t.cascade_hit for t in group), len(group)),
            }
            for name, group in sorted(sources.items())
        },
        "near_miss_examples": near_miss_examples(scored),
        "by_family": {name: match_rates(group) for name, group in sorted(families.items())},
        "by_length": {
            name: match_rates(lengths[name]) for name in length_bucket_names() if name in lengths
        },
        "new_content_rate": rate(len(contents.get("new", [])), sum(map(len, contents.values()))),
        "by_content": {name: match_rates(contents[name]) for name in ("seen", "new") if contents},
        "pred_ms_p50": ms(percentile(latencies, 50)),
        "pred_ms_p90": ms(percentile(latencies, 90)),
        "exec_to_pred_ratio_p50": percentile([speed_ratio(t) for t in slow], 50),
        "slow_turns": len(slow),
        "slow_command_s": settings.slow_command_s,
        "exec_to_pred_ratio_p50_all": percentile([speed_ratio(t) for t in answered], 50),
        "concurrency": settings.concurrency,
        "max_tokens": max_tokens,
        # turns whose observation is longer than the answers may be: none of them can match
        "over_max_tokens": sum(len(t.example.target_ids) > max_tokens for t in scored),
    }


def report_keys() -> set[str]:
    """The top-level keys of `train-wm --eval-only`'s report (CI gates are checked against
    them before the evaluation): summarise's, over no turn, and evaluate_world_model's own."""
    return {*summarise([], EvalSettings(), 1), "model", "excluded_trained_tasks"}


def match_rates(turns: list[Scored]) -> dict:
    return {
        "turns": len(turns),
        "match_rate_wm": rate(sum(t.lm_hit for t in turns), len(turns)),
        "exact_match_rate": rate(sum(t.lm_hit for t in turns), len(turns)),  # = match_rate_wm
        "cascade_match_rate": rate(sum(t.cascade_hit for t in turns), len(turns)),
        "near_miss_rate": rate(sum(t.lm_near_miss for t in turns), len(turns)),
    }


def near_miss_examples(turns: list[Scored]) -> list[dict]:
    """The first few near misses, so a reader sees what differed."""
    shown = []
    for turn in turns:
        if len(shown) == NEAR_MISS_EXAMPLES:
            break
        if turn.lm_near_miss:
            predicted, observed = first_difference(turn.lm.text, turn.example.observation)
            shown.append(
                {
                    "task": turn.example.task_id,
                    "command": turn.example.command,
                    "observation_line": observed,
                    "prediction_line": predicted,
                }
            )
    return shown


def speed_ratio(turn: Scored) -> float:
    """How many times longer the real command took than the world model's prediction."""
    return turn.example.exec_s / turn.lm.latency_s


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


async def evaluate(
    examples: list[Example],
    predictor: LMPredictor,
    settings: EvalSettings,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> dict:
    answers = await predict_all(examples, predictor, settings.concurrency, progress)
    chosen = await replay_cascade(examples, answers, settings.cascade_threshold)
    decode = predictor.prompt.builder.tokenizer.decode
    new = [has_new_content(e.observation, decode(e.prompt_ids)) for e in examples]
    scored = [Scored(*turn) for turn in zip(examples, answers, chosen, new, strict=True)]
    return summarise(scored, settings, predictor.max_tokens)
