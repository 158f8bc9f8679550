"""World-model examples from collect runs, checked against the world model's tokenizer.

    data = load_data([run_a, run_b], tokenizer, held_out_fraction=0.2)
    data = load_data([train_run], tokenizer, eval_dirs=[eval_run])   # an explicit held-out set

A run's token ids only mean something under the tokenizer and chat template that made them.
Every run is checked by rebuilding some of its observation ids with the world model's
tokenizer (world_model.prompt: the same builder the policy used): any difference means the
world model would learn and predict other bytes than the policy sees, and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from obsspec.agent.context import ChatContextBuilder
from obsspec.agent.protocol import observation_role
from obsspec.errors import ConfigError
from obsspec.runs import action_format, read_rows, read_run_manifest
from world_model.examples import Example, ExampleReport, build_examples
from world_model.prompt import WorldModelPrompt

TURNS_CHECKED = 8  # per run; one differing turn is enough to refuse


@dataclass
class WorldModelData:
    prompt: WorldModelPrompt
    train: list[Example]
    held_out: list[Example]
    report: ExampleReport


def world_model_prompt(tokenizer, fmt: str) -> WorldModelPrompt:
    """The prompt builder for runs of this action format (it sets the observation's role)."""
    return WorldModelPrompt(ChatContextBuilder(tokenizer, observation_role(fmt)))


def check_tokenization(rows: list[dict], builder: ChatContextBuilder, run: Path, flag: str):
    vocab = len(builder.tokenizer)
    checked = 0
    for row in rows:
        if any(i >= vocab or i < 0 for i in row["prompt_ids"]):
            raise different_tokenizer(run, flag, "its token ids exceed the vocabulary")
        for turn in row["turns"]:
            if turn["action"] == "done":  # the episode ended: no observation followed
                continue
            expected = builder.turn_end_ids(turn["action_ids"]) + builder.observation_ids(
                turn["observation"]
            )
            if turn["observation_ids"] != expected:
                raise different_tokenizer(
                    run, flag, f"task {row['task_id']} turn {turn['index']} encodes differently"
                )
            checked += 1
            if checked >= TURNS_CHECKED:
                return


def different_tokenizer(run: Path, flag: str, why: str) -> ConfigError:
    return ConfigError(
        f"{flag} {run} was tokenised with another tokenizer or chat template than the world "
        f"model's ({why}); policy and world model must share one, so collect with a policy "
        "of the same family or train from a base with the policy's tokenizer"
    )


def load_runs(dirs: list[Path], tokenizer, flag: str) -> tuple[list[dict], str]:
    """All rows of the runs, and their shared action format."""
    rows: list[dict] = []
    formats: dict[str, Path] = {}
    for run in dirs:
        fmt = action_format(read_run_manifest(run, flag=flag))
        formats.setdefault(fmt, run)
        if len(formats) > 1:
            a, b = formats.items()
            raise ConfigError(
                f"{flag}: {a[1]} used action format {a[0]!r} and {b[1]} used {b[0]!r}; "
                "one world model serves one format"
            )
        run_rows = read_rows(run, flag=flag)
        check_tokenization(run_rows, world_model_prompt(tokenizer, fmt).builder, run, flag)
        rows += run_rows
    return rows, next(iter(formats))


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
