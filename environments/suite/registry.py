"""The family registry: what a family produces (GeneratedTask) and the table of families.

A leaf module: family modules import it to register themselves, and nothing here imports a
family, so the families and the writer (environments.suite.generate) never import each other
in a circle.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class GeneratedTask:
    """One task as a family produces it, before it is written to disk."""

    instruction: str
    setup_sh: str  # bash, run as root in /tmp/setup at image build time (no network)
    check_sh: str  # bash, run after the agent phase: exit 0 if and only if solved
    solution: list[str]  # the reference solution: one shell command per entry, one line each
    setup_files: dict[str, str | bytes] = field(default_factory=dict)  # next to setup.sh
    test_files: dict[str, str | bytes] = field(default_factory=dict)  # next to check.sh
    agent_timeout_s: int = 900
    verifier_timeout_s: int = 180


Family = Callable[[random.Random], GeneratedTask]
FAMILIES: dict[str, Family] = {}  # filled as environments.suite.families imports its modules


def family(name: str) -> Callable[[Family], Family]:
    """Register a family under `name` (decorator)."""

    def register(fn: Family) -> Family:
        FAMILIES[name] = fn
        return fn

    return register
