"""Reading collected runs: the episodes a `collect` run directory holds.

    RUN_DIR/manifest.json              what the run is (written by obsspec.rollout; an
                                       `obsspec rl` run has rl-run.json instead)
    RUN_DIR/data/*.parquet             finished shards, one row per episode

Readers (world-model training, SFT, profiling) need only this module; the writing side,
with its atomic shards and resume, lives in obsspec.rollout.dataset.

A run's token ids only mean something under the tokenizer and chat template that made them.
`load_runs` checks every run by rebuilding some of its observation ids with the reader's
tokenizer (the same builder the policy used): any difference means a model would learn other
bytes than the policy sees, and is refused.
"""

from __future__ import annotations

from pathlib import Path

from obsspec.errors import ConfigError

TURNS_CHECKED = 8  # per run; one differing turn is enough to refuse

DATA_DIR = "data"
MANIFEST = "manifest.json"
RL_MANIFEST = "rl-run.json"  # an `obsspec rl` run directory: its rollouts are runs too
SHARD_GLOB = "*.parquet"


def shard_paths(data_dir: Path) -> list[Path]:
    return sorted(data_dir.glob(SHARD_GLOB))


def read_rows(run_dir: Path, *, flag: str = "--data") -> list[dict]:
    """Every episode of a run, as dicts in the dataset schema (docs/datasets.md)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not run_dir.is_dir():
        raise ConfigError(f"{flag} {run_dir}: no such run directory")
    shards = shard_paths(run_dir / DATA_DIR)
    if not shards:
        raise ConfigError(
            f"{flag} {run_dir}: no episodes (no {DATA_DIR}/{SHARD_GLOB}); "
            "is it the --out of an `obsspec collect` run that finished at least one shard?"
        )
    try:
        # Shard by shard: a run resumed after a schema change (e.g. new speculation fields)
        # holds shards of both schemas, which one table cannot hold.
        return [row for shard in shards for row in pq.read_table(shard).to_pylist()]
    except (OSError, pa.ArrowException) as e:
        raise ConfigError(f"{flag} {run_dir}: unreadable dataset shard: {e}") from e


def read_run_manifest(run_dir: Path, *, flag: str = "--data") -> dict:
    """The run's manifest (empty when the run has none: a dataset copied without it)."""
    name = MANIFEST if (run_dir / MANIFEST).is_file() else RL_MANIFEST
    return read_json_object(run_dir / name, flag=flag)


def read_json_object(path: Path, *, flag: str) -> dict:
    """A JSON object file of a run directory ({} when absent or not an object); unreadable
    is an error naming the flag that pointed at it."""
    import json

    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{flag} {path.parent}: unreadable {path.name}: {e}") from e
    return data if isinstance(data, dict) else {}


def action_format(manifest: dict) -> str:
    """The action format the run's policy used (it decides the observation's chat role)."""
    limits = (manifest.get("identity") or {}).get("limits") or {}
    return limits.get("action_format", "markdown")


def chat_template_kwargs(manifest: dict) -> dict:
    """The chat-template kwargs the run's policy context was rendered with (none: {})."""
    limits = (manifest.get("identity") or {}).get("limits") or {}
    return limits.get("chat_template_kwargs") or {}


def load_runs(dirs: list[Path], tokenizer, flag: str, whose: str) -> tuple[list[dict], str]:
    """All rows of the runs, checked against tokenizer, and their shared action format (the
    runs must also share their chat-template kwargs); whose names the tokenizer's owner in
    errors ("the world model's")."""
    from obsspec.agent.context import ChatContextBuilder
    from obsspec.agent.protocol import observation_role

    rows: list[dict] = []
    formats: dict[str, Path] = {}
    kwargs: dict[str, Path] = {}
    for run in dirs:
        manifest = read_run_manifest(run, flag=flag)
        fmt = action_format(manifest)
        formats.setdefault(fmt, run)
        if len(formats) > 1:
            a, b = formats.items()
            raise ConfigError(
                f"{flag}: {a[1]} used action format {a[0]!r} and {b[1]} used {b[0]!r}; "
                "one model learns one format"
            )
        kwargs.setdefault(repr(sorted(chat_template_kwargs(manifest).items())), run)
        if len(kwargs) > 1:
            (a_kw, a_run), (b_kw, b_run) = kwargs.items()
            raise ConfigError(
                f"{flag}: {a_run} rendered prompts with limits.chat_template_kwargs {a_kw} "
                f"and {b_run} with {b_kw}; one model learns one prompt style"
            )
        run_rows = read_rows(run, flag=flag)
        builder = ChatContextBuilder(
            tokenizer, observation_role(fmt), chat_template_kwargs(manifest)
        )
        check_tokenization(run_rows, builder, run, flag, whose)
        rows += run_rows
    return rows, next(iter(formats))


def check_tokenization(rows: list[dict], builder, run: Path, flag: str, whose: str) -> None:
    vocab = len(builder.tokenizer)
    checked = 0
    for row in rows:
        if any(i >= vocab or i < 0 for i in row["prompt_ids"]):
            raise different_tokenizer(run, flag, whose, "its token ids exceed the vocabulary")
        for turn in row["turns"]:
            if turn["action"] == "done":  # the episode ended: no observation followed
                continue
            if not observation_reencodes(builder, turn):
                why = f"task {row['task_id']} turn {turn['index']} encodes differently"
                raise different_tokenizer(run, flag, whose, why)
            checked += 1
            if checked >= TURNS_CHECKED:
                return


def observation_reencodes(builder, turn: dict) -> bool:
    """Whether a turn's observation, rendered by builder (the policy's tokenizer and chat
    template), gives the ids the policy was shown after its reply."""
    expected = builder.turn_end_ids(turn["action_ids"]) + builder.observation_ids(
        turn["observation"]
    )
    return expected == turn["observation_ids"]


def different_tokenizer(run: Path, flag: str, whose: str, why: str) -> ConfigError:
    return ConfigError(
        f"{flag} {run} was tokenised with another tokenizer or chat template than {whose} "
        f"({why}); its token ids would mean other text, so collect with a policy of the same "
        "family or train from a base with the policy's tokenizer"
    )
