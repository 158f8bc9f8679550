"""What happens when... a task author is hostile, or an agent looks for a reward it did not
earn: the rows of the fault table (tests/faults.py, docs/faults.md) for what the verifier,
task files, task image builds, rewards, `--overwrite`, disk and terminal output withstand.

Kept apart from tests/faults.py only to keep each file readable; the table is one.
"""

from __future__ import annotations

from tests.fault_row import Fault

HOSTILE_FAULTS: list[Fault] = [
    # --- the verifier and its rewards ---
    # --- task files and terminal output ---
    # --- task image builds ---
    # --- --overwrite ---
    # --- disk and memory limits ---
    # --- smaller ones ---
]
