"""What a verifier script fetches when it runs, read from its text (never run).

Public Harbor and Terminal-Bench 1 verifiers install their test runner at verify time:

    curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
    uvx --with pytest==8.4.1 --with pytest-json-ctrf==0.3.5 pytest ...      (Harbor)
    uv venv .tbench-testing; uv pip install pytest==8.4.1; uv run pytest     (TB v1)

`read_needs` finds, in the script and the requirement files it names: whether it uses uv (a
uv or uvx command, or uv's installer fetched with curl or wget) and which version the
installer's URL pins; the Python packages it installs (uvx/`uv tool run` --with and --from
and the tool itself, `uv pip install`, `uv add`, `uv run --with`, `pip install`, `python -m
pip install`, `-r FILE`); the Python it asks uv for (`-p 3.13`); the Debian packages it
installs. Shell syntax is cut with shlex, a command at a time (`;`, `&&`, `|`, `if ... then`),
after joining continued lines; a line shlex cannot read (an open quote) is split on spaces.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

# uv's installer: astral.sh/uv/install.sh (the newest) or astral.sh/uv/<version>/install.sh,
# and the same script attached to uv's GitHub releases.
UV_INSTALLER = re.compile(
    r"^https?://(?:astral\.sh/uv(?:/(?P<version>\d[\w.+-]*))?/install\.sh"
    r"|github\.com/astral-sh/uv/releases/(?:download/(?P<gh_version>\d[\w.+-]*)"
    r"|latest/download)/uv-installer\.sh)$"
)
# A requirement as pip and uv take it: a name, extras, a version specifier; not a path or URL.
REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]*\])?(\s*[=<>!~].*)?$")
TOOL_SPEC = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)@(?P<version>\d[\w.+-]*)$")
SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "|&", ";;", "{", "}"}
KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "time"}
WRAPPERS = {"sudo", "exec", "env", "command", "nohup", "timeout"}
TEST_DIR_PREFIXES = ("/tests/", "$TEST_DIR/", "${TEST_DIR}/", "$TEST_DIR", "${TEST_DIR}")

# Options that take a value, per command family (a flag not listed takes none).
PIP_VALUE_OPTIONS = {
    "-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-i", "--index-url",
    "--extra-index-url", "-f", "--find-links", "-t", "--target", "--prefix", "--root",
    "--platform", "--python-version", "--implementation", "--abi", "--only-binary",
    "--no-binary", "--upgrade-strategy", "--cache-dir", "--src", "--python", "-p",
    "--index", "--default-index", "--group", "--extra", "--optional", "--package",
    "--overrides", "--override", "--directory", "--project", "--config-file", "--log",
    "--progress-bar", "--timeout", "--retries", "--trusted-host", "--exists-action",
    "--root-user-action", "--resolution", "--prerelease", "--exclude-newer",
    "--link-mode", "--color", "--python-platform", "--keyring-provider", "--index-strategy",
    "--reinstall-package", "--upgrade-package", "-P", "--tag", "--branch", "--rev",
    "--build-constraint", "-b", "--constraints", "--compile-bytecode", "--bounds", "--script",
}  # fmt: skip
TOOL_VALUE_OPTIONS = PIP_VALUE_OPTIONS | {
    "--with", "-w", "--with-editable", "--with-requirements", "--from", "--env-file",
}  # fmt: skip


@dataclass(frozen=True)
class KitNeeds:
    """What one verifier fetches; empty when it fetches nothing the kit serves."""

    uv: bool = False  # it runs uv or uvx, or fetches uv's installer
    uv_version: str | None = None  # the version the installer's URL pins
    requirements: tuple[str, ...] = ()  # Python packages it installs, as written
    python: str | None = None  # a Python it asks uv for (uvx -p 3.13)
    apt_packages: tuple[str, ...] = ()  # Debian packages it installs
    unread: tuple[str, ...] = ()  # requirement files it names that are not in tests/

    @property
    def served(self) -> bool:
        """Whether the kit has something for this verifier."""
        return self.uv or bool(self.requirements)

    def as_dict(self) -> dict:
        return {
            "uv": self.uv,
            "uv_version": self.uv_version,
            "requirements": list(self.requirements),
            "python": self.python,
            "apt_packages": list(self.apt_packages),
            "unread": list(self.unread),
        }


@dataclass
class _Found:
    uv: bool = False
    uv_version: str | None = None
    requirements: list[str] = field(default_factory=list)
    python: str | None = None
    apt: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)


def read_needs(script: Path, tests_dir: Path | None = None) -> KitNeeds:
    """What the verifier script `script` fetches; `-r FILE` under /tests (or $TEST_DIR) is
    read from tests_dir."""
    return needs_of_text(script.read_text(errors="replace"), tests_dir)


def needs_of_text(text: str, tests_dir: Path | None = None) -> KitNeeds:
    found = _Found()
    for command in commands(text):
        read_command(command, found, tests_dir)
    return KitNeeds(
        uv=found.uv,
        uv_version=found.uv_version,
        requirements=tuple(dict.fromkeys(found.requirements)),
        python=found.python,
        apt_packages=tuple(dict.fromkeys(found.apt)),
        unread=tuple(dict.fromkeys(found.unread)),
    )


def commands(text: str) -> list[list[str]]:
    """The simple commands of a script: each a list of words, separators and leading
    keywords, assignments and wrappers (sudo, env) removed."""
    joined = re.sub(r"\\\r?\n", " ", text)
    found: list[list[str]] = []
    for line in joined.splitlines():
        current: list[str] = []
        wrapped = False  # after sudo, env...: their options are not the command either
        for word in words(line):
            if word in SEPARATORS:
                found.append(current)
                current, wrapped = [], False
            elif current or not (skippable(word) or (wrapped and word.startswith("-"))):
                current.append(word)
            else:
                wrapped = wrapped or word in WRAPPERS
        found.append(current)
    return [c for c in found if c]


def words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:  # an open quote: the words as the line shows them
        return line.split("#", 1)[0].split()


def skippable(word: str) -> bool:
    """Words before a command's name: keywords, VAR=value, wrappers."""
    return word in KEYWORDS or word in WRAPPERS or bool(re.match(r"^[A-Za-z_]\w*=", word))


