"""`obsspec export`'s library: each format read back by the library it targets, the messages
against the trajectory, the re-encoding check both ways, the filters and the counts.

Runs are written by the real shard writer from episodes built the way the agent builds them
(the real tokenizer and context builder, no sandbox, no engine)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from obsspec.agent.context import ChatContextBuilder
from obsspec.agent.protocol import (
    CORRECTIVE_OBSERVATIONS,
    SYSTEM_PROMPTS,
    Action,
    ActionFormat,
    format_action,
    observation_role,
    task_prompt,
)
from obsspec.config import DEFAULT_MODEL
from obsspec.errors import ConfigError, ObsspecError
from obsspec.rollout.dataset import ShardWriter, trajectory_row
from obsspec.rollout.export import (
    ExportFormat,
    ExportRequest,
    export_run,
    policy_tokenizer,
    preflight,
    recorded_tokenizer,
)
from obsspec.trajectory import Trajectory, Turn

TASKS = Path(__file__).parent.parent / "fixtures" / "tasks"
GREETING, WORDCOUNT = "harbor-greeting", "tbv1-wordcount"
UNLISTED = "not-in-the-task-set"
MD, HERMES = ActionFormat.markdown, ActionFormat.hermes


def instructions() -> dict[str, str]:
    from obsspec.rollout.plan import load_task_set

    tasks, _ = load_task_set(str(TASKS), strict=False)
    return {task.id: task.instruction for task in tasks} | {UNLISTED: "Tidy  /srv, é 😀."}


def make_turn(builder, fmt, index: int, command: str | None, observation: str) -> Turn:
    """A reply with chatter around its action (None: an unparseable reply), and what it saw."""
    if command is None:
        reply, kind, observation = (
            "I am not sure what to do.",
            "invalid",
            CORRECTIVE_OBSERVATIONS[fmt],
        )
    elif command == "done":
        reply, kind = format_action(Action("done"), fmt), "done"
    else:
        reply, kind = f"Let me look.\n{format_action(Action('command', command), fmt)}", "command"
    action_ids = [*builder.encode(reply), builder.end_of_turn_id]
    observation_ids = [] if kind == "done" else builder.observation_ids(observation)
    return Turn(index, reply, kind, command if kind == "command" else "", observation,
                action_ids, [-0.5] * len(action_ids), observation_ids)  # fmt: skip


def episode(builder, fmt, task_id, steps, *, reward=1.0, index=0, system=None) -> dict:
    """steps: (command, observation); a step "done" ends it, else it ran out of turns."""
    user = task_prompt(instructions()[task_id])
    prompt = builder.prompt_ids(system or SYSTEM_PROMPTS[fmt], user)
    turns = [make_turn(builder, fmt, i, c, o) for i, (c, o) in enumerate(steps)]
    context = list(prompt)
    for turn in turns:
        context += turn.action_ids + turn.observation_ids
    done = turns[-1].action == "done"
    trajectory = Trajectory(
        task_id, hashlib.sha256(task_id.encode()).hexdigest(), DEFAULT_MODEL, 7 + index, prompt,
        turns=turns, context_ids=context, mask=[0] * len(context),
        finish_reason="done" if done else "max_turns", declared_done=done, reward=reward,
    )  # fmt: skip
    return trajectory_row(
        trajectory, run_id="collect-test", episode_index=index, policy=DEFAULT_MODEL, attempts=1
    )


def infra_row(builder, fmt) -> dict:
    prompt = builder.prompt_ids(SYSTEM_PROMPTS[fmt], task_prompt(instructions()[GREETING]))
    trajectory = Trajectory(
        GREETING, "h", DEFAULT_MODEL, 0, prompt, finish_reason="infra_error",
        error="the sandbox died", error_kind="infra", error_type="SandboxError",
    )  # fmt: skip
    return trajectory_row(
        trajectory, run_id="collect-test", episode_index=9, policy="p", attempts=3
    )


def write_run(path: Path, rows: list[dict], fmt: ActionFormat, tasks: Path | None = TASKS):
    (path / "data").mkdir(parents=True)
    writer = ShardWriter(path / "data", "shard-test-w00", shard_episodes=2)  # several shards
    for row in rows:
        writer.add(row)
    writer.close()
    identity = {"tasks": str(tasks), "policy": DEFAULT_MODEL, "limits": {"action_format": fmt}}
    manifest = {"format": "obsspec-collect/1", "identity": identity, "config": {"tokenizer": None}}
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def standard_rows(builder, fmt) -> list[dict]:
    return [
        episode(builder, fmt, GREETING, [("cat /srv/user.txt", "ada\n[exit code: 0]"),
                                         (None, ""), ("done", "")]),
        episode(builder, fmt, WORDCOUNT, [("wc -w /data/words.txt", "12 /data/words.txt"),
                                          ("echo 12", "12")], reward=0.0),
        episode(builder, fmt, UNLISTED, [("ls /srv", "(no output)"), ("done", "")], reward=0.5),
        infra_row(builder, fmt),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def hermes_builder(tokenizer):
    return ChatContextBuilder(tokenizer, observation_role(HERMES))


@pytest.fixture(scope="module")
def md_run(tmp_path_factory, builder):
    rows = standard_rows(builder, MD)
    return write_run(tmp_path_factory.mktemp("md") / "run", rows, MD), rows


def read_back(path: Path, fmt: ExportFormat) -> list[dict]:
    """The export as the target tools load it: `datasets` for JSON lines and Parquet."""
    kind = "parquet" if fmt == ExportFormat.verl_parquet else "json"
    return list(datasets.load_dataset(kind, data_files=str(path), split="train"))


def as_messages(record: dict, fmt: ExportFormat) -> list[tuple[str, str]]:
    if fmt == ExportFormat.sharegpt:
        return [(m["from"], m["value"]) for m in record["conversations"]]
    return [(m["role"], m["content"]) for m in record["messages"]]


def expected_messages(row: dict, fmt: ActionFormat, export: ExportFormat) -> list[tuple]:
    """The policy's conversation: system, task, then replies and what each one saw next."""
    role = observation_role(fmt)
    user = task_prompt(instructions()[row["task_id"]])
    messages = [("system", SYSTEM_PROMPTS[fmt]), ("user", user)]
    for i, turn in enumerate(row["turns"]):
        messages.append(("assistant", turn["reply"]))
        if i < len(row["turns"]) - 1:  # nothing followed the last observation
            messages.append((role, turn["observation"]))
    if export == ExportFormat.sharegpt:
        names = {"system": "system", "user": "human", "assistant": "gpt", "tool": "observation"}
        messages = [(names[r], text) for r, text in messages]
    return messages


