"""The history of the git-bisect task's repository, generated on the host as build steps.

A small project evolves the way real ones do: everyday commits by several authors (changelog,
docs, settings, scripts, CLI options, README), releases with annotated tags, an unmerged
feature branch, and one commit that breaks the tested module (marked "bad"). The steps go to
history.json; build_repo.py (environments.suite.families.git_bisect) replays them with fixed
dates, so a rebuild gives the same hashes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from obsspec.environments.suite.families._common import WORDS
from obsspec.environments.suite.families._py_modules import Bug, PyModule, _buggy, _module_test

GIT_AUTHORS = [
    ("Alice Martin", "alice@example.com"),
    ("Bob Chen", "bob@example.com"),
    ("Carla Diaz", "carla@example.com"),
    ("Dev Patel", "dev@example.com"),
    ("Emma Larsen", "emma@example.com"),
]
GIT_SECONDS = 0.4  # one test run; a bisect (4-6 runs) measured 1.5-3.5 s on one CPU
CHANGELOG_ITEMS = [
    "Improve error messages for bad input",
    "Speed up start-up",
    "Document the config file",
    "Add a --quiet flag",
    "Drop support for Python 3.8",
    "Log the effective settings",
    "Clarify the README",
    "Retry failed uploads",
    "Validate configuration at start-up",
    "Show progress for long jobs",
    "Make output deterministic",
    "Add shell completion",
    "Respect NO_COLOR",
    "Report timings in milliseconds",
    "Handle empty input files",
]
DOC_TOPICS = [
    "deployment",
    "configuration",
    "logging",
    "testing",
    "releasing",
    "architecture",
    "troubleshooting",
    "contributing",
    "security",
    "performance",
]
SETTINGS = {
    "timeout_s": ["10", "30", "60"],
    "retries": ["1", "3", "5"],
    "log_level": ["info", "debug", "warning"],
    "workers": ["2", "4", "8"],
    "batch_size": ["100", "500", "1000"],
    "cache_dir": ["/var/cache/app", "/tmp/app"],
}
SCRIPTS = {
    "lint": "python3 -m pyflakes . || true",
    "release": "git tag -l | tail -n 1",
    "bootstrap": "python3 -m venv .venv",
    "bench": "python3 -m timeit -n 1000 'pass'",
    "clean": "find . -name __pycache__ -prune -exec rm -rf {} +",
}
CLI_OPTIONS = ["verbose", "dry-run", "output", "format", "limit", "quiet", "config", "since"]


@dataclass
class _History:
    """The repository while its history is being generated on the host."""

    rng: random.Random
    proj: str
    pkg: str
    clock: datetime
    steps: list[dict] = field(default_factory=list)
    changelog: list[str] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)
    options: list[str] = field(default_factory=list)
    version: list[int] = field(default_factory=lambda: [1, 0, 0])
    docs: dict[str, str] = field(default_factory=dict)
    scripts: set[str] = field(default_factory=set)
    about: list[str] = field(default_factory=list)

    def _stamp(self) -> tuple[list[str], str]:
        self.clock += timedelta(minutes=self.rng.randrange(20, 1800))
        return list(self.rng.choice(GIT_AUTHORS)), self.clock.isoformat() + "+00:00"

    def commit(self, message: str, files: dict[str, str], mark: str | None = None) -> None:
        author, when = self._stamp()
        step = {"op": "commit", "message": message, "author": author, "date": when, "files": files}
        if mark:
            step["mark"] = mark
        self.steps.append(step)

    def tag(self, name: str) -> None:
        author, when = self._stamp()
        self.steps.append(
            {
                "op": "tag",
                "name": name,
                "message": f"Release {name[1:]}",
                "author": author,
                "date": when,
            }
        )

    def switch(self, op: str, name: str) -> None:
        self.steps.append(
            {
                "op": op,
                "name": name,
                "author": list(GIT_AUTHORS[0]),
                "date": self.clock.isoformat() + "+00:00",
            }
        )

    def render_changelog(self) -> str:
        return "# Changelog\n\n" + "".join(f"{line}\n" for line in self.changelog)

    def render_cli(self) -> str:
        args = "".join(
            f'    parser.add_argument("--{o}", help="{o.replace("-", " ")}")\n'
            for o in self.options
        )
        return (
            f'"""Command line entry point of {self.proj}."""\n\nimport argparse\n\n\n'
            f'def build_parser():\n    parser = argparse.ArgumentParser(prog="{self.proj}")\n'
            f'{args}    return parser\n\n\nif __name__ == "__main__":\n'
            "    print(build_parser().parse_args())\n"
        )

    def render_settings(self) -> str:
        return "[defaults]\n" + "".join(f"{k} = {v}\n" for k, v in self.settings.items())

    def chore(self) -> None:
        """One everyday commit that changes something but not the tested module."""
        rng = self.rng
        scripts = sorted(set(SCRIPTS) - self.scripts)
        options = [o for o in CLI_OPTIONS if o not in self.options]
        kind = rng.choice(
            ["changelog", "docs", "setting", "readme"]
            + ["script"] * bool(scripts)
            + ["cli"] * bool(options)
        )
        if kind == "changelog":
            self.changelog.append(f"- {rng.choice(CHANGELOG_ITEMS)}")
            self.commit("Update changelog", {"CHANGELOG.md": self.render_changelog()})
        elif kind == "docs":
            topic = rng.choice(DOC_TOPICS)
            verb = "expand" if topic in self.docs else "add"
            self.docs[topic] = (
                self.docs.get(topic, f"# {topic.capitalize()}\n")
                + "\n"
                + " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60)))
                + ".\n"
            )
            self.commit(f"docs: {verb} notes on {topic}", {f"docs/{topic}.md": self.docs[topic]})
        elif kind == "setting":
            key = rng.choice(sorted(SETTINGS))
            verb = "change default" if key in self.settings else "add setting"
            values = [v for v in SETTINGS[key] if v != self.settings.get(key)]
            self.settings[key] = rng.choice(values)
            self.commit(
                f"config: {verb} {key} = {self.settings[key]}",
                {"config/defaults.ini": self.render_settings()},
            )
        elif kind == "script":
            name = rng.choice(scripts)
            self.scripts.add(name)
            self.commit(
                f"Add scripts/{name}.sh",
                {f"scripts/{name}.sh": f"#!/bin/sh\nset -e\n{SCRIPTS[name]}\n"},
            )
        elif kind == "cli":
            self.options.append(rng.choice(options))
            self.commit(f"cli: add --{self.options[-1]}", {f"{self.pkg}/cli.py": self.render_cli()})
        else:
            self.about.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20))))
            self.commit("README: expand the overview", {"README.md": self.readme()})

    def readme(self) -> str:
        about = "".join(f"\n{line.capitalize()}.\n" for line in self.about)
        return (
            f"# {self.proj}\n\nTools for the {self.proj} team.\n{about}\n## Development\n\n"
            "Run the tests with `python3 -m unittest` from the repository root.\n"
        )

    def release(self) -> str:
        self.version[2] += 1
        version = ".".join(map(str, self.version))
        self.changelog.append(f"\n## {version}\n")
        self.commit(
            f"Release {version}",
            {"VERSION": version + "\n", "CHANGELOG.md": self.render_changelog()},
        )
        self.tag(f"v{version}")
        return f"v{version}"


def _git_history(
    rng: random.Random, proj: str, pkg: str, module: PyModule, bug: Bug, seed: int
) -> tuple[list[dict], str, str]:
    """(history steps, last good release tag, next version tag)."""
    start = datetime(2023, 1, 2, 9, 0) + timedelta(days=rng.randrange(300))
    h = _History(rng, proj, pkg, start)
    h.version = [1, rng.randint(0, 6), 0]
    h.changelog = ["## Unreleased"]
    h.commit(
        "Initial import",
        {
            "README.md": h.readme(),
            ".gitignore": "__pycache__/\n*.pyc\n",
            "VERSION": ".".join(map(str, h.version)) + "\n",
            "CHANGELOG.md": h.render_changelog(),
            f"{pkg}/__init__.py": f'"""{proj} tools."""\n',
            f"{pkg}/cli.py": h.render_cli(),
            f"{pkg}/{module.name}.py": module.source,
            "tests/__init__.py": "",
            f"tests/test_{module.name}.py": _module_test(module, pkg, GIT_SECONDS, seed),
        },
    )
    good = ""
    for _ in range(rng.randint(1, 2)):
        for _ in range(rng.randint(2, 4)):
            h.chore()
        good = h.release()
    after = rng.randint(16, 26)
    bad_at = rng.randint(2, after - 3)
    branch_at = rng.randint(1, after - 2)
    for i in range(after):
        if i == bad_at:
            h.commit(bug.message, {f"{pkg}/{module.name}.py": _buggy(module, bug)}, mark="bad")
        if i == branch_at:  # an unmerged feature branch, for realism
            h.switch("branch", f"feature/{rng.choice(CLI_OPTIONS)}-support")
            for _ in range(rng.randint(1, 3)):
                h.chore()
            h.switch("checkout", "main")
        h.chore()
    major, minor, patch = h.version
    return h.steps, good, f"v{major}.{minor}.{patch + 1}"
