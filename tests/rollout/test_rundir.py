"""The run directory: claimed, refused, locked and checked before any episode runs."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess

import pytest

from obsspec.errors import ConfigError
from obsspec.rollout.rundir import RunDir

IDENTITY = {"tasks": "/t", "policy": "oracle", "episodes_per_task": 2, "seed": 0, "limits": {}}


def claimed(path, identity=IDENTITY, overwrite=False) -> RunDir:
    rundir = RunDir(path)
    rundir.preflight(0)
    manifest = rundir.claim(identity, overwrite=overwrite) or {"identity": identity}
    rundir.write_manifest(manifest)
    return rundir


def test_same_run_resumes_and_a_different_one_is_refused(tmp_path):
    rundir = claimed(tmp_path / "run")
    (rundir.data / "shard-x-w00-00000.parquet").write_bytes(b"data")
    assert RunDir(tmp_path / "run").claim(IDENTITY, overwrite=False)["identity"] == IDENTITY
    other = {**IDENTITY, "policy": "smollm2-135m-instruct"}
    with pytest.raises(ConfigError, match=r"different run \(policy: 'oracle' there"):
        RunDir(tmp_path / "run").claim(other, overwrite=False)
    assert (rundir.data / "shard-x-w00-00000.parquet").exists()  # nothing lost by refusing
    assert RunDir(tmp_path / "run").claim(other, overwrite=True) is None
    assert list(rundir.data.iterdir()) == [] and not rundir.manifest_path.exists()


def test_a_directory_of_other_files_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not a collect run"):
        claimed(tmp_path, overwrite=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_manifest_is_replaced_atomically_and_readable(tmp_path):
    rundir = claimed(tmp_path / "run")
    manifest = json.loads(rundir.manifest_path.read_text())
    assert manifest["format"] == "obsspec-collect/1" and manifest["identity"] == IDENTITY
    assert [p.name for p in rundir.path.iterdir() if p.name.endswith(".tmp")] == []
    rundir.manifest_path.write_text("{ truncated")
    with pytest.raises(ConfigError, match="unreadable manifest"):
        rundir.claim(IDENTITY, overwrite=False)


def test_unwritable_out_is_refused_before_anything_runs(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"--out .*cannot write there"):
        RunDir(blocker / "run").preflight(0)


def test_too_little_free_space_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="MiB free"):
        RunDir(tmp_path).preflight(min_free_mb=1 << 40)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_disk_is_refused(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (mount / "run").mkdir()
        with (mount / "filler").open("wb", buffering=0) as filler, contextlib.suppress(OSError):
            while True:  # until the disk is full
                filler.write(b"\0" * 1024)
        with pytest.raises(ConfigError, match=r"--out .*cannot write there: No space left"):
            RunDir(mount / "run").preflight(0)
    finally:
        subprocess.run(["umount", str(mount)])


def test_a_run_directory_is_used_by_one_process_at_a_time(tmp_path):
    rundir = RunDir(tmp_path)
    busy = pytest.raises(ConfigError, match=f"another collect \\(pid {os.getpid()}\\)")
    with rundir.locked(), busy, RunDir(tmp_path).locked():
        pass
    with rundir.locked():  # released when the first holder is done
        pass