@pytest.mark.parametrize("export", list(ExportFormat))
def test_each_format_reads_back_as_the_policys_conversations(tmp_path, tokenizer, md_run, export):
    run, rows = md_run
    out = tmp_path / f"out.{'parquet' if export == ExportFormat.verl_parquet else 'jsonl'}"
    report = export_run(ExportRequest(run, export, out), tokenizer)

    assert report.as_dict() | {"out": None} == {
        "run": str(run), "out": None, "format": export.value, "episodes": 4, "exported": 3,
        "skipped_broken": 1, "skipped_by_filter": 0, "unverified": 0,
        "task_text": {"task set": 2, "prompt ids": 1}, "unverified_examples": [],
    }  # fmt: skip
    records = read_back(out, export)
    assert [r["task_id"] for r in records] == [GREETING, WORDCOUNT, UNLISTED]
    for record, row in zip(records, rows, strict=False):
        assert as_messages(record, export) == expected_messages(row, MD, export)
        assert (record["reward"], record["success"]) == (row["reward"], row["success"])
        assert (record["run_id"], record["episode_index"]) == ("collect-test", 0)
    corrective = as_messages(records[0], export)[5]  # the unparseable reply's answer
    assert corrective[1] == CORRECTIVE_OBSERVATIONS[MD]


def test_verl_parquet_has_the_messages_column_verl_reads(tmp_path, tokenizer, md_run):
    run, _ = md_run
    out = tmp_path / "train.parquet"
    export_run(ExportRequest(run, ExportFormat.verl_parquet, out), tokenizer)
    table = pq.read_table(out)
    assert table.column_names[0] == "messages"
    messages = table.schema.field("messages").type
    assert pa.types.is_list(messages)
    assert messages.value_type == pa.struct([("role", pa.string()), ("content", pa.string())])
    frame = table.to_pandas()  # verl reads it with pandas
    assert [m["role"] for m in frame["messages"][0]][:3] == ["system", "user", "assistant"]


