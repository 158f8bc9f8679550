"""World-model examples from collect runs, checked against the world model's tokenizer.

    data = load_data([run_a, run_b], tokenizer, held_out_fraction=0.2)
    data = load_data([train_run], tokenizer, eval_dirs=[eval_run])   # an explicit held-out set

Every run is checked against the world model's tokenizer (obsspec.runs.load_runs): a world
model must predict exactly the tokens the policy sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from obsspec import runs
from obsspec.agent.context import ChatContextBuilder
from obsspec.agent.protocol import observation_role
from obsspec.errors import ConfigError
from obsspec.world_model.examples import Example, ExampleReport, build_examples
from obsspec.world_model.prompt import WorldModelPrompt


@dataclass
class WorldModelData:
    prompt: WorldModelPrompt
    train: list[Example]
    held_out: list[Example]
    report: ExampleReport


def world_model_prompt(tokenizer, fmt: str) -> WorldModelPrompt:
    """The prompt builder for runs of this action format (it sets the observation's role)."""
    return WorldModelPrompt(ChatContextBuilder(tokenizer, observation_role(fmt)))


def load_runs(dirs: list[Path], tokenizer, flag: str) -> tuple[list[dict], str]:
    return runs.load_runs(dirs, tokenizer, flag, "the world model's")


def load_data(
    data_dirs: list[Path],
    tokenizer,
    *,
    eval_dirs: list[Path] = (),
    held_out_fraction: float = 0.2,
    held_out_families: set[str] | None = None,
) -> WorldModelData:
    rows, fmt = load_runs(list(data_dirs), tokenizer, "--data")
    prompt = world_model_prompt(tokenizer, fmt)
    if not eval_dirs:
        train, held_out, report = build_examples(
            rows, prompt, held_out_fraction=held_out_fraction, held_out_families=held_out_families
        )
    else:
        eval_rows, eval_fmt = load_runs(list(eval_dirs), tokenizer, "--eval-data")
        if eval_fmt != fmt:
            raise ConfigError(f"--eval-data uses action format {eval_fmt!r}, --data {fmt!r}")
        check_disjoint(rows, eval_rows)
        train, _, report = build_examples(rows, prompt, held_out_fraction=0.0)
        _, held_out, eval_report = build_examples(eval_rows, prompt, held_out_fraction=1.0)
        report.merge(eval_report)
    if not train and not held_out:
        raise ConfigError(
            f"--data: no usable command turns in {len(rows)} episode(s) "
            f"(skipped: {dict(report.skipped) or 'none'})"
        )
    return WorldModelData(prompt, train, held_out, report)


def check_disjoint(train_rows: list[dict], eval_rows: list[dict]) -> None:
    seen = {row["task_hash"]: row["task_id"] for row in train_rows}
    for row in eval_rows:
        if row["task_hash"] in seen:
            raise ConfigError(
                f"--eval-data: task {row['task_id']} is also in --data (same content); "
                "held-out tasks must be unseen in training"
            )


def load_eval_data(
    data_dirs: list[Path], tokenizer, *, trained_hashes: set[str]
) -> tuple[WorldModelPrompt, list[Example], ExampleReport, int]:
    """Every turn of tasks the model was not trained on, and how many trained tasks were left
    out; an untrained model (no record) is evaluated on everything."""
    rows, fmt = load_runs(list(data_dirs), tokenizer, "--data")
    prompt = world_model_prompt(tokenizer, fmt)
    unseen = [row for row in rows if row["task_hash"] not in trained_hashes]
    excluded = len({row["task_hash"] for row in rows} & trained_hashes)
    if not unseen:
        raise ConfigError(
            f"--data: every one of its {excluded} task(s) was in the model's training data; "
            "evaluate on held-out tasks (e.g. a run of tasks generated with another --seed)"
        )
    _, held_out, report = build_examples(unseen, prompt, held_out_fraction=1.0)
    if not held_out:
        raise ConfigError(f"--data: no usable command turns in {len(unseen)} unseen episode(s)")
    return prompt, held_out, report, excluded
