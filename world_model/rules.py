"""RulePredictor: commands whose output follows from the command alone.

Each rule recognises one simple, single command (no pipes, lists, substitutions or globs) and
predicts the output it prints when it succeeds, with a confidence that reflects how often it
can fail instead (a missing directory, a missing file). A wrong rule only costs a miss, never
data: speculation keeps a turn only when the prediction equals reality exactly. The source of
a prediction names its rule (e.g. "rules/cd"), so each rule's hit rate can be measured.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable

from obsspec.speculation.predictor import Prediction, SpeculationContext
from obsspec.types import ExecResult, render_observation

SOURCE = "rules"
# Anything that makes the shell expand, chain, redirect or substitute: out of the rules' depth.
UNSAFE = re.compile(r"[\n;&|`$*?\[\]{}~\\<>!#()]")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")

# Silent on success; the confidence is how rarely each fails in ordinary use.
SILENT_COMMANDS: dict[str, float] = {
    "cd": 0.9,
    "export": 0.98,
    "unset": 0.98,
    "true": 1.0,
    ":": 1.0,
    "touch": 0.9,
    "mkdir": 0.85,
    "rm": 0.85,
    "cp": 0.8,
    "mv": 0.8,
    "chmod": 0.85,
    "ln": 0.8,
}
# Flags that remove the usual reason to fail.
FORGIVING_FLAGS = {"mkdir": {"-p"}, "rm": {"-f", "-rf", "-fr"}}

Rule = Callable[[list[str]], tuple[str, str, float] | None]  # words -> (name, stdout, confidence)


def verbose(words: list[str]) -> bool:
    """-v, -av, --verbose and the like make file commands print what they do."""
    return any(
        w == "--verbose" or (w.startswith("-") and not w.startswith("--") and "v" in w)
        for w in words[1:]
    )


def silent_command(words: list[str]) -> tuple[str, str, float] | None:
    name = words[0]
    if name not in SILENT_COMMANDS or verbose(words):
        return None
    if name == "cd" and (len(words) != 2 or words[1] == "-"):  # `cd -` prints the directory
        return None
    if name == "export" and (len(words) < 2 or words[1].startswith("-")):  # lists variables
        return None
    if name in ("touch", "mkdir", "rm", "cp", "mv", "chmod", "ln") and len(words) < 2:
        return None  # a usage error
    confidence = SILENT_COMMANDS[name]
    if FORGIVING_FLAGS.get(name, set()) & set(words[1:]):
        confidence = 0.97
    return name, "", confidence


def assignments(words: list[str]) -> tuple[str, str, float] | None:
    if all(ASSIGNMENT.match(word) for word in words):
        return "assign", "", 0.99
    return None


def echo_literal(words: list[str]) -> tuple[str, str, float] | None:
    if words[0] != "echo" or (len(words) > 1 and words[1].startswith("-")):
        return None
    return "echo", " ".join(words[1:]) + "\n", 0.99


RULES: list[Rule] = [assignments, echo_literal, silent_command]


def split_simple(command: str) -> list[str] | None:
    """The words of a single simple command, or None when the shell would do more with it."""
    command = command.strip()
    if not command or UNSAFE.search(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    return words or None


class RulePredictor:
    def __init__(self, rules: list[Rule] | None = None) -> None:
        self.rules = rules if rules is not None else RULES

    async def predict(
        self, context: SpeculationContext, command: str, n: int = 1
    ) -> list[Prediction]:
        start = time.monotonic()
        words = split_simple(command)
        if words is None:
            return []
        for rule in self.rules:
            found = rule(words)
            if found is not None:
                name, stdout, confidence = found
                text = render_observation(ExecResult(stdout, "", 0, 0.0))
                return [Prediction(text, f"{SOURCE}/{name}", confidence, time.monotonic() - start)]
        return []

    def observe(self, context: SpeculationContext, command: str, observation: str) -> None:
        pass  # rules do not learn
