"""New content: the lines of an observation that its context never showed.

    new_lines("a1b2c3d4  data.csv\n[exit code: 0]", context_text)   # ["a1b2c3d4  data.csv"]

A world model predicts from its context alone: the task, the commands so far and what they
printed. A line of at least MIN_CHARS characters that appears nowhere in that context is
content the model has to know or compute without having seen it: a file read for the first
time, a checksum, a count over generated data, a repository's hashes. The evaluation splits
its match rates by it (`by_content`), so a report shows how much of the miss rate is there.

A diagnostic, not a proof that a line is unknowable: a computed line (a sum, a sorted list,
`wc -l` of a file shown before) is new and yet predictable, and a short line ("ok", "3") is
never counted as new, since it appears somewhere in almost any context. The status line (the
exit code) and "(no output)" are the format's, never new.
"""

from __future__ import annotations

from obsspec.types import NO_OUTPUT

MIN_CHARS = 8  # shorter lines are too common to say anything


def new_lines(observation: str, context_text: str) -> list[str]:
    """The observation's lines (its status line aside) that the context does not contain."""
    body = observation.rpartition("\n")[0]  # the status line is always the last
    if body == NO_OUTPUT:
        return []
    return [
        line
        for line in body.split("\n")
        if len(line.strip()) >= MIN_CHARS and line.strip() not in context_text
    ]


def has_new_content(observation: str, context_text: str) -> bool:
    return bool(new_lines(observation, context_text))
