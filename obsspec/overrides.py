"""`--set KEY=VALUE`: config keys on the command line, a layer between the file and the flags.

A config is built from layers, each a nested table merged over the one before (deep_merge:
a table merges key by key, any other value replaces): the model's defaults, the --config
file, the --set entries (Overrides), then the flags the user set. A key that both a --set
entry and a flag set is an error naming both: one command line says a thing once.

    KEY     a TOML dotted key, relative to the command's own table (for `rl`, grpo.lr is
            [rl.grpo] lr); a quoted part may hold dots: images.map."python:3.13-slim".
            obsspec.config routes a key whose first part is a shared setting (paths,
            base_image, default_model, images) to the shared settings.
    VALUE   a TOML value where the text is one (1e-6, true, [1, 2], "text", {lr = 1}),
            else the text as typed (tinypol, runs/a); dates and times stay text.

A value the model refuses, or a key it lacks, is reported as the --set entry that gave it.
"""

from __future__ import annotations

import datetime
import tomllib
import typing
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field, replace
from functools import reduce
from typing import Any

from pydantic import BaseModel

from obsspec.errors import ConfigError


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Merge nested dicts; values in `override` win. Neither input is modified."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


SET = "--set"
Key = tuple[str, ...]


@dataclass(frozen=True)
class Setting:
    """One --set entry: its key's parts (grpo.lr: ("grpo", "lr")), its value, as typed."""

    key: Key
    value: Any
    text: str


def parse_setting(entry: str) -> Setting:
    """KEY=VALUE as a Setting; ValueError (the reason) when it is not one."""
    key, equals, value = entry.partition("=")
    if not equals or not key.strip():
        raise ValueError("expected KEY=VALUE, e.g. grpo.lr=1e-6")
    return Setting(dotted_key(key.strip()), toml_value(value.strip()), entry)


def dotted_key(key: str) -> Key:
    """A TOML dotted key's parts: grpo.lr -> ("grpo", "lr"); images.map."a:1.0" keeps the
    quoted part, dots and all."""
    try:
        node: Any = tomllib.loads(f"{key} = 0")
    except tomllib.TOMLDecodeError:
        raise ValueError(
            f"{key!r} is not a dotted key such as grpo.lr (quote a part that holds other "
            'characters: images.map."python:3.13-slim")'
        ) from None
    parts = []
    while isinstance(node, dict):
        ((part, node),) = node.items()
        parts.append(part)
    return tuple(parts)


def toml_value(text: str) -> Any:
    """text as a TOML value where it is one (1e-6, true, [1, 2], "a b", {lr = 1}); any other
    text, and dates and times, stay as typed."""
    try:
        parsed = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        return text
    if list(parsed) != ["v"] or isinstance(parsed["v"], datetime.date | datetime.time):
        return text
    return parsed["v"]


def no_flag_names(key: Key) -> str | None:
    return None


@dataclass(frozen=True)
class Overrides:
    """A command line's --set entries, in order (a later entry for a key wins). flag_for
    names the flag typed on the command line that set a key, for the error when --set sets
    it too: the CLI knows its flags, the library only keys."""

    settings: tuple[Setting, ...] = ()
    flag_for: Callable[[Key], str | None] = field(default=no_flag_names, compare=False)

    @classmethod
    def parse(
        cls, entries: Iterable[str], flag_for: Callable[[Key], str | None] = no_flag_names
    ) -> Overrides:
        """The entries as typed (KEY=VALUE); a malformed one is a ConfigError naming --set."""
        settings = []
        for entry in entries:
            try:
                settings.append(parse_setting(entry))
            except ValueError as e:
                raise ConfigError(f"{SET} {entry!r}: {e}") from None
        return cls(tuple(settings), flag_for)

    def only(self, first_parts: Collection[str]) -> Overrides:
        """The entries whose key starts with one of first_parts."""
        return replace(self, settings=tuple(s for s in self.settings if s.key[0] in first_parts))

    def besides(self, first_parts: Collection[str]) -> Overrides:
        """The entries whose key starts with none of first_parts."""
        kept = tuple(s for s in self.settings if s.key[0] not in first_parts)
        return replace(self, settings=kept)

    def table(self) -> dict[str, Any]:
        """The entries as one nested table (a table value merges, as a file's does)."""
        return reduce(deep_merge, (nested(s.key, s.value) for s in self.settings), {})

    def entry_at(self, loc: Key) -> Setting | None:
        """The last entry that gave the value at loc (or a value around it), if one did."""
        node: Any = self.table()
        for part in loc:
            if not isinstance(node, dict):
                break  # an entry gave this whole value
            if part not in node:
                return None
            node = node[part]
        near = [s for s in self.settings if overlap(s.key, loc)]
        return near[-1] if loc and near else None

    def check_against(self, flags: dict[str, Any], where: str) -> None:
        """A key that an entry and a flag both set is an error naming both."""
        key = first_shared_key(self.table(), flags)
        if key is None:
            return
        entry = next(s for s in reversed(self.settings) if overlap(s.key, key))
        flag = self.flag_for(key) or "a flag"
        raise ConfigError(
            f"{SET} {entry.text} and {flag} both set {where}{'.'.join(key)}: give one of them"
        )


def nested(key: Key, value: Any) -> dict[str, Any]:
    for part in reversed(key):
        value = {part: value}
    return value


def overlap(a: Key, b: Key) -> bool:
    """One key is the other or inside it."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def first_shared_key(a: dict[str, Any], b: dict[str, Any], prefix: Key = ()) -> Key | None:
    """The first key that both nested tables give a value (tables merge, so only a value
    met by anything counts)."""
    for key in a:
        if key not in b:
            continue
        if isinstance(a[key], dict) and isinstance(b[key], dict):
            if (found := first_shared_key(a[key], b[key], (*prefix, key))) is not None:
                return found
        else:
            return (*prefix, key)
    return None


def unknown_key(model: type[BaseModel], loc: tuple[str, ...], table: str) -> str:
    """'unknown key K; the keys of [TABLE]: a, b' for the key at loc that model lacks."""
    parts = [table, *loc[:-1]] if table else list(loc[:-1])
    where = f"[{'.'.join(parts)}]" if parts else "the shared settings (this command has no table)"
    keys = table_keys(model, loc[:-1])
    known = f"; the keys of {where}: {', '.join(keys)}" if keys else f" in {where}"
    return f"unknown key '{'.'.join(loc)}'{known}"


def table_keys(model: type[BaseModel], path: tuple[str, ...]) -> list[str]:
    """The keys of the table at path in model ([] where there is no such table)."""
    for part in path:
        info = model.model_fields.get(part)
        annotation = info.annotation if info else None
        nested = [
            a
            for a in (annotation, *typing.get_args(annotation))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if not nested:
            return []
        model = nested[0]
    return list(model.model_fields)