def read_command(words_: list[str], found: _Found, tests_dir: Path | None) -> None:
    name, args = Path(words_[0]).name, words_[1:]
    if name in ("curl", "wget"):
        read_download(args, found)
    elif name == "uvx":
        found.uv = True
        read_tool_run(args, found, tests_dir)
    elif name == "uv":
        found.uv = True
        read_uv(args, found, tests_dir)
    elif re.fullmatch(r"pip3?(\.\d+)?", name):
        if args[:1] == ["install"]:
            read_install(args[1:], found, tests_dir)
    elif re.fullmatch(r"python3?(\.\d+)?", name) and args[:3] == ["-m", "pip", "install"]:
        read_install(args[3:], found, tests_dir)
    elif name in ("apt-get", "apt") and "install" in args:
        after = args[args.index("install") + 1 :]
        found.apt += [a.split("=", 1)[0] for a in after if not a.startswith("-")]


def read_download(args: list[str], found: _Found) -> None:
    for arg in args:
        match = UV_INSTALLER.match(arg)
        if match:
            found.uv = True
            found.uv_version = match.group("version") or match.group("gh_version")


def read_uv(args: list[str], found: _Found, tests_dir: Path | None) -> None:
    positional = [a for a in args if not a.startswith("-")]
    if args[:2] == ["pip", "install"]:
        read_install(args[2:], found, tests_dir)
    elif args[:1] == ["add"]:
        read_install(args[1:], found, tests_dir)
    elif args[:2] in (["tool", "run"], ["tool", "install"]):
        read_tool_run(args[2:], found, tests_dir)
    elif positional[:1] in (["run"], ["venv"]):
        read_python(args, found)
        for option, value in option_values(args, TOOL_VALUE_OPTIONS):
            if option in ("--with", "-w"):
                found.requirements += split_with(value)


