"""Typed settings shared by every command, and the loading that all configs use.

Settings come from, in increasing precedence: defaults, a TOML or YAML file given with
`--config`, `--set KEY=VALUE` entries (Overrides), and flags the user actually set; a key
given both by --set and by a flag is an error naming both. Nothing is read from ad-hoc
environment variables; the CLI edge resolves the home directory and passes concrete paths in.

A --set KEY names a key of the command's own table (for `rl`, grpo.lr is [rl.grpo] lr) or,
where its first part is one (paths, base_image, default_model, images), a shared setting; a
command without a table takes only shared ones. `images` is both for the commands whose table
has it (collect, rl, profile): the shared map is their table's default. How entries are
parsed, and reported when a model refuses one: obsspec.overrides.
"""

from __future__ import annotations

import re
import tomllib
import warnings
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from obsspec.errors import ConfigError
from obsspec.overrides import SET, Overrides, deep_merge, unknown_key

DEFAULT_BASE_IMAGE = "obsspec/base:latest"
DEFAULT_MODEL = "smollm2-135m-instruct"

# Top-level tables of a config file that belong to one pipeline's own config model.
PIPELINE_SECTIONS = ("collect", "train_wm", "sft", "rl", "profile")


def default_cache_dir() -> Path:
    """Where pulled models and other downloaded artefacts live unless told otherwise."""
    return Path.home() / ".cache" / "obsspec"


# A set of CPU cores as Linux writes it (cpusets, taskset): '1', '0-3', '0,2-3'.
CORE_LIST = r"^\d+(-\d+)?(,\d+(-\d+)?)*$"


