"""The run directory of a collection: checked before any episode, locked while in use.

    RUN_DIR/manifest.json     the run's identity and config, what is done (rewritten atomically)
    RUN_DIR/data/             Parquet shards (see obsspec.rollout.dataset)
    RUN_DIR/failures.jsonl    one line per episode attempt the infrastructure failed
    RUN_DIR/.lock             held (flock) by the process writing the run

Rerunning the same command on RUN_DIR resumes it: the finished shards say which episodes are
done, and only the others run. A directory holding a different run is refused (unless
overwrite), and so is a directory that is not writable or nearly full, before any work starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from obsspec.config import first_difference
from obsspec.errors import ConfigError
from obsspec.rollout.dataset import remove_partial_shards, write_atomically
from obsspec.runs import DATA_DIR, MANIFEST

FAILURES = "failures.jsonl"
FORMAT = "obsspec-collect/1"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = path / DATA_DIR
        self.manifest_path = path / MANIFEST
        self.failures_path = path / FAILURES

    def preflight(self, min_free_mb: int) -> None:
        """Create the directory and prove it takes writes, with min_free_mb to spare."""
        try:
            self.data.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".write-probe"
            with probe.open("wb") as f:
                f.write(b"\0" * 4096)
                f.flush()
                os.fsync(f.fileno())
            probe.unlink()
        except OSError as e:
            raise ConfigError(
                f"--out {self.path}: cannot write there: {e.strerror or e}",
                hint="choose a writable directory with free space",
            ) from e
        free_mb = shutil.disk_usage(self.path).free / (1 << 20)
        if free_mb < min_free_mb:
            raise ConfigError(
                f"--out {self.path}: only {free_mb:.0f} MiB free, below the {min_free_mb} MiB "
                "minimum (collect.min_free_mb)",
                hint="free some space or choose another directory",
            )

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive use of the run directory by this process."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                raise ConfigError(
                    f"--out {self.path}: another collect (pid {owner}) is writing this run"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            os.close(fd)  # closing releases the lock

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

    def claim(self, identity: dict[str, Any], *, overwrite: bool) -> dict[str, Any] | None:
        """The existing manifest when this directory continues the same run, None when it is
        new; refuses a directory that holds another run (or other files) unless overwrite."""
        manifest = self.read_manifest() if self.path.exists() else None
        if manifest is None:
            stray = [p.name for p in self.path.iterdir() if not p.name.startswith(".")]
            stray = [name for name in stray if name != DATA_DIR or any(self.data.iterdir())]
            if stray:
                raise ConfigError(
                    f"--out {self.path}: not empty and not a collect run ({stray[0]} is there, "
                    f"no {MANIFEST}); choose an empty or new directory"
                )
            return None
        if manifest.get("identity") == identity:
            return manifest
        if not overwrite:
            field = first_difference(manifest.get("identity") or {}, identity)
            raise ConfigError(
                f"--out {self.path} holds a different run ({field}); use another --out, or "
                "--overwrite to delete that run's data and start again"
            )
        self.erase()
        return None

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
