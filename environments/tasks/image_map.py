"""The image map: a task's registry base images replaced by local ones, at build time.

A machine without a container registry (an air-gapped cluster, a CI box) cannot pull the
`FROM python:3.13-slim` of a task written elsewhere. The map names a local image for it:

    --image-map python:3.13-slim=obsspec/base        (repeatable)
    OBSSPEC_IMAGE_MAP="python:3.13-slim=obsspec/base,ubuntu:24.04=obsspec/base"
    [images] map = { "python:3.13-slim" = "obsspec/base" }   (in --config)

Sources, in increasing precedence, merged entry by entry: the config's top-level [images]
map, a pipeline's own table ([collect] images.map, likewise profile and rl),
OBSSPEC_IMAGE_MAP, --image-map. The resolved map is part of the config recorded in a run
directory (manifest.json).

Matching is on the canonical reference (`python:3.13-slim`, `library/python:3.13-slim` and
`docker.io/library/python:3.13-slim` are one image; no tag means `:latest`). An exact entry
always applies; the wildcard entry `*` applies to any FROM image this machine lacks (a local
image is never replaced by `*`). The task directory is never changed: the build gets a
rewritten copy of the Dockerfile, whose other lines (the task's own RUN lines that install
what the mapped image lacks) stay as they are.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from obsspec.errors import ConfigError

WILDCARD = "*"
ENV_VAR = "OBSSPEC_IMAGE_MAP"
FLAG = "--image-map"
EXAMPLE = "python:3.13-slim=obsspec/base"


def parse_entries(entries: Iterable[str], source: str) -> dict[str, str]:
    """SRC=DST strings as a map; a malformed one is a ConfigError naming source (the flag or
    the environment variable) and the entry."""
    parsed: dict[str, str] = {}
    for entry in entries:
        src, sep, dst = (part.strip() for part in entry.partition("="))
        if not (sep and src and dst) or "=" in dst:
            raise ConfigError(f"{source}: {entry.strip()!r} is not SRC=DST (e.g. {EXAMPLE})")
        parsed[src] = dst
    return parsed


def parse_env_value(value: str) -> dict[str, str]:
    """OBSSPEC_IMAGE_MAP's value: comma-separated SRC=DST entries (empty ones ignored)."""
    return parse_entries([e for e in value.split(",") if e.strip()], ENV_VAR)


def canonical(ref: str) -> str:
    """docker.io/library/NAME:TAG form of an image reference (digests kept as they are)."""
    name, at, digest = ref.partition("@")
    first, slash, _ = name.partition("/")
    has_registry = bool(slash) and ("." in first or ":" in first or first == "localhost")
    if not has_registry:
        name = f"docker.io/{name if slash else 'library/' + name}"
    if not at and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return f"{name}{at}{digest}"


class ImageMap:
    """Source image -> local image, from the map's entries (a '*' key: the wildcard)."""

    def __init__(self, entries: Mapping[str, str] | None = None) -> None:
        self.entries = dict(entries or {})
        self._exact = {canonical(k): v for k, v in self.entries.items() if k != WILDCARD}

    def __bool__(self) -> bool:
        return bool(self.entries)

    def target(self, ref: str, exists_locally: Callable[[str], bool]) -> str | None:
        """The local image ref is mapped to, or None when it stays as is."""
        if canonical(ref) in self._exact:
            return self._exact[canonical(ref)]
        if WILDCARD in self.entries and not exists_locally(ref):
            return self.entries[WILDCARD]
        return None


# -- Dockerfiles ---------------------------------------------------------------------------

_VAR = re.compile(r"\$(?:\{(\w+)(?::?-([^}]*))?\}|(\w+))")


@dataclass(frozen=True)
class FromLine:
    """One FROM instruction: lines[start:end] of the Dockerfile (continuations included)."""

    start: int
    end: int
    flags: list[str]
    image: str  # after ARG substitution; a previous stage's name when `stage` is set
    alias: str | None
    stage: bool  # FROM <an earlier stage>: not an image

    def rewritten(self, image: str) -> str:
        alias = f" AS {self.alias}" if self.alias else ""
        return " ".join(["FROM", *self.flags, image]) + alias


def _instructions(lines: list[str]) -> Iterable[tuple[int, int, str]]:
    """(first line, end line, text) of each instruction, backslash continuations joined."""
    i = 0
    while i < len(lines):
        start, parts = i, []
        while True:
            line = lines[i].rstrip()
            i += 1
            if line.endswith("\\") and i < len(lines):
                parts.append(line[:-1])
                continue
            parts.append(line)
            break
        yield start, i, " ".join(p.strip() for p in parts).strip()


def _substitute(word: str, args: Mapping[str, str]) -> str:
    def value(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        return args.get(name) or (m.group(2) or "")

    return _VAR.sub(value, word)


def from_lines(dockerfile: str) -> list[FromLine]:
    """Every FROM of a Dockerfile, with ARG defaults declared before the first FROM
    substituted (that is where Docker takes FROM's variables from; no build args are
    passed)."""
    lines = dockerfile.splitlines()
    args: dict[str, str] = {}
    stages: set[str] = set()
    found: list[FromLine] = []
    for start, end, text in _instructions(lines):
        if not text or text.startswith("#"):
            continue
        keyword, _, rest = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "ARG" and not found:
            name, _, default = rest.strip().partition("=")
            args[name.strip()] = _substitute(default.strip().strip("\"'"), args)
        elif keyword == "FROM":
            words = rest.split()
            flags = [w for w in words if w.startswith("--")]
            plain = [w for w in words if not w.startswith("--")]
            if not plain:
                continue
            image = _substitute(plain[0], args)
            alias = plain[2] if len(plain) >= 3 and plain[1].upper() == "AS" else None
            stage = image.lower() in stages
            found.append(FromLine(start, end, flags, image, alias, stage))
            if alias:
                stages.add(alias.lower())
    return found


def base_images(dockerfile: str) -> list[str]:
    """The images a Dockerfile builds FROM (earlier stages and `scratch` left out)."""
    refs = [f.image for f in from_lines(dockerfile) if not f.stage and f.image != "scratch"]
    return list(dict.fromkeys(refs))


def rewrite(dockerfile: str, replacements: Mapping[str, str]) -> str:
    """The Dockerfile with each FROM image in replacements swapped for its local image;
    every other line unchanged."""
    lines = dockerfile.splitlines()
    for line in reversed(from_lines(dockerfile)):
        if not line.stage and line.image in replacements:
            lines[line.start : line.end] = [line.rewritten(replacements[line.image])]
    return "\n".join(lines) + "\n"
