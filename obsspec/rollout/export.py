"""Collected episodes as chat conversations for other SFT tools.

    preflight(run, out, overwrite=False)                 # before any work: RUN and --out
    tokenizer = load_tokenizer(policy_tokenizer(read_run_manifest(run), None, models_dir))
    report = export_run(ExportRequest(run, ExportFormat.sharegpt, out), tokenizer)

Each episode becomes the conversation its policy had, message for message:

    system      SYSTEM_PROMPTS[the run's action format]
    user        task_prompt(the task's instruction)
    per turn    assistant: the reply as generated (a cut-off reply as far as it got);
                then the observation, in the role the policy saw it in (user, or tool for
                the hermes format: observation_role), except after the last reply, where
                nothing followed for a model to learn from

Rows store token ids, not the system and task text. The task text comes from the task set
the run was collected on (its manifest names it; `tasks` points elsewhere) or, for a task not
found there, from the row's prompt ids, cut out of their decoded text by the chat template.
Either way the conversation is checked the way the episode built its context: re-encoded
with the policy's tokenizer and chat template (ChatContextBuilder, with the chat-template kwargs
the run's manifest records in its identity's limits), it must give the row's
prompt ids and every observation's ids. An episode that does not is unverified and never
exported: the export fails (nothing is written), or skips it with `skip_unverified`.

Not exported, and counted: broken episodes (an infrastructure failure or a broken verifier,
not data; no reply at all) and those the filters leave out (`success_only`, `min_reward`).
Formats (docs/export.md): `openai-jsonl` ({"messages": [{"role", "content"}]}, as OpenAI
fine-tuning and TRL's SFTTrainer read), `sharegpt` ({"conversations": [{"from", "value"}]},
as LLaMA-Factory and axolotl read), `verl-parquet` (a `messages` column, as verl's multi-turn
SFT dataset reads); each record also carries the episode's metadata (METADATA).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from obsspec.agent.context import ChatContextBuilder, render
from obsspec.agent.protocol import SYSTEM_PROMPTS, ActionFormat, observation_role, task_prompt
from obsspec.config import DEFAULT_MODEL
from obsspec.errors import ConfigError, ModelError, ObsspecError
from obsspec.models.registry import resolve_model
from obsspec.rollout.dataset import write_atomically
from obsspec.rundirs import check_replaceable
from obsspec.runs import (
    DATA_DIR,
    MANIFEST,
    RL_MANIFEST,
    SHARD_GLOB,
    action_format,
    chat_template_kwargs,
    observation_reencodes,
    read_rows,
    read_run_manifest,
    shard_paths,
)

RUN = "RUN"  # the argument that names the run, in errors
EXAMPLES = 3  # unverified episodes named in the report
Message = dict[str, str]


class ExportFormat(StrEnum):
    openai_jsonl = "openai-jsonl"
    sharegpt = "sharegpt"
    verl_parquet = "verl-parquet"


@dataclass(frozen=True)
class ExportRequest:
    run: Path  # a collect or rl run directory
    format: ExportFormat
    out: Path  # the file to write
    tasks: str | None = None  # the task set [default: the one the manifest names]
    success_only: bool = False
    min_reward: float | None = None
    skip_unverified: bool = False  # export the verified episodes when some are not


@dataclass
class ExportReport:
    run: str
    out: str
    format: str
    episodes: int = 0  # read from the run
    exported: int = 0
    skipped_broken: int = 0  # an infrastructure failure or a broken verifier; no reply
    skipped_by_filter: int = 0  # success_only / min_reward
    unverified: int = 0  # do not re-encode to their ids (skipped or fatal)
    task_text: Counter = field(default_factory=Counter)  # "task set" / "prompt ids" -> episodes
    unverified_examples: list[str] = field(default_factory=list)
    # The policy's chat template rendered the conversations with these (a tool that trains
    # on them should render them alike, e.g. Qwen3 with enable_thinking false).
    chat_template_kwargs: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "run": self.run,
            "out": self.out,
            "format": self.format,
            "episodes": self.episodes,
            "exported": self.exported,
            "skipped_broken": self.skipped_broken,
            "skipped_by_filter": self.skipped_by_filter,
            "unverified": self.unverified,
            "task_text": dict(self.task_text),
            "unverified_examples": self.unverified_examples,
        } | (
            {"chat_template_kwargs": self.chat_template_kwargs} if self.chat_template_kwargs else {}
        )


# --- before any work --------------------------------------------------------------------------


def preflight(run: Path, out: Path, *, overwrite: bool, tasks: str | None = None) -> None:
    """Refuse, touching nothing, a RUN that is not there or an --out the export may not write
    (with overwrite, only an earlier export apart from RUN and --tasks: obsspec.rundirs)."""
    if not run.is_dir():
        raise ConfigError(f"{RUN} {run}: no such run directory")
    manifests = (run / MANIFEST, run / RL_MANIFEST)
    if not any(p.is_file() for p in manifests) and not shard_paths(run / DATA_DIR):
        # else the first error would blame the manifest for not naming the policy
        raise ConfigError(
            f"{RUN} {run}: holds no run (no {MANIFEST} or {RL_MANIFEST}, no "
            f"{DATA_DIR}/{SHARD_GLOB})",
            hint="give the --out of `obsspec collect` or `obsspec rl`",
        )
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory; give the path of the file to write")
    if out.exists() and not overwrite:
        raise ConfigError(
            f"--out {out} exists", hint="use --overwrite to replace it, or another --out"
        )
    if out.exists():
        check_replaceable(out, "export", {RUN: run, "--tasks": tasks})
    if out.resolve().is_relative_to((run / DATA_DIR).resolve()):
        raise ConfigError(
            f"--out {out} is inside the run's {DATA_DIR}/, where readers would take it for "
            "episodes; write it elsewhere"
        )
    existing = next(p for p in [out.parent, *out.parent.parents] if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out}: cannot write there ({existing} is not a writable dir)")


def policy_tokenizer(manifest: dict, tokenizer: str | None, models_dir: Path) -> Path:
    """The model directory of the tokenizer the run's policy used (or `tokenizer`)."""
    name = tokenizer or recorded_tokenizer(manifest)
    if name is None:
        raise ConfigError(
            f"{RUN}: its manifest does not name the policy whose tokenizer made its ids",
            hint="pass --tokenizer with the policy's model name or directory",
        )
    try:
        return resolve_model(name, models_dir)
    except ModelError as e:
        if tokenizer is not None:
            raise
        raise ModelError(
            f"the run's policy {name!r}: {e}",
            hint=e.hint or "pass --tokenizer with a model of the same tokenizer",
        ) from e