def test_the_chat_template_renders_an_export_to_the_exact_context(tmp_path, tokenizer, md_run):
    """What an SFT tool tokenises from the export is what the policy saw, token for token."""
    run, rows = md_run
    out = tmp_path / "out.jsonl"
    export_run(ExportRequest(run, ExportFormat.openai_jsonl, out, success_only=True), tokenizer)
    (record,) = read_back(out, ExportFormat.openai_jsonl)
    text = tokenizer.apply_chat_template(record["messages"], tokenize=False)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    context = rows[0]["context_ids"]
    assert ids[: len(context)] == context
    assert tokenizer.decode(ids[len(context) :]).strip() == ""  # the template's closing newline


def test_hermes_observations_are_tool_messages(tmp_path, tokenizer, hermes_builder):
    rows = standard_rows(hermes_builder, HERMES)
    run = write_run(tmp_path / "run", rows, HERMES)
    out = tmp_path / "out.jsonl"
    export_run(ExportRequest(run, ExportFormat.sharegpt, out), tokenizer)
    records = read_back(out, ExportFormat.sharegpt)
    assert as_messages(records[0], ExportFormat.sharegpt) == expected_messages(
        rows[0], HERMES, ExportFormat.sharegpt
    )
    assert [m["from"] for m in records[0]["conversations"]] == [
        "system", "human", "gpt", "observation", "gpt", "observation", "gpt"
    ]  # fmt: skip


def test_filters_and_their_counts(tmp_path, tokenizer, md_run):
    run, _ = md_run
    success = export_run(
        ExportRequest(run, ExportFormat.openai_jsonl, tmp_path / "a.jsonl", success_only=True),
        tokenizer,
    )
    assert (success.exported, success.skipped_by_filter, success.skipped_broken) == (1, 2, 1)
    half = export_run(
        ExportRequest(run, ExportFormat.openai_jsonl, tmp_path / "b.jsonl", min_reward=0.5),
        tokenizer,
    )
    assert [r["task_id"] for r in read_back(tmp_path / "b.jsonl", ExportFormat.openai_jsonl)] == [
        GREETING,
        UNLISTED,
    ]
    assert (half.exported, half.skipped_by_filter) == (2, 1)
    with pytest.raises(ObsspecError, match=r"no episode .* to export: 4 read, 1 broken, 3 left"):
        export_run(
            ExportRequest(run, ExportFormat.sharegpt, tmp_path / "c.jsonl", min_reward=2),
            tokenizer,
        )
    assert not (tmp_path / "c.jsonl").exists()


def test_text_comes_from_the_prompt_ids_when_the_task_set_is_gone(tmp_path, tokenizer, builder):
    rows = standard_rows(builder, MD)
    run = write_run(tmp_path / "run", rows, MD, tasks=tmp_path / "moved-away")
    out = tmp_path / "out.jsonl"
    report = export_run(ExportRequest(run, ExportFormat.openai_jsonl, out), tokenizer)
    assert report.task_text == {"prompt ids": 3}
    records = read_back(out, ExportFormat.openai_jsonl)
    assert [as_messages(r, ExportFormat.openai_jsonl) for r in records] == [
        expected_messages(row, MD, ExportFormat.openai_jsonl) for row in rows[:3]
    ]
    again = export_run(
        ExportRequest(run, ExportFormat.openai_jsonl, tmp_path / "again.jsonl", tasks=str(TASKS)),
        tokenizer,
    )
    assert again.task_text == {"task set": 2, "prompt ids": 1}  # --tasks points at the set


def tampered_rows(builder) -> list[dict]:
    """Rows whose text is not what their ids say: another system prompt, an edited output."""
    other_system = episode(
        builder, MD, GREETING, [("done", "")], index=1, system="You are a helpful assistant."
    )
    edited = episode(builder, MD, WORDCOUNT, [("wc -w f", "12 f"), ("done", "")], index=2)
    edited["turns"][0]["observation"] = "13 f"
    return [other_system, edited]


