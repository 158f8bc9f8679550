"""--overwrite deletes only a run of the same command, apart from the command's inputs, and
checks so before anything is deleted (obsspec.rundirs); a run resumed over other tasks is
refused (the task set is part of the run's identity). Unit tests of each command's check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from obsspec.errors import ConfigError
from obsspec.profile.config import ProfileConfig
from obsspec.profile.run import prepare_out as profile_out
from obsspec.rl.run_files import RLRunDir
from obsspec.rollout.config import CollectConfig
from obsspec.rollout.export import preflight
from obsspec.rollout.rundir import RunDir
from obsspec.rundirs import MARKER, OverwriteRefused, check_replaceable, legacy_commands
from obsspec.train.checkpoint import prepare_out


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def notes(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "ideas.md").write_text("months of notes\n")
    (root / "drafts").mkdir()
    (root / "drafts" / "a.txt").write_text("a draft\n")
    return root


def collect_run(root: Path, tasks: dict[str, str] | None = None) -> Path:
    """A collect run as `obsspec collect` leaves it: a manifest, a shard."""
    config = CollectConfig(tasks=str(root.parent / "tasks"), out=root, policy="oracle")
    rundir = RunDir(root)
    task_set = tasks or {"greet-a": "h-a"}
    rundir.data.mkdir(parents=True)
    (rundir.data / "shard-w00-00000.parquet").write_bytes(b"episodes")
    rundir.write_manifest({"identity": config.identity(task_set), "tasks": task_set})
    return root


def test_train_wm_and_sft_overwrite_refuse_notes_and_leave_them(tmp_path):
    out = notes(tmp_path / "out")
    before = snapshot(out)
    for command in ("train-wm", "sft"):
        with pytest.raises(OverwriteRefused, match=r"files that are no obsspec run \(drafts"):
            prepare_out(out, resume=False, overwrite=True, command=command)
    assert snapshot(out) == before


def test_train_overwrite_refuses_its_own_data_and_another_commands_run(tmp_path):
    run = collect_run(tmp_path / "run")
    before = snapshot(run)
    with pytest.raises(OverwriteRefused, match=r"--out .*run is --data .*run") as e:
        prepare_out(run, resume=False, overwrite=True, command="train-wm", inputs={"--data": [run]})
    assert e.value.exit_code == 1 and "apart from the command's inputs" in e.value.hint
    with pytest.raises(OverwriteRefused, match=r"a run of `obsspec collect`, not an earlier"):
        prepare_out(run, resume=False, overwrite=True, command="sft")
    assert snapshot(run) == before
    model = tmp_path / "run" / "model"  # --out inside --data
    with pytest.raises(OverwriteRefused, match="lies inside --data"):
        check_replaceable(model, "train-wm", {"--data": [run]})


def test_an_earlier_run_of_the_same_command_is_replaced(tmp_path):
    out = tmp_path / "wm"
    prepare_out(out, resume=False, overwrite=False, command="train-wm")
    (out / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(OverwriteRefused, match="a run of `obsspec train-wm`"):
        prepare_out(out, resume=False, overwrite=True, command="sft")
    prepare_out(out, resume=False, overwrite=True, command="train-wm")
    assert [p.name for p in out.iterdir()] == [MARKER]


def test_runs_written_before_the_marker_are_recognised(tmp_path):
    trained = tmp_path / "trained"
    trained.mkdir()
    (trained / "obsspec-train.json").write_text(json.dumps({"kind": "policy"}))
    killed = tmp_path / "killed" / "checkpoints" / "step-00000002"
    killed.mkdir(parents=True)
    (killed / "trainer.pt").write_bytes(b"state")
    assert legacy_commands(trained) == {"sft"}
    assert legacy_commands(tmp_path / "killed") == {"train-wm", "sft"}
    assert legacy_commands(collect_run(tmp_path / "run")) == {"collect"}
    prepare_out(trained, resume=False, overwrite=True, command="sft")
    assert not (trained / "obsspec-train.json").exists()


def test_rl_overwrite_refuses_notes_and_its_inputs(tmp_path):
    out = notes(tmp_path / "out")
    before = snapshot(out)
    run = RLRunDir(out)
    with pytest.raises(OverwriteRefused, match="files that are no obsspec run"):
        run.check(resume=False, overwrite=True)
    with pytest.raises(OverwriteRefused):
        run.prepare(resume=False, overwrite=True)
    assert snapshot(out) == before
    rl = tmp_path / "rl"
    rl.mkdir()
    (rl / "rl-run.json").write_text(json.dumps({"steps_done": 3}))
    (rl / "tasks").mkdir()
    with pytest.raises(OverwriteRefused, match="holds --tasks"):
        RLRunDir(rl).check(resume=False, overwrite=True, inputs={"--tasks": rl / "tasks"})
    RLRunDir(rl).prepare(resume=False, overwrite=True)  # an rl run of no input: replaced
    assert sorted(p.name for p in rl.iterdir()) == [MARKER]


def test_collect_overwrite_refuses_notes_and_a_run_holding_its_tasks(tmp_path):
    out = notes(tmp_path / "out")
    before = snapshot(out)
    with pytest.raises(ConfigError, match="not a collect run"):
        RunDir(out).check({"seed": 1}, overwrite=True)
    run = collect_run(tmp_path / "run")
    (run / "tasks").mkdir()
    with pytest.raises(OverwriteRefused, match="holds --tasks"):
        RunDir(run).check({"seed": 1}, overwrite=True, inputs={"--tasks": run / "tasks"})
    assert snapshot(out) == before


def test_profile_overwrite_refuses_a_profile_holding_its_tasks(tmp_path):
    out = tmp_path / "profile"
    (out / "tasks" / "greet").mkdir(parents=True)
    (out / "report.json").write_text("{}")
    before = snapshot(out)
    config = ProfileConfig(tasks=str(out / "tasks"), out=out, overwrite=True)
    with pytest.raises(OverwriteRefused, match="holds --tasks"):
        profile_out(config, {"--tasks": config.tasks})
    assert snapshot(out) == before
    (out / "tasks" / "greet").rmdir()
    (out / "tasks").rmdir()
    profile_out(config, {"--tasks": tmp_path / "elsewhere"})  # a profile: replaced
    assert [p.name for p in out.iterdir()] == [MARKER]


def test_export_overwrite_replaces_only_an_earlier_export(tmp_path):
    run = collect_run(tmp_path / "run")
    mine = tmp_path / "notes.jsonl"
    mine.write_text('{"todo": "keep this"}\n')
    with pytest.raises(OverwriteRefused, match="a file that is not an obsspec export"):
        preflight(run, mine, overwrite=True)
    assert mine.read_text() == '{"todo": "keep this"}\n'
    earlier = tmp_path / "sft.jsonl"
    record = {"messages": [], "run_id": "r", "task_id": "t", "episode_index": 0}
    earlier.write_text(json.dumps(record) + "\n")
    preflight(run, earlier, overwrite=True)  # an export: may be replaced
    manifest = run / "manifest.json"
    with pytest.raises(OverwriteRefused, match="lies inside RUN"):
        preflight(run, manifest, overwrite=True)


def test_collect_resumed_over_other_tasks_is_refused_and_says_what_changed(tmp_path):
    run = collect_run(tmp_path / "run", {"greet-a": "h-a", "greet-b": "h-b"})
    before = snapshot(run)
    config = CollectConfig(tasks=str(tmp_path / "tasks"), out=run, policy="oracle")
    same = {"greet-a": "h-a", "greet-b": "h-b"}
    assert RunDir(run).check(config.identity(same), overwrite=False, tasks=same).resumes
    for now, said in [
        ({"greet-a": "h-a", "greet-b": "h-b", "greet-c": "h-c"}, "1 added (greet-c)"),
        ({"greet-b": "h-b"}, "1 removed (greet-a)"),
        ({"greet-a": "h-a", "greet-b": "edited"}, "1 changed (greet-b)"),
    ]:
        with pytest.raises(ConfigError, match=r"tasks under --tasks changed") as e:
            RunDir(run).check(config.identity(now), overwrite=False, tasks=now)
        assert said in str(e.value) and "--overwrite" in str(e.value)
    assert snapshot(run) == before


def test_a_manifest_written_before_the_task_set_digest_still_resumes(tmp_path):
    run = collect_run(tmp_path / "run")
    config = CollectConfig(tasks=str(tmp_path / "tasks"), out=run, policy="oracle")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["identity"] = config.identity()  # no task_set: as runs recorded it before
    (run / "manifest.json").write_text(json.dumps(manifest))
    tasks = {"greet-a": "h-a"}
    assert RunDir(run).check(config.identity(tasks), overwrite=False, tasks=tasks).resumes
    other = {"greet-z": "h-z"}
    with pytest.raises(ConfigError, match=r"1 added \(greet-z\); 1 removed \(greet-a\)"):
        RunDir(run).check(config.identity(other), overwrite=False, tasks=other)


def test_rl_resumed_over_other_tasks_is_refused(tmp_path):
    from obsspec.rl.config import RLConfig

    config = RLConfig(tasks=str(tmp_path / "tasks"), out=tmp_path / "rl")
    run = RLRunDir(config.out)
    then = {"t-1": "h1", "t-2": "h2"}
    run.root.mkdir()
    run.write_manifest({"tasks": then})
    tmp = run.checkpoint_tmp(2)
    run.commit_checkpoint(tmp, 2, {"step": 2, "identity": config.identity(then)}, keep=1)
    assert run.resume_point(config.identity(then), then)[0] == 2
    now = {"t-1": "h1", "t-2": "edited"}
    with pytest.raises(ConfigError, match=r"1 changed \(t-2\)"):
        run.resume_point(config.identity(now), now)
    tmp = run.checkpoint_tmp(3)  # a checkpoint saved before the task set was recorded
    run.commit_checkpoint(tmp, 3, {"step": 3, "identity": config.identity()}, keep=1)
    assert run.resume_point(config.identity(now), now)[0] == 3