def recorded_tokenizer(manifest: dict) -> str | None:
    """The model whose tokenizer a run used: its policy, or the oracle's tokenizer."""
    config = manifest.get("config") or {}
    policy = config.get("policy") or (manifest.get("identity") or {}).get("policy")
    if policy == "oracle":
        return config.get("tokenizer") or DEFAULT_MODEL
    return policy


# --- the export -------------------------------------------------------------------------------


def export_run(request: ExportRequest, tokenizer) -> ExportReport:
    """Read the run, rebuild and verify each kept episode's conversation, write the file."""
    manifest = read_run_manifest(request.run, flag=RUN)
    rows = read_rows(request.run, flag=RUN)
    fmt = run_action_format(manifest)
    kwargs = chat_template_kwargs(manifest)
    chat = Chat(tokenizer, fmt, task_texts(request.tasks, manifest), kwargs)
    report = ExportReport(str(request.run), str(request.out), request.format.value)
    report.chat_template_kwargs = kwargs
    report.episodes = len(rows)
    make_record = RECORDS[request.format]
    records = []
    for row in rows:
        if broken(row):
            report.skipped_broken += 1
        elif not wanted(row, request):
            report.skipped_by_filter += 1
        else:
            messages, source = chat.conversation(row)
            if messages is None:
                report.unverified += 1
                if len(report.unverified_examples) < EXAMPLES:
                    report.unverified_examples.append(f"{episode_name(row)}: {source}")
                continue
            report.task_text[source] += 1
            records.append(make_record(messages, metadata(row)))
    report.exported = len(records)
    check_exportable(report, request)
    try:
        request.out.parent.mkdir(parents=True, exist_ok=True)
        WRITERS[request.format](request.out, records)
    except OSError as e:
        raise ConfigError(f"--out {request.out}: cannot write it: {e.strerror or e}") from e
    return report


