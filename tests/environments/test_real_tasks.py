"""The real-format corpus (tests/fixtures/real_tasks) through `env validate` and the oracle.

The corpus holds Harbor and Terminal-Bench 1 tasks written the way their authors write them
(heredocs, functions, loops, `set -euo pipefail`, a multi-key reward, verifiers that need the
internet, a registry `FROM`, a latin-1 instruction); EXPECTED.toml says what each must give.
check_with_docker.sh checks the same expectations with plain Docker, without obsspec.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import datasets
import pytest

from tests.cli.test_cli import OBSSPEC

pytestmark = pytest.mark.docker

CORPUS = Path(__file__).parent.parent / "fixtures" / "real_tasks"
EXPECTED: dict[str, dict] = tomllib.loads((CORPUS / "EXPECTED.toml").read_text())
REGISTRY_IMAGE = "python:3.13-slim"  # the FROM of inventory-jq-report
SOLVABLE = sorted(name for name, want in EXPECTED.items() if "problem" not in want)
KIT_SERVED = sorted(name for name, want in EXPECTED.items() if want.get("kit"))


def image_map_flags(base_image: str) -> list[str]:
    """--image-map for python:3.13-slim and every other registry image EXPECTED.toml names."""
    images = {REGISTRY_IMAGE} | {w["image_map"] for w in EXPECTED.values() if "image_map" in w}
    return [flag for image in sorted(images) for flag in ("--image-map", f"{image}={base_image}")]


def without_image_map_env() -> dict[str, str]:
    """The environment minus OBSSPEC_IMAGE_MAP, so that only the flags given here map images."""
    return {k: v for k, v in os.environ.items() if k != "OBSSPEC_IMAGE_MAP"}


def run_obsspec(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [OBSSPEC, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**without_image_map_env(), "HF_HUB_OFFLINE": "1"},
    )


def validate_json(tasks: Path, *flags: str) -> dict:
    result = run_obsspec("env", "validate", str(tasks), "--json", *flags, timeout=900)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stdout.strip(), f"no JSON on stdout; stderr:\n{result.stderr[-3000:]}"
    return json.loads(result.stdout)


NEEDS_NETWORK_TO_BUILD = "inventory-jq-report"  # its Dockerfile runs apt-get install jq


@pytest.fixture(scope="module")
def built_with_network(base_image) -> None:
    """The corpus task whose image build installs a package, built once with a network, as
    docs/tasks.md tells its users: builds follow --network, and runs under the default
    `none` then use the image kept by its content hash."""
    task = CORPUS / NEEDS_NETWORK_TO_BUILD
    image_map = f"{REGISTRY_IMAGE}={base_image}"
    summary = validate_json(task, "--image-map", image_map, "--network", "verify")
    assert summary["rows"][0]["problems"] == [], summary


@pytest.fixture(scope="module")
def rows(base_image, built_with_network) -> dict[str, dict]:
    """One `env validate --json` over the whole corpus, its rows by task directory name."""
    summary = validate_json(CORPUS, *image_map_flags(base_image))
    return {Path(row["task"]).name: row for row in summary["rows"]}


def shows_problem(kind: str, row: dict) -> bool:
    """Whether a row reports the kind of problem EXPECTED.toml names, as a reader would see it:
    never as a reward of 0, always with what went wrong."""
    text = "\n".join(row["problems"])
    if kind == "verifier_failed_to_run":
        # no reward at all (not 0), and the problem says the verifier gave none
        return (
            row["solution_reward"] is None
            and re.search(r"verifier", text, re.IGNORECASE) is not None
            and "got reward" not in text
        )
    if kind == "broken_task":
        return (
            row["solution_reward"] is None
            and row["noop_reward"] is None
            and "instruction.md" in text
            and re.search(r"utf-?8", text, re.IGNORECASE) is not None
        )
    if kind == "image_map_needed":
        return REGISTRY_IMAGE in text and "--image-map" in text
    raise ValueError(f"EXPECTED.toml names an unknown problem kind {kind!r}")


def test_every_task_gets_one_row(rows):
    assert sorted(rows) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_validate_row_is_as_expected(rows, name):
    want, row = EXPECTED[name], rows[name]
    if "problem" in want:
        assert row["problems"], f"{name}: expected a {want['problem']} problem, got none"
        assert shows_problem(want["problem"], row), f"{name}: {want['problem']}? {row}"
    else:
        assert row["problems"] == [], f"{name}: {row['problems']}"
        assert (row["solution_reward"], row["noop_reward"]) == (want["solution"], want["noop"])
        assert row["solution_rewards"] == want.get("rewards", {"reward": want["solution"]})
        assert row["warnings"] == []  # every key these authors wrote is read


@pytest.mark.parametrize("name", KIT_SERVED)
def test_verifiers_that_download_are_served_by_the_kit_offline(rows, name):
    """Under the default --network none, the verifier kit served uv's installer in place of
    the download, and says so in the row (what it held, what it served)."""
    kit = rows[name]["verifier_kit"]
    assert kit is not None and kit["uv"], rows[name]
    assert any("uv's installer, from the kit" in line for line in kit["served"]), kit
    assert any(line.startswith(("uv ", "uvx ")) for line in kit["served"]), kit
    assert any(w.startswith("pytest-8.4.1-") for w in kit["wheels"]), kit


def test_a_verifier_without_network_is_told_to_try_one(rows):
    """Under the default --network none, a verifier that gave no reward gets the hint."""
    for name, want in EXPECTED.items():
        if want.get("problem") == "verifier_failed_to_run":
            assert any("try --network verify" in p for p in rows[name]["problems"]), name


def test_registry_from_without_a_map_is_one_line_naming_image_task_and_flag(
    tmp_path, base_image, docker_client
):
    from docker.errors import ImageNotFound

    try:
        docker_client.images.get(REGISTRY_IMAGE)
        pytest.skip(f"{REGISTRY_IMAGE} is present on this machine: nothing needs mapping")
    except ImageNotFound:
        pass
    task = Path(shutil.copytree(CORPUS / "inventory-jq-report", tmp_path / "inventory-jq-report"))
    (row,) = validate_json(task)["rows"]
    assert row["solution_reward"] is None and len(row["problems"]) == 1
    problem = row["problems"][0]
    assert "\n" not in problem and shows_problem("image_map_needed", row)
    assert "inventory-jq-report" in problem


def command_turns(row: dict) -> list[str]:
    return [turn["command"] for turn in row["turns"] if turn["action"] == "command"]


def parses_alone(command: str) -> bool:
    """Whether bash reads the command as complete (no open heredoc, loop, quote...)."""
    return subprocess.run(["bash", "-n", "-c", command], capture_output=True).returncode == 0


def test_oracle_collects_reward_one_on_every_solvable_task(
    tmp_path, base_image, built_with_network
):
    tasks = tmp_path / "tasks"
    for name in SOLVABLE:
        shutil.copytree(CORPUS / name, tasks / name)
    out = tmp_path / "run"
    args = ["collect", "--tasks", str(tasks), "--out", str(out), "--policy", "oracle"]
    result = run_obsspec(*args, *image_map_flags(base_image), "--json", timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["failures"] == {} and summary["episodes"] == len(SOLVABLE), summary

    files = [str(p) for p in sorted((out / "data").glob("*.parquet"))]
    episodes = {
        r["task_id"]: r for r in datasets.load_dataset("parquet", data_files=files)["train"]
    }
    assert sorted(episodes) == SOLVABLE
    for name, row in episodes.items():
        want, commands = EXPECTED[name], command_turns(row)
        assert row["reward"] == 1.0, f"{name}: reward {row['reward']}; turns {row['turns']}"
        if "rewards" in want:  # every key of a multi-key reward.json, stored as {key, value}
            assert {r["key"]: r["value"] for r in row["rewards"]} == want["rewards"], name
        assert all(parses_alone(c) for c in commands), f"{name}: a cut command: {commands}"
        if want["oracle"] == "whole_script":  # set -e: cutting would change what fails
            assert len(commands) == 1 and "set -euo pipefail" in commands[0], (name, commands)
        else:
            assert len(commands) > 1, (name, commands)