def read_tool_run(args: list[str], found: _Found, tests_dir: Path | None) -> None:
    """uvx's (and `uv tool run`'s) options, then the tool: its package is --from or the
    command's name (`pytest@8.4.1` pins it)."""
    read_python(args, found)
    source = None
    i = 0
    while i < len(args):
        arg = args[i]
        option, value, i = next_option(args, i, TOOL_VALUE_OPTIONS)
        if option is None:  # the tool's command; what follows is its own arguments
            tool = TOOL_SPEC.match(arg)
            name = f"{tool['name']}=={tool['version']}" if tool else arg
            if REQUIREMENT.match(source or name):
                found.requirements.append(source or name)
            return
        if option in ("--with", "-w"):
            found.requirements += split_with(value)
        elif option == "--from":
            source = value
        elif option == "--with-requirements":
            read_requirement_file(value, found, tests_dir)


def read_install(args: list[str], found: _Found, tests_dir: Path | None) -> None:
    i = 0
    while i < len(args):
        arg = args[i]
        option, value, i = next_option(args, i, PIP_VALUE_OPTIONS)
        if option in ("-r", "--requirement"):
            read_requirement_file(value, found, tests_dir)
        elif option is None and REQUIREMENT.match(arg):
            found.requirements.append(arg)
        elif option in ("-p", "--python"):
            found.python = value


def read_python(args: list[str], found: _Found) -> None:
    for option, value in option_values(args, TOOL_VALUE_OPTIONS):
        if option in ("-p", "--python"):
            found.python = value


def next_option(args: list[str], i: int, takes_value: set[str]) -> tuple[str | None, str, int]:
    """(option, its value, the next index) at args[i]; (None, '', i + 1) for a positional."""
    arg = args[i]
    if not arg.startswith("-") or arg == "-":
        return None, "", i + 1
    if arg.startswith("--") and "=" in arg:
        option, value = arg.split("=", 1)
        return option, value, i + 1
    if arg in takes_value:
        return arg, args[i + 1] if i + 1 < len(args) else "", i + 2
    if len(arg) > 2 and arg[:2] in takes_value and not arg.startswith("--"):
        return arg[:2], arg[2:], i + 1  # -wpytest, -p3.13
    return arg, "", i + 1


def option_values(args: list[str], takes_value: set[str]) -> list[tuple[str, str]]:
    found = []
    i = 0
    while i < len(args):
        option, value, i = next_option(args, i, takes_value)
        if option is not None:
            found.append((option, value))
    return found


def split_with(value: str) -> list[str]:
    """--with a,b is two packages; --with 'a>=1,<2' is one."""
    return [part.strip() for part in re.split(r",(?=\s*[A-Za-z])", value) if part.strip()]


def read_requirement_file(path: str, found: _Found, tests_dir: Path | None) -> None:
    """A requirements file the verifier names: read from the task's tests/ when it lies
    under /tests or $TEST_DIR; another is recorded as unread."""
    local = tests_path(path, tests_dir)
    if local is None or not local.is_file():
        found.unread.append(path)
        return
    read_requirement_lines(local, path, found, tests_dir)


def read_requirement_lines(local: Path, shown: str, found: _Found, tests_dir: Path) -> None:
    """The requirements in file `local`; `-r OTHER` in it is relative to it, and read only
    while it stays inside tests_dir."""
    for line in local.read_text(errors="replace").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            ref = line.split(None, 1)[1]
            nested = (local.parent / ref).resolve()
            shown_ref = f"{shown.rsplit('/', 1)[0]}/{ref}"
            if nested.is_relative_to(tests_dir.resolve()) and nested.is_file():
                read_requirement_lines(nested, shown_ref, found, tests_dir)
            else:
                found.unread.append(shown_ref)
        elif line and REQUIREMENT.match(line):
            found.requirements.append(line)


def tests_path(path: str, tests_dir: Path | None) -> Path | None:
    if tests_dir is None:
        return None
    for prefix in TEST_DIR_PREFIXES:
        if path.startswith(prefix):
            rest = path[len(prefix) :].lstrip("/")
            local = (tests_dir / rest).resolve()
            return local if local.is_relative_to(tests_dir.resolve()) else None
    return None
