"""The "What happens when..." table of docs/faults.md is tests/faults.py's, row for row, and
every test it names exists (as pytest collects it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults import FAULTS, HEADER, markdown_table

ROOT = Path(__file__).parent.parent
FAULTS_PAGE = ROOT / "docs" / "faults.md"
HEADING = "# What happens when..."


def documented_table() -> list[str]:
    """The table under the heading: its lines from the header to the first non-table line."""
    lines = FAULTS_PAGE.read_text().splitlines()
    assert HEADING in lines, f"docs/faults.md has no '{HEADING}' heading"
    start = lines.index(HEADER[0], lines.index(HEADING))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def test_documented_table_is_the_fault_list():
    want = markdown_table().splitlines()
    got = documented_table()
    for index, (line, expected) in enumerate(zip(got, want, strict=False)):
        assert line == expected, (
            f"docs/faults.md row {index - 1} differs from tests/faults.py (paste the output of "
            f"`python -m tests.faults`):\n  docs: {line}\n  faults: {expected}"
        )
    assert len(got) == len(want), "run `python -m tests.faults` and paste the table"


@pytest.mark.slow
def test_every_fault_names_tests_that_exist():
    assert len({f.when for f in FAULTS}) == len(FAULTS) and all(f.tests for f in FAULTS)
    named = {test for fault in FAULTS for test in fault.tests}
    files = sorted({test.split("::")[0] for test in named})
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    collected = set(result.stdout.splitlines())
    missing = [
        test
        for test in sorted(named)
        if test not in collected and not any(c.startswith(test + "[") for c in collected)
    ]
    assert missing == [], f"tests/faults.py names tests that do not exist: {missing}"
