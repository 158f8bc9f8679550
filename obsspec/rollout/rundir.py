"""The run directory of a collection: checked before any episode, locked while in use.

    RUN_DIR/manifest.json     the run's identity and config, what is done (rewritten atomically)
    RUN_DIR/data/             Parquet shards (see obsspec.rollout.dataset)
    RUN_DIR/failures.jsonl    one line per episode attempt the infrastructure failed
    RUN_DIR/.lock             held (flock) by the process writing the run

Rerunning the same command on RUN_DIR resumes it: the finished shards say which episodes are
done, and only the others run. A directory holding a different run is refused (unless
overwrite), and so is a directory that is not writable or nearly full, before any work starts.
A refused run leaves the directory as it found it (a directory that did not exist still does
not): `check` reads, `preflight` removes what it made when it refuses, and only then is the
lock taken and the directory claimed. A run with no finished episode (every task broken, the
engine failed to start) pins nothing: other settings replace it, saying so.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from obsspec.config import first_difference
from obsspec.errors import ConfigError
from obsspec.rollout.dataset import remove_partial_shards, write_atomically
from obsspec.rundirs import Inputs, check_replaceable, mark, task_set_change, task_set_digest
from obsspec.runs import DATA_DIR, MANIFEST, shard_paths

FAILURES = "failures.jsonl"
FORMAT = "obsspec-collect/1"
LOCK = ".lock"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Verdict:
    resumes: bool  # the directory holds this very run: continue it
    note: str | None = None  # said when the run replaces one without --overwrite


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = path / DATA_DIR
        self.manifest_path = path / MANIFEST
        self.failures_path = path / FAILURES

    def preflight(self, min_free_mb: int) -> None:
        """Create the directory and prove it takes writes, with min_free_mb to spare; when it
        refuses, the directories it made are gone again."""
        existing = next(p for p in [self.path, *self.path.parents] if p.exists())
        free_mb = shutil.disk_usage(existing).free / (1 << 20)
        if free_mb < min_free_mb:
            raise ConfigError(
                f"--out {self.path}: only {free_mb:.0f} MiB free, below the {min_free_mb} MiB "
                "minimum (collect.min_free_mb)",
                hint="free some space or choose another directory",
            )
        made = None if existing == self.path else self.path.relative_to(existing).parts[0]
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".write-probe"
            with probe.open("wb") as f:
                f.write(b"\0" * 4096)
                f.flush()
                os.fsync(f.fileno())
            probe.unlink()
        except OSError as e:
            if made is not None:
                shutil.rmtree(existing / made, ignore_errors=True)
            raise ConfigError(
                f"--out {self.path}: cannot write there: {e.strerror or e}",
                hint="choose a writable directory with free space",
            ) from e

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """Exclusive use of the run directory by this process."""
        return locked(self.path, "collect")

    def read_manifest(self) -> dict[str, Any] | None:
        if not self.manifest_path.exists():
            return None
        try:
            manifest = json.loads(self.manifest_path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"{self.manifest_path}: unreadable manifest: {e}") from e
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise ConfigError(f"{self.manifest_path}: not an obsspec collect manifest")
        return manifest

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        manifest = {**manifest, "format": FORMAT, "updated_at": now()}
        text = json.dumps(manifest, indent=2, default=str) + "\n"
        write_atomically(self.manifest_path, lambda tmp: tmp.write_text(text))

    def check(
        self,
        identity: dict[str, Any],
        *,
        overwrite: bool,
        tasks: dict[str, str] | None = None,
        inputs: Inputs | None = None,
    ) -> Verdict:
        """What a run of identity would do with this directory, touching nothing: refuses one
        that holds another run with episodes (unless overwrite, and then only a collect run
        apart from the command's `inputs`: obsspec.rundirs) or files that are not a run.
        tasks: the task set (id -> content hash) whose digest identity holds, to say what
        changed when a run of other tasks is refused."""
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(f"--out {self.path} is a file, not a directory")
        manifest = self.read_manifest() if self.path.exists() else None
        if manifest is None:
            stray = [p.name for p in self.path.iterdir()] if self.path.exists() else []
            stray = [n for n in stray if not n.startswith(".")]
            stray = [n for n in stray if n != DATA_DIR or any(self.data.iterdir())]
            if stray:
                raise ConfigError(
                    f"--out {self.path}: not empty and not a collect run ({stray[0]} is there, "
                    f"no {MANIFEST}); choose an empty or new directory"
                )
            return Verdict(resumes=False)
        recorded = recorded_identity(manifest)
        if "task_set" not in recorded:  # an old manifest that recorded no task set
            identity = {k: v for k, v in identity.items() if k != "task_set"}
        if recorded == identity:
            return Verdict(resumes=True)
        if {**recorded, "task_set": None} == {**identity, "task_set": None}:
            field = task_set_change(manifest.get("tasks"), tasks or {})
        else:
            field = first_difference(recorded, identity)
        if overwrite:
            check_replaceable(self.path, "collect", inputs)
            return Verdict(resumes=False)
        if not self.shards:
            return Verdict(
                resumes=False,
                note=f"replacing an empty run with different settings ({field}): {self.path} "
                "holds no finished episode",
            )
        raise ConfigError(
            f"--out {self.path} holds a different run ({field}); use another --out, or "
            "--overwrite to delete that run's data and start again"
        )

    def claim(
        self, identity: dict[str, Any], *, overwrite: bool, inputs: Inputs | None = None
    ) -> dict[str, Any] | None:
        """With the lock held: the existing manifest when this directory continues the same
        run, None when the run is new (what another run left, if allowed, is erased)."""
        verdict = self.check(identity, overwrite=overwrite, inputs=inputs)
        manifest = self.read_manifest() if verdict.resumes else None
        if not verdict.resumes and self.manifest_path.exists():
            self.erase()
        self.data.mkdir(exist_ok=True)
        mark(self.path, "collect")
        return manifest

    @property
    def shards(self) -> list[Path]:
        return shard_paths(self.data)

    def erase(self) -> None:
        shutil.rmtree(self.data, ignore_errors=True)
        for name in (MANIFEST, FAILURES):
            (self.path / name).unlink(missing_ok=True)
        self.data.mkdir(parents=True, exist_ok=True)

    def clean_partial(self) -> int:
        return remove_partial_shards(self.data)

    def record_failure(self, entry: dict[str, Any]) -> None:
        with self.failures_path.open("a") as f:
            f.write(json.dumps({"at": now(), **entry}) + "\n")
            f.flush()


def recorded_identity(manifest: dict[str, Any]) -> dict[str, Any]:
    """The identity a manifest recorded; one written before identities held the task set's
    digest has it from the task map it recorded on every invocation (`tasks`)."""
    identity = dict(manifest.get("identity") or {})
    if "task_set" not in identity and isinstance(manifest.get("tasks"), dict):
        identity["task_set"] = task_set_digest(manifest["tasks"])
    return identity


@contextlib.contextmanager
def locked(path: Path, command: str) -> Iterator[None]:
    """Exclusive use of a run directory by this process (an flock on path/.lock, released
    when the file is closed: a killed process never leaves a stale lock)."""
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise ConfigError(
                f"--out {path}: another {command} (pid {owner}) is writing this run"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)
