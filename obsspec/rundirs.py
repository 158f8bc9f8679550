"""What a command's --out holds, and whether the command may replace it: one rule for all.

    check_replaceable(out, "train-wm", {"--data": runs, "--base": base})   # before deleting
    mark(out, "train-wm")                                   # once the run has its directory

`--overwrite` (and a run that replaces an earlier one of its own that finished nothing)
deletes what --out holds. Whatever the command, it may only delete a run of that same
command, and never one that is, holds or lies inside something the command reads (its
--data, --tasks, --base, ...): both are checked before anything is deleted, and a refusal
(OverwriteRefused) names --out, what it holds and why. An empty directory holds nothing to
lose.

Every run directory names its command in MARKER, written when the run takes the directory.
Runs written before the marker existed are still recognised by the files their command
always wrote (`legacy_commands`); an export (a file, not a directory) by its records.

The task-set half: a run that reads --tasks records which tasks it ran (id -> content hash);
`task_set_digest` goes into the run's identity, so that resuming it over other tasks is
refused, and `task_set_change` says what changed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from obsspec.errors import ConfigError

MARKER = ".obsspec-run.json"  # {"command": ..., "created_at": ...}
LOCK = ".lock"  # a run's flock file (obsspec.rollout.rundir): not content
NAMED = 3  # task ids named in a message about a changed task set

Inputs = Mapping[str, "Path | str | Iterable[Path | str] | None"]


class OverwriteRefused(ConfigError):
    """--out may not be replaced by this command: it is not a run of it, or the command
    reads from it. Nothing was deleted."""


def mark(out: Path, command: str) -> None:
    """Name `command` as the owner of the run directory `out` (which exists)."""
    text = json.dumps({"command": command, "created_at": datetime.now(UTC).isoformat()})
    tmp = out / f"{MARKER}.tmp"
    tmp.write_text(text + "\n")
    os.replace(tmp, out / MARKER)


def marked_command(out: Path) -> str | None:
    try:
        data = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data.get("command") if isinstance(data, dict) else None


def is_empty(out: Path) -> bool:
    """Nothing to lose: no entry but the lock and the marker."""
    return all(p.name in (LOCK, MARKER) for p in out.iterdir())


def legacy_commands(out: Path) -> set[str]:
    """The commands that may have written `out`, from the files each always writes."""
    found = set()
    manifest = read_json(out / "manifest.json")
    if str(manifest.get("format", "")).startswith("obsspec-collect"):
        found.add("collect")
    if (out / "rl-run.json").is_file():
        found.add("rl")
    record = read_json(out / "obsspec-train.json")
    kind = {"world_model": "train-wm", "policy": "sft"}.get(record.get("kind"))
    if kind is not None:
        found.add(kind)
    elif any((out / "checkpoints").glob("step-*/trainer.pt")):
        found |= {"train-wm", "sft"}  # the trainer's checkpoints; the record comes at the end
    if (out / "report.json").is_file() or (out / "arms").is_dir():
        found.add("profile")
    return found


def is_export(path: Path) -> bool:
    """An `obsspec export` file: JSON lines of conversations, or verl's Parquet."""
    meta = {"run_id", "task_id", "episode_index"}
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            names = set(pq.read_schema(path).names)
        except Exception:  # not Parquet at all
            return False
        return {"messages", *meta} <= names
    try:
        with path.open(encoding="utf-8") as f:
            first = json.loads(f.readline())
    except (OSError, ValueError):
        return False
    return (
        isinstance(first, dict)
        and meta <= set(first)
        and bool({"messages", "conversations"} & set(first))
    )


def what_it_holds(out: Path) -> str:
    """A few words on what `out` holds, for a refusal."""
    if out.is_file():
        return "an obsspec export" if is_export(out) else "a file that is not an obsspec export"
    commands = sorted(legacy_commands(out) | {marked_command(out)} - {None})
    if commands:
        return f"a run of `obsspec {' or '.join(commands)}`"
    names = sorted(p.name for p in out.iterdir() if p.name not in (LOCK, MARKER))
    shown = ", ".join(names[:NAMED]) + (", ..." if len(names) > NAMED else "")
    return f"files that are no obsspec run ({shown})"


def check_replaceable(out: Path, command: str, inputs: Inputs | None = None) -> None:
    """Refuse, touching nothing, to delete `out` for a new run of `command`: it must be a run
    of that command (or empty; a file: an export), and none of the command's inputs."""
    check_not_input(out, inputs)
    if not out.exists():
        return
    if out.is_file():
        ok = command == "export" and is_export(out)
    else:
        marked = marked_command(out)
        ok = is_empty(out) or (
            marked == command if marked is not None else command in legacy_commands(out)
        )
    if not ok:
        noun = "file" if command == "export" else "run"
        raise OverwriteRefused(
            f"--out {out} holds {what_it_holds(out)}, not an earlier `obsspec {command}` "
            f"{noun}; --overwrite only replaces one of those, so nothing was deleted",
            hint="choose another --out, or remove it yourself if it is not needed",
        )


def check_not_input(out: Path, inputs: Inputs | None) -> None:
    """Refuse an --out that is, holds or lies inside one of the command's inputs (flag ->
    path(s); a name that is no path on disk, e.g. a model name, cannot be deleted)."""
    mine = out.resolve()
    for flag, value in (inputs or {}).items():
        for path in as_paths(value):
            if not path.exists():
                continue
            theirs = path.resolve()
            if mine == theirs:
                how = "is"
            elif theirs.is_relative_to(mine):
                how = "holds"
            elif mine.is_relative_to(theirs):
                how = "lies inside"
            else:
                continue
            raise OverwriteRefused(
                f"--out {out} {how} {flag} {path}: replacing it would delete what the "
                "command reads; nothing was deleted",
                hint="choose an --out apart from the command's inputs",
            )


def as_paths(value) -> list[Path]:
    if value is None:
        return []
    if isinstance(value, str | os.PathLike):
        return [Path(value)]
    return [Path(v) for v in value]


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# --- the task set ---------------------------------------------------------------------------


def task_set_digest(tasks: Mapping[str, str]) -> str:
    """One value for a task set (id -> content hash): equal sets, equal digests."""
    text = json.dumps(sorted(tasks.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def task_set_change(then: Mapping[str, str] | None, now: Mapping[str, str]) -> str:
    """What changed between the task set a run recorded and the one under --tasks now."""
    if not isinstance(then, Mapping):
        return "the tasks under --tasks changed since the run began"
    parts = []
    for word, ids in (
        ("added", sorted(set(now) - set(then))),
        ("removed", sorted(set(then) - set(now))),
        ("changed", sorted(i for i in set(then) & set(now) if then[i] != now[i])),
    ):
        if ids:
            shown = ", ".join(ids[:NAMED]) + (", ..." if len(ids) > NAMED else "")
            parts.append(f"{len(ids)} {word} ({shown})")
    return "the tasks under --tasks changed since the run began: " + "; ".join(parts)
