"""`obsspec rl` that fails before its first step: a clear line, and --out as it was found (or
resumable by the same command); nothing here starts a Ray cluster or an engine."""

from __future__ import annotations

import json

import pytest

from obsspec.errors import ConfigError
from obsspec.rl.run_files import RLRunDir
from obsspec.rundirs import MARKER
from tests.cli.test_cli import obsspec
from tests.rollout.test_rundir_refusal import snapshot

NOWHERE = "127.0.0.1:1"  # no Ray cluster listens on port 1; Ray itself would retry for minutes


def rl_nowhere(tasks, policy, out):
    return obsspec(
        "rl", "--tasks", str(tasks), "--policy", str(policy), "--out", str(out),
        "--ray-address", NOWHERE, timeout=120,
    )  # fmt: skip


def failed_start(out):
    """What a run that died while starting its roles leaves: a manifest with no step done."""
    (out / "tensorboard").mkdir(parents=True)
    manifest = {"run_id": "rl-dead", "status": "failed", "steps_done": 0, "error": "engine died"}
    (out / "rl-run.json").write_text(json.dumps(manifest))


@pytest.mark.slow
def test_no_cluster_at_the_address_is_one_clear_line_and_out_stays_as_found(
    rl_tasks, tiny_model_dir, tmp_path
):
    out = tmp_path / "out"
    for _ in range(2):  # the same command again fails the same way, not on leftovers
        result = rl_nowhere(rl_tasks, tiny_model_dir, out)
        assert result.returncode != 0 and "Traceback" not in result.stderr
        assert "ConnectionError" not in result.stderr
        lines = [line for line in result.stderr.splitlines() if NOWHERE in line]
        assert len(lines) == 1 and "no Ray cluster answers" in lines[0], result.stderr
        assert "ray start --head" in result.stderr  # the hint
        assert not out.exists()

    # the leftovers of a start that failed later are not a reason to refuse either
    failed_start(out)
    before = snapshot(out)
    result = rl_nowhere(rl_tasks, tiny_model_dir, out)
    assert "no Ray cluster answers" in result.stderr and "not empty" not in result.stderr
    assert snapshot(out) == before


def test_a_run_that_finished_no_step_is_replaced_and_one_that_did_is_refused(tmp_path):
    out = tmp_path / "out"
    failed_start(out)
    run = RLRunDir(out)
    assert "finished no step" in run.check(resume=False, overwrite=False)
    with run.locked():
        run.prepare(resume=False, overwrite=False)
    assert sorted(p.name for p in out.iterdir()) == [".lock", MARKER]  # a new rl run

    failed_start(out)
    (out / "rl-run.json").write_text(json.dumps({"status": "failed", "steps_done": 1}))
    before = snapshot(out)
    with pytest.raises(ConfigError, match=r"not empty; use --resume"):
        run.check(resume=False, overwrite=False)
    assert snapshot(out) == before
