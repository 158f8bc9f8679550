"""Small faults a hostile user found (issue 38, item 12), each as a script or a person meets
it: the exit code, one error line naming what is wrong, one JSON object under --json, and
nothing made where the command was refused."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import obsspec
from tests.cli.test_exit_codes import GREETING


# --- profile simulate: --json after a refused --calibrate ------------------------------------
def test_json_after_a_refused_option_of_a_subcommand_still_gives_one_object(tmp_path):
    # `profile` is a group with a --json of its own: left unset, it used to cancel the
    # command line's --json before simulate's --calibrate was refused
    not_a_dir = tmp_path / "report.json"
    not_a_dir.write_text("{}")
    result = obsspec("profile", "simulate", "--calibrate", str(not_a_dir), "--json")
    assert result.returncode == 2
    outcome = json.loads(result.stdout)
    assert outcome["status"] == "usage_error" and "--calibrate" in outcome["error"]
    assert outcome["exit_code"] == 2


# --- --image-map SRC=DST ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "command", [["env", "validate", str(GREETING)], ["collect", "--tasks", str(GREETING)]]
)
def test_a_malformed_image_map_is_a_usage_error_naming_the_flag(command, tmp_path):
    result = obsspec(*command, "--image-map", "python", "--json")
    assert result.returncode == 2, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["status"] == "usage_error"
    assert "'--image-map'" in outcome["error"] and "'python' is not SRC=DST" in outcome["error"]