def run_action_format(manifest: dict) -> ActionFormat:
    fmt = action_format(manifest)
    try:
        return ActionFormat(fmt)
    except ValueError:
        raise ConfigError(f"{RUN}: its manifest names an unknown action format {fmt!r}") from None


def task_texts(spec: str | None, manifest: dict) -> dict[str, str]:
    """task id -> instruction, from `spec` or else the task set the manifest names (a set
    that is gone gives none: the prompt ids still do)."""
    from obsspec.environments.errors import TaskFormatError
    from obsspec.rollout.plan import load_task_set

    recorded = (manifest.get("identity") or {}).get("tasks")
    if spec is None and (recorded is None or not Path(recorded).exists()):
        return {}
    try:
        tasks, _broken = load_task_set(spec or recorded, strict=False)
    except TaskFormatError:
        if spec is not None:
            raise
        return {}
    return {task.id: task.instruction for task in tasks}


def broken(row: dict) -> bool:
    """Not data: the infrastructure failed, the verifier was broken, or there is no reply."""
    return row.get("error_kind") in ("infra", "task") or not row["turns"]


def wanted(row: dict, request: ExportRequest) -> bool:
    if request.success_only and not row["success"]:
        return False
    return request.min_reward is None or (
        row["reward"] is not None and row["reward"] >= request.min_reward
    )


def check_exportable(report: ExportReport, request: ExportRequest) -> None:
    if report.unverified and not request.skip_unverified:
        raise ObsspecError(
            f"{report.unverified} episode(s) of {request.run} do not re-encode to their own "
            f"token ids ({'; '.join(report.unverified_examples)}); nothing was written",
            hint="is --tokenizer (or --tasks) the one the run used? --skip-unverified "
            "exports the others",
        )
    if not report.exported:
        raise ObsspecError(
            f"no episode of {request.run} to export: {report.episodes} read, "
            f"{report.skipped_broken} broken, {report.skipped_by_filter} left out by the "
            f"filters, {report.unverified} unverified; nothing was written"
        )


def episode_name(row: dict) -> str:
    return f"task {row['task_id']} episode {row['episode_index']}"


# --- conversations ----------------------------------------------------------------------------


