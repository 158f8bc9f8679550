"""Helpers shared by the task families: word lists, JSON specs and the two task shapes.

Every family draws its parameters from `rng`, then builds its task in one of two shapes:

- `_spec_task`: setup and check are small Python scripts (stdlib only, they run in the task
  image) that read a JSON spec: setup builds the starting state from it, check recomputes
  what the solved state must be.
- `_data_task`: bulky inputs are made at image build time by a small seeded script, gen.py,
  shipped in setup/; the check ships it again in tests/, rebuilds a pristine copy and
  recomputes the answer.

Either way task directories stay small, and checks never trust anything the agent could have
edited.
"""

from __future__ import annotations

import datetime as dt
import json
import random

from obsspec.environments.suite.registry import GeneratedTask

PROJECT_NAMES = [
    "atlas",
    "beacon",
    "quartz",
    "harbor",
    "meridian",
    "nimbus",
    "orchid",
    "pylon",
    "tundra",
    "vertex",
    "willow",
    "cobalt",
    "juniper",
    "lattice",
    "sextant",
]
# Filler vocabulary for sample texts, docs and commit contents.
_WORDS_TEXT = """
the of and to in is was for on with as by at from that this data line file system value
error server client request report table index window signal market river mountain garden
letter winter summer yellow purple engine station network battery shadow silver golden
market harbor island forest valley orbit comet planet rocket paper pencil answer question
number simple complex random method object result
"""
WORDS = _WORDS_TEXT.split()


def _json(obj: object) -> str:
    return json.dumps(obj, indent=1, sort_keys=True) + "\n"


def _data_task(
    instruction: str, gen: str, check: str, params: dict, solution: list[str]
) -> GeneratedTask:
    """A task whose input is written by `gen` at build time and re-derived by `check`."""
    return GeneratedTask(
        instruction=instruction,
        setup_sh="python3 gen.py params.json\n",
        check_sh="python3 /tests/check.py\n",
        solution=solution,
        setup_files={"gen.py": gen, "params.json": _json(params)},
        test_files={"gen.py": gen, "check.py": check, "params.json": _json(params)},
    )


# Prepended to every check script: load the spec next to it, fail with a message.
CHECK_HEAD = r'''import json, os, random, sys
HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "spec.json")) as f:
    SPEC = json.load(f)


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def files_under(root):
    """Relative paths of everything that is not a directory under root."""
    found = set()
    for dirpath, dirnames, names in os.walk(root):
        found.update(os.path.relpath(os.path.join(dirpath, n), root) for n in names)
    return found


def expect_tree(root, expected):
    """Fail unless root holds exactly the expected regular files (rel -> bytes)."""
    found = files_under(root)
    missing, extra = sorted(set(expected) - found), sorted(found - set(expected))
    if missing:
        fail(f"{root}: missing {len(missing)} files, e.g. {missing[:3]}")
    if extra:
        fail(f"{root}: unexpected files, e.g. {extra[:3]}")
    for rel in sorted(expected):
        path = os.path.join(root, rel)
        if os.path.islink(path) or not os.path.isfile(path):
            fail(f"{path} is not a regular file")
        with open(path, "rb") as f:
            if f.read() != expected[rel]:
                fail(f"{path} does not have the expected content")
'''


def _spec_task(
    instruction: str,
    solution: list[str],
    setup_py: str,
    check_py: str,
    setup_spec: dict,
    check_spec: dict,
    setup_sh: str = "",
) -> GeneratedTask:
    """A task whose setup and check are Python scripts driven by JSON specs (setup_sh: shell
    commands to run before setup.py)."""
    return GeneratedTask(
        instruction=instruction,
        setup_sh=setup_sh + "python3 setup.py\n",
        check_sh='python3 "$(dirname "$0")/check.py"\n',
        solution=solution,
        setup_files={"setup.py": setup_py, "spec.json": _json(setup_spec)},
        test_files={"check.py": CHECK_HEAD + check_py, "spec.json": _json(check_spec)},
    )


def _random_date(rng: random.Random, first: dt.date, last: dt.date) -> dt.date:
    return dt.date.fromordinal(rng.randint(first.toordinal(), last.toordinal()))
