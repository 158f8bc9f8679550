"""The built-in procedural task suite: parameterised families of realistic terminal work.

Each family is a function `make(rng) -> GeneratedTask` registered in FAMILIES. `generate`
writes Harbor-format task directories (so one loader serves generated and hand-made tasks):

    <out>/<family>-<NNN>/
        instruction.md          what the agent is asked to do
        task.toml               timeouts, limits, [metadata] family / seed / index
        environment/Dockerfile  FROM obsspec/base:latest; runs setup/setup.sh at build time
        environment/setup/      setup.sh and the files it needs
        tests/test.sh           runs tests/check.sh, writes /logs/verifier/reward.txt (1 or 0)
        tests/check.sh          the family's check: exit 0 if and only if the task is solved
        solution/solve.sh       the reference solution, one command per line

Same seed -> byte-identical directories: every random choice comes from a Random seeded with
(seed, family, index), and nothing reads the clock or the machine.
"""

from obsspec.environments.suite.families import FAMILIES
from obsspec.environments.suite.generate import generate
from obsspec.environments.suite.registry import GeneratedTask

__all__ = ["FAMILIES", "GeneratedTask", "generate"]
