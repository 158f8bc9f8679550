"""`obsspec models pull|list` with hub ids, as a user runs them (a subprocess, no hub here)."""

import json

from tests.cli.test_cli import obsspec


def test_pull_of_a_hub_id_offline_says_how_to_turn_the_hub_on(tmp_path):
    """The hub off (the CLI's default, and the tests' HF_HUB_OFFLINE=1): nothing is
    downloaded, one line says why and how."""
    result = obsspec("models", "pull", "owner/model", "--cache-dir", str(tmp_path))
    assert result.returncode == 1 and result.stdout == ""
    assert "hub is off" in result.stderr and "HF_HUB_OFFLINE=0" in result.stderr
    assert "Traceback" not in result.stderr
    listed = obsspec("models", "list", "--json", "--cache-dir", str(tmp_path))
    assert [row["name"] for row in json.loads(listed.stdout)["models"] if not row["known"]] == []
