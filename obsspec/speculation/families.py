"""A command line's family: the program it is mainly about (`cd src && make -j4` -> make).
The gate learns command lengths and hit rates per family, and profiles break results down by it."""

from __future__ import annotations

import re
import shlex

_NUMBER = re.compile(r"[0-9.]+[smhd]?")
# Words that run another command: the family is that command's.
_WRAPPERS = {"sudo", "time", "env", "nice", "nohup", "timeout", "command", "exec", "xargs"}


def command_family(command: str) -> str:
    """The program a command line is mainly about: `cd src && make -j4` -> make,
    `LC_ALL=C sort f | uniq` -> sort, `sudo apt-get install x` -> apt-get."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:  # unbalanced quotes: the first word is still a fair guess
        words = command.split()
    segments: list[list[str]] = [[]]
    for word in words:
        if word in {"&&", "||", ";", "|"}:
            segments.append([])
        else:
            segments[-1].append(word)
    for segment in segments:
        family = _program(segment)
        if family and family != "cd":
            return family
    return _program(segments[0]) or "(empty)"


def _program(words: list[str]) -> str:
    """The first word that is not an assignment, a wrapper, an option or a wrapper's number
    (`timeout 5 cmd`, `nice -n 10 cmd`)."""
    for word in words:
        if "=" in word.split("/")[0] or word in _WRAPPERS or word.startswith("-"):
            continue
        if _NUMBER.fullmatch(word):
            continue
        return word.rsplit("/", 1)[-1]
    return ""
