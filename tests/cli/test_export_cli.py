"""`obsspec export` as a script runs it: exit codes, one error line, one JSON object."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from obsspec.cli.export import render
from tests.cli.test_cli import obsspec
from tests.rollout.test_export import MD, standard_rows, tampered_rows, write_run


@pytest.fixture(scope="module")
def run(tmp_path_factory, builder):
    rows = standard_rows(builder, MD) + tampered_rows(builder)
    return write_run(tmp_path_factory.mktemp("export") / "run", rows, MD)


def test_json_summary_then_an_existing_out_needs_overwrite(tmp_path, run):
    out = tmp_path / "sft.parquet"
    done = obsspec(
        "export", str(run), "--format", "verl-parquet", "--out", str(out), "--skip-unverified",
        "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["status"] == "ok" and summary["format"] == "verl-parquet"
    assert (summary["episodes"], summary["exported"], summary["skipped_broken"]) == (6, 3, 1)
    assert summary["unverified"] == 2 and len(summary["unverified_examples"]) == 2
    assert pq.read_table(out).num_rows == 3
    written = out.read_bytes()

    again = obsspec("export", str(run), "--format", "openai-jsonl", "--out", str(out))
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.splitlines() == [
        f"error: --out {out} exists",
        "hint: use --overwrite to replace it, or another --out",
    ]
    assert out.read_bytes() == written


def test_the_summary_line(capsys):
    summary = {
        "out": "o.jsonl", "format": "sharegpt", "episodes": 6, "exported": 3,
        "skipped_broken": 1, "skipped_by_filter": 0, "unverified": 2,
        "task_text": {"task set": 2, "prompt ids": 1},
        "unverified_examples": ["task a episode 1: why"], "pushed": "https://hub/me/data",
    }  # fmt: skip
    render(summary)
    assert capsys.readouterr().out.splitlines() == [
        "exported 3 of 6 episodes to o.jsonl (sharegpt); 1 broken (infrastructure error or "
        "no reply), 0 left out by the filters, 2 unverified (skipped); task text: 1 from the "
        "prompt ids, 2 from the task set",
        "  unverified: task a episode 1: why",
        "pushed to https://hub/me/data",
    ]


def test_bad_inputs_are_one_line_errors(tmp_path, run):
    """Each fails before the tokenizer is loaded (a second or so each)."""
    out = str(tmp_path / "o.jsonl")
    unknown = obsspec("export", str(run), "--format", "alpaca", "--out", out)
    assert unknown.returncode == 2 and "--format" in unknown.stderr

    missing = obsspec("export", str(tmp_path / "nowhere"), "--format", "sharegpt", "--out", out)
    assert missing.returncode == 1
    assert missing.stderr.splitlines()[0] == (
        f"error: RUN {tmp_path / 'nowhere'}: no such run directory"
    )

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    unwritable = obsspec(
        "export", str(run), "--format", "sharegpt", "--out", str(blocked / "o.jsonl"), "--json"
    )
    assert unwritable.returncode == 1
    outcome = json.loads(unwritable.stdout)
    assert outcome["status"] == "error" and "cannot write there" in outcome["error"]

    offline = obsspec(  # the tests run with HF_HUB_OFFLINE=1
        "export", str(run), "--format", "sharegpt", "--out", out, "--push-to-hub", "me/data"
    )
    assert offline.returncode == 1
    assert "the hub cannot be reached: offline mode" in offline.stderr
    assert "Traceback" not in offline.stderr
    assert not (tmp_path / "o.jsonl").exists()  # refused before anything was written