# The same as a field type: a bare number is one core (`--set engine.cpu_cores=0`, which the
# shell hands over without the quotes a TOML string would need).
def _core_list(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and not re.fullmatch(CORE_LIST, value):
        raise ValueError(f"{value!r} is not a list of CPU cores (e.g. '1', '0-3' or '0,2-3')")
    return value


CoreList = Annotated[str, BeforeValidator(_core_list)]


class StrictModel(BaseModel):
    """Base for every config model: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class PathsConfig(StrictModel):
    cache_dir: Path = Field(
        default_factory=default_cache_dir,
        description="Directory for pulled models and other cached artefacts.",
    )

    @property
    def models_dir(self) -> Path:
        return self.cache_dir / "models"


class ImagesConfig(StrictModel):
    map: dict[str, str] = Field(
        default_factory=dict,
        description="A task's FROM (or docker_image) image -> the local image to use instead, "
        "e.g. {'python:3.13-slim' = 'obsspec/base'}; '*' maps every image this machine "
        "lacks. Also --image-map SRC=DST and OBSSPEC_IMAGE_MAP (environments.tasks.image_map).",
    )


class GlobalConfig(StrictModel):
    """Settings every command shares; pipelines embed it in their own config."""

    paths: PathsConfig = Field(default_factory=PathsConfig, description="Where things live.")
    base_image: str = Field(
        default=DEFAULT_BASE_IMAGE, description="Docker image tag of the sandbox base image."
    )
    default_model: str = Field(
        default=DEFAULT_MODEL, description="Model used when a command is not given one."
    )
    images: ImagesConfig = Field(
        default_factory=ImagesConfig, description="Local images for tasks' registry images."
    )


YAML_SUFFIXES = (".yaml", ".yml")


def read_config_file(path: Path) -> dict[str, Any]:
    """A --config file: YAML for .yaml and .yml, else TOML, with the same structure (each
    table a top-level mapping). Every failure is a ConfigError that names the file."""
    try:
        text = utf8_text(path.read_bytes(), path)
        if path.suffix.lower() in YAML_SUFFIXES:
            return read_yaml(text, path)
        return tomllib.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path} is not valid TOML: {e}") from e
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read: {e.strerror}") from e


def utf8_text(data: bytes, path: Path) -> str:
    """A config file's text; TOML and our YAML are UTF-8, and a byte that is not names its
    offset and line (a file saved in Latin-1, a binary given by mistake)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(
            f"config file {path} is not UTF-8 text: byte {e.start} (line {line}) is "
            f"{data[e.start]:#04x}",
            hint="save it as UTF-8",
        ) from None


def read_yaml(stream: Any, path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(stream)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or " ".join(str(e).split())
        raise ConfigError(f"config file {path} is not valid YAML: {problem}{where}") from e
    if data is None:  # an empty file, as an empty TOML file
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {path}: the top level must be a mapping of tables "
            f"(rl:, collect:, ...), not a {type(data).__name__}"
        )
    return data


M = TypeVar("M", bound=BaseModel)


class ConfigDeprecationWarning(FutureWarning):
    """A config key that still works but has moved; the CLI prints it once on stderr."""


def move_deprecated_keys(data: Any, keys: tuple[str, ...], *, section: str, into: str) -> Any:
    """`data` with each of `keys` moved from the top level into the `into` table (a value
    already there wins), each with a ConfigDeprecationWarning naming the new key."""
    if not isinstance(data, dict) or not any(key in data for key in keys):
        return data
    data = dict(data)
    table = data.get(into, {})
    if isinstance(table, BaseModel):  # built in code, not read from a file
        table = table.model_dump()
    table = dict(table) if isinstance(table, dict) else table
    for key in keys:
        if key not in data:
            continue
        value = data.pop(key)
        warnings.warn(
            f"[{section}] {key} is deprecated; use [{section}.{into}] {key}",
            ConfigDeprecationWarning,
            stacklevel=2,
        )
        if isinstance(table, dict):
            table.setdefault(key, value)
    data[into] = table
    return data


def validate_config(
    model: type[M],
    data: dict[str, Any],
    source: str,
    sets: Overrides | None = None,
    table: str = "",
) -> M:
    """Build `model` from `data`, naming the source and the offending field on failure; a
    field that a --set entry gave is reported as that entry (`table`: where the model is
    read from, for the message; "" for the shared settings)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = tuple(str(p) for p in first["loc"])
        field = ".".join(loc) or "(top level)"
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        entry = sets.entry_at(loc) if sets else None
        if entry is None:
            raise ConfigError(f"{source}: field '{field}': {first['msg']}{more}") from e
        if first["type"] != "extra_forbidden":
            raise ConfigError(f"{SET} {entry.text}: field '{field}': {first['msg']}{more}") from e
        raise ConfigError(f"{SET} {entry.text}: {unknown_key(model, loc, table)}{more}") from e


def first_difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The first differing key of two nested dicts, as "a.b: <old> there, <new> now"."""
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            if isinstance(old.get(key), dict) and isinstance(new.get(key), dict):
                inner = first_difference(old[key], new[key])
                return f"{key}.{inner}"
            return f"{key}: {old.get(key)!r} there, {new.get(key)!r} now"
    return "no difference"


def load_global_config(
    config_file: Path | None = None,
    overrides: dict[str, Any] | None = None,
    sets: Overrides | None = None,
    *,
    table: str | None = None,
) -> GlobalConfig:
    """Defaults, then the file's keys, then --set's, then flag overrides (only those the
    user set). `table`: the command's own table, whose loader takes the --set keys that are
    not shared settings; None: every --set key must be a shared one."""
    data: dict[str, Any] = read_config_file(config_file) if config_file else {}
    unknown = sorted(set(data) - set(GlobalConfig.model_fields) - set(PIPELINE_SECTIONS))
    if unknown:
        allowed = ", ".join([*GlobalConfig.model_fields, *PIPELINE_SECTIONS])
        raise ConfigError(f"{config_file}: unknown key '{unknown[0]}' (allowed: {allowed})")
    known = {k: v for k, v in data.items() if k in GlobalConfig.model_fields}
    sets = sets or Overrides()
    shared = sets if table is None else sets.only(GlobalConfig.model_fields)
    shared.check_against(overrides or {}, "")
    merged = deep_merge(deep_merge(known, shared.table()), overrides or {})
    source = str(config_file) if config_file else "flags"
    return validate_config(GlobalConfig, merged, source, shared)


def load_pipeline_config(
    model: type[M],
    section: str,
    config_file: Path | None,
    flags: dict[str, Any],
    *,
    required: dict[str, str] | None = None,
    defaults: dict[str, Any] | None = None,
    sets: Overrides | None = None,
) -> M:
    """`defaults` < the `[section]` table of config_file (if any) < `sets` < the flags the
    user set.

    `required` maps settings that have no default to the flag that gives them, so a missing
    one is reported as the flag the user should pass. `defaults` are values known only at
    run time (such as the global config's default model). Of `sets`, this takes the keys of
    the section and the unknown ones (an error), not the shared settings' (load_global_config).
    """
    data: dict[str, Any] = {}
    if config_file is not None:
        data = read_config_file(config_file).get(section, {})
        if not isinstance(data, dict):
            raise ConfigError(f"{config_file}: '{section}' must be a table")
    own = (sets or Overrides()).besides(set(GlobalConfig.model_fields) - set(model.model_fields))
    own.check_against(flags, f"[{section}] ")
    merged = deep_merge(deep_merge(deep_merge(defaults or {}, data), own.table()), flags)
    for key, flag in (required or {}).items():
        if merged.get(key) in (None, [], ""):
            raise ConfigError(f"{flag} is required (or set {section}.{key} in --config)")
    source = f"{config_file} [{section}] and flags" if config_file else "flags"
    return validate_config(model, merged, source, own, section)