def test_rows_that_do_not_re_encode_fail_the_export_or_are_skipped(tmp_path, tokenizer, builder):
    good = standard_rows(builder, MD)
    run = write_run(tmp_path / "run", good + tampered_rows(builder), MD)
    out = tmp_path / "out.jsonl"
    with pytest.raises(ObsspecError, match=r"2 episode\(s\) .* do not re-encode") as refused:
        export_run(ExportRequest(run, ExportFormat.openai_jsonl, out), tokenizer)
    assert "task harbor-greeting episode 1: " in str(refused.value)
    assert "turn 0's observation does not re-encode" in str(refused.value)
    assert "--skip-unverified" in refused.value.hint
    assert not out.exists()  # never a file with wrong text

    report = export_run(
        ExportRequest(run, ExportFormat.openai_jsonl, out, skip_unverified=True), tokenizer
    )
    assert (report.episodes, report.exported, report.unverified) == (6, 3, 2)
    assert [r["episode_index"] for r in read_back(out, ExportFormat.openai_jsonl)] == [0, 0, 0]


def test_another_tokenizers_run_is_all_unverified(tmp_path, tokenizer, builder):
    """A run read with the wrong observation role (as another template would) is refused."""
    rows = standard_rows(builder, MD)
    run = write_run(tmp_path / "run", rows, HERMES)  # says hermes: tool-role observations
    with pytest.raises(ObsspecError, match=r"3 episode\(s\)"):
        export_run(ExportRequest(run, ExportFormat.sharegpt, tmp_path / "o.jsonl"), tokenizer)


def test_rl_runs_export_like_collect_runs(tmp_path, tokenizer, builder):
    from obsspec.rl.run_files import RLRunDir

    rows = standard_rows(builder, MD)
    rl = RLRunDir(tmp_path / "rl")
    rl.root.mkdir()
    rl.write_episodes(1, rows[:2])
    rl.write_episodes(2, rows[2:])
    identity = {"tasks": str(TASKS), "policy": DEFAULT_MODEL, "limits": {"action_format": MD}}
    rl.write_manifest({"run_id": "rl-test", "identity": identity, "config": {}})
    out = tmp_path / "out.parquet"
    report = export_run(ExportRequest(rl.root, ExportFormat.verl_parquet, out), tokenizer)
    assert (report.episodes, report.exported, report.skipped_broken) == (4, 3, 1)
    assert len(read_back(out, ExportFormat.verl_parquet)) == 3


def test_preflight_refuses_bad_paths_touching_nothing(tmp_path, md_run):
    run, _ = md_run
    with pytest.raises(ConfigError, match=r"RUN .*nowhere: no such run directory"):
        preflight(tmp_path / "nowhere", tmp_path / "o.jsonl", overwrite=False)
    existing = tmp_path / "exists.jsonl"
    existing.write_text("keep me\n")
    with pytest.raises(ConfigError, match=r"--out .*exists.jsonl exists") as e:
        preflight(run, existing, overwrite=False)
    assert "--overwrite" in e.value.hint and existing.read_text() == "keep me\n"
    with pytest.raises(ConfigError, match="not an obsspec export"):  # only an export is replaced
        preflight(run, existing, overwrite=True)
    with pytest.raises(ConfigError, match="is a directory"):
        preflight(run, tmp_path, overwrite=True)
    with pytest.raises(ConfigError, match="cannot write there"):
        preflight(run, existing / "under-a-file.jsonl", overwrite=False)
    with pytest.raises(ConfigError, match="inside the run's data/"):
        preflight(run, run / "data" / "train.parquet", overwrite=False)
    preflight(run, tmp_path / "new" / "dir" / "o.jsonl", overwrite=False)
    assert not (tmp_path / "new").exists()


def test_the_tokenizer_is_the_runs_policy_or_the_oracles(tmp_path, default_model_dir):
    models = default_model_dir.parent
    assert recorded_tokenizer({"config": {"policy": "oracle", "tokenizer": None}}) == DEFAULT_MODEL
    assert recorded_tokenizer({"config": {"policy": "oracle", "tokenizer": "/m"}}) == "/m"
    assert recorded_tokenizer({"identity": {"policy": "/p"}}) == "/p"
    assert policy_tokenizer({"identity": {"policy": DEFAULT_MODEL}}, None, models) == (
        default_model_dir
    )
    with pytest.raises(ConfigError, match="does not name the policy") as e:
        policy_tokenizer({}, None, models)
    assert "--tokenizer" in e.value.hint
    with pytest.raises(ObsspecError, match="the run's policy '/gone'"):
        policy_tokenizer({"identity": {"policy": "/gone"}}, None, models)
    assert policy_tokenizer({}, str(default_model_dir), models) == default_model_dir