class Chat:
    """Rebuilds an episode's messages and checks them against its token ids."""

    def __init__(
        self, tokenizer, fmt: ActionFormat, tasks: dict[str, str], kwargs: dict | None = None
    ) -> None:
        self.role = observation_role(fmt)
        self.system = SYSTEM_PROMPTS[fmt]
        self.tasks = tasks
        self.builder = ChatContextBuilder(tokenizer, self.role, kwargs)
        self.reader = PromptReader(tokenizer, self.system, self.builder.chat_template_kwargs)

    def conversation(self, row: dict) -> tuple[list[Message] | None, str]:
        """(messages, where the task text came from), or (None, why it is unverified)."""
        why = self.observations_differ(row)
        if why is not None:
            return None, why
        why = "its prompt ids do not decode to the system prompt in the chat template"
        for source, user in self.user_messages(row):
            if self.builder.prompt_ids(self.system, user) == row["prompt_ids"]:
                return self.messages(row, user), source
            why = f"the {source}'s text does not re-encode to its prompt ids"
        return None, why

    def user_messages(self, row: dict) -> Iterator[tuple[str, str]]:
        if row["task_id"] in self.tasks:
            yield "task set", task_prompt(self.tasks[row["task_id"]])
        decoded = self.reader.user_message(row["prompt_ids"])
        if decoded is not None:
            yield "prompt ids", decoded

    def observations_differ(self, row: dict) -> str | None:
        """Why an observation the policy saw does not re-encode to its ids (None: all do)."""
        for turn in row["turns"][:-1]:
            if not observation_reencodes(self.builder, turn):
                return f"turn {turn['index']}'s observation does not re-encode to its ids"
        return None

    def messages(self, row: dict, user: str) -> list[Message]:
        messages = [{"role": "system", "content": self.system}, {"role": "user", "content": user}]
        last = len(row["turns"]) - 1
        for i, turn in enumerate(row["turns"]):
            messages.append({"role": "assistant", "content": turn["reply"]})
            if i < last:
                messages.append({"role": self.role, "content": turn["observation"]})
        return messages


class PromptReader:
    """The user message inside prompt ids: their decoded text, less the chat template's text
    before and after it (found by rendering the template around a placeholder)."""

    PLACEHOLDER = "\ue000TASK\ue000"

    def __init__(self, tokenizer, system: str, kwargs: dict | None = None) -> None:
        self.tokenizer = tokenizer
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": self.PLACEHOLDER},
        ]
        text = render(tokenizer, messages, kwargs or {})
        self.before, _, self.after = text.partition(self.PLACEHOLDER)

    def user_message(self, prompt_ids: list[int]) -> str | None:
        text = self.tokenizer.decode(
            prompt_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
        inside = len(text) - len(self.after)
        if inside < len(self.before) or not text.startswith(self.before):
            return None
        return text[len(self.before) : inside] if text.endswith(self.after) else None


# --- formats ----------------------------------------------------------------------------------

METADATA = pa.schema(
    [
        ("run_id", pa.string()),
        ("task_id", pa.string()),
        ("episode_index", pa.int32()),
        ("seed", pa.int64()),
        ("reward", pa.float64()),
        ("success", pa.bool_()),
        ("finish_reason", pa.string()),
        ("num_turns", pa.int32()),
    ]
)
MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
VERL_SCHEMA = pa.schema([("messages", MESSAGES), *METADATA])
SHAREGPT_FROM = {"system": "system", "user": "human", "assistant": "gpt", "tool": "observation"}


def metadata(row: dict) -> dict:
    return {name: row[name] for name in METADATA.names}


def openai_record(messages: list[Message], meta: dict) -> dict:
    return {"messages": messages, **meta}


def sharegpt_record(messages: list[Message], meta: dict) -> dict:
    turns = [{"from": SHAREGPT_FROM[m["role"]], "value": m["content"]} for m in messages]
    return {"conversations": turns, **meta}


def write_jsonl(path: Path, records: list[dict]) -> None:
    lines = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    write_atomically(path, lambda tmp: tmp.write_text(lines, encoding="utf-8"))


def write_verl_parquet(path: Path, records: list[dict]) -> None:
    table = pa.Table.from_pylist(records, schema=VERL_SCHEMA)
    write_atomically(path, lambda tmp: pq.write_table(table, tmp))


RECORDS: dict[ExportFormat, Callable[[list[Message], dict], dict]] = {
    ExportFormat.openai_jsonl: openai_record,
    ExportFormat.sharegpt: sharegpt_record,
    ExportFormat.verl_parquet: openai_record,
}
WRITERS: dict[ExportFormat, Callable[[Path, list[dict]], None]] = {
    ExportFormat.openai_jsonl: write_jsonl,
    ExportFormat.sharegpt: write_jsonl,
    ExportFormat.verl_parquet: write_verl_parquet,
}
