"""The installed `obsspec` command, run as a user runs it: a subprocess."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

OBSSPEC = str(Path(sys.executable).with_name("obsspec"))


def obsspec(*args: str, env: dict | None = None, timeout: float = 300):
    return subprocess.run(
        [OBSSPEC, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_help_lists_commands():
    result = obsspec("--help")
    assert result.returncode == 0
    for command in ("doctor", "models", "env"):
        assert command in result.stdout


def test_unknown_model_is_one_line_listing_known_names():
    result = obsspec("models", "pull", "no-such-model")
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "no-such-model" in lines[0] and "smollm2-135m-instruct" in lines[0]
    assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback():
    result = obsspec("--debug", "models", "pull", "no-such-model")
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "ModelError" in result.stderr


def test_bad_config_file_names_it(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[paths\n")
    result = obsspec("models", "list", "--config", str(bad))
    assert result.returncode == 1
    assert str(bad) in result.stderr and "Traceback" not in result.stderr


def test_models_list_json_has_the_default_model(default_model_dir):
    result = obsspec("models", "list", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)["models"]}
    row = rows["smollm2-135m-instruct"]
    assert row["pulled"] and row["path"] == str(default_model_dir)


def test_models_list_in_an_empty_cache(tmp_path):
    result = obsspec("models", "list", "--json", "--cache-dir", str(tmp_path))
    row = json.loads(result.stdout)["models"][0]
    assert (row["status"], row["pulled"]) == ("not pulled", False)


def test_models_tiny_json(default_model_dir, tmp_path):
    result = obsspec("models", "tiny", str(tmp_path / "t"), "--layers", "1", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["path"] == str(tmp_path / "t")
    assert (tmp_path / "t" / "model.safetensors").is_file()


@pytest.mark.docker
def test_doctor_json_is_one_object_with_every_check(base_image, default_model_dir):
    result = obsspec("doctor", "--json")
    report = json.loads(result.stdout)  # the whole of stdout is one JSON object
    names = [c["name"] for c in report["checks"]]
    assert names == [
        "python", "torch", "vllm", "ray", "docker", "base image", "default model", "placement"
    ]  # fmt: skip
    placement = report["checks"][-1]["detail"]
    assert "policy engine core" in placement and "sandbox_cpuset" in placement, placement
    assert report["ok"] is True, report
    assert result.returncode == 0
    assert all(c["status"] == "ok" for c in report["checks"])


@pytest.mark.slow
def test_doctor_without_docker_fails_with_a_hint(tmp_path):
    result = obsspec("doctor", "--json", env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    assert result.returncode == 1
    report = json.loads(result.stdout)
    docker = next(c for c in report["checks"] if c["name"] == "docker")
    assert report["ok"] is False and docker["status"] == "fail"
    assert "dockerd" in docker["hint"]
    table = obsspec("doctor", env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    assert table.returncode == 1 and "FAIL" in table.stdout and "Traceback" not in table.stderr


@pytest.mark.docker
def test_env_run_passes_output_and_exit_code(base_image):
    result = obsspec("env", "run", "--json", "--", "echo hi; exit 3")
    assert result.returncode == 3
    payload = json.loads(result.stdout)
    assert (payload["stdout"], payload["exit_code"]) == ("hi\n", 3)
    plain = obsspec("env", "run", "--", "echo", "plain")
    assert (plain.returncode, plain.stdout) == (0, "plain\n")


@pytest.mark.docker
def test_env_build_is_cached(base_image):
    result = obsspec("env", "build", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["built"] is False and "obsspec/base:latest" in payload["tags"]


@pytest.mark.docker
def test_env_bench_json_keys(base_image):
    result = obsspec("env", "bench", "--json", "--n", "20", "--starts", "2")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    for key in (
        "exec_ms_p50",
        "docker_exec_ms_p50",
        "exec_overhead_ratio",
        "acquire_ms_p50",
        "cold_start_ms_p50",
    ):
        assert payload[key] > 0
    assert payload["exec_overhead_ratio"] < 1  # ours is faster than docker exec


@pytest.mark.docker
def test_env_validate_hand_made_tasks(base_image):
    fixtures = Path(__file__).parent.parent / "fixtures" / "tasks"
    result = obsspec("env", "validate", str(fixtures), "--json", timeout=900)
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert (payload["tasks"], payload["solution_pass"], payload["noop_fail"]) == (2, 2, 2)


@pytest.mark.docker
def test_env_shell_runs_a_script_in_a_task(base_image):
    fixtures = Path(__file__).parent.parent / "fixtures" / "tasks"
    result = subprocess.run(
        [OBSSPEC, "env", "shell", str(fixtures / "harbor-greeting"), "--verify"],
        input="cd /srv\ncat user.txt\npwd\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "$ cat user.txt\nAda\n[exit code: 0]" in result.stdout
    assert "/srv\n[exit code: 0]" in result.stdout and "reward: 0" in result.stdout


@pytest.mark.docker
def test_env_gc_json(base_image):
    result = obsspec("env", "gc", "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["dry_run"] is True


def test_env_validate_bad_path_is_one_line(tmp_path):
    result = obsspec("env", "validate", str(tmp_path / "none"))
    assert result.returncode == 1 and "no task directories" in result.stderr
    assert "Traceback" not in result.stderr


FIXTURE_TASK = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"


def test_episode_with_an_unknown_model_path_is_one_line(tmp_path):
    result = obsspec("episode", str(FIXTURE_TASK), "--model", str(tmp_path / "nope"))
    assert result.returncode == 1 and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.docker
@pytest.mark.vllm
def test_episode_json_is_the_trajectory(base_image, tiny_model_dir):
    result = obsspec(
        "episode",
        str(FIXTURE_TASK),
        "--model",
        str(tiny_model_dir),
        "--max-turns",
        "2",
        "--max-tokens",
        "16",
        "--json",
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    trajectory = json.loads(result.stdout)  # stdout holds the JSON and nothing else
    assert trajectory["task_id"] == "harbor-greeting" and trajectory["reward"] is not None
    assert 1 <= len(trajectory["turns"]) <= 2
    assert len(trajectory["context_ids"]) == len(trajectory["mask"])
