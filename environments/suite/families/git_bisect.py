"""git-bisect: find the commit that broke the tests after a release tag, and revert it.

The task: a repository whose tests passed at a release tag but fail on main; find the bad
commit (git bisect) and write its hash, then revert it on a new branch, or on main plus a
new annotated release tag. build_repo.py builds the repository from a generated history
with fixed dates; the check rebuilds it the same way (same hashes), then checks the hash,
that main stays put (branch) or carries the tag, that the fixed ref builds on the original
main and differs from it only in the broken module, and that the tests pass there.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from environments.suite.families._common import PROJECT_NAMES, WORDS, _json
from environments.suite.families._py_modules import PY_MODULES, Bug, PyModule, _buggy, _module_test
from environments.suite.registry import GeneratedTask, family

GIT_BUILD = r'''"""Builds the task's git repository from history.json, reproducibly (fixed dates).

python3 build_repo.py history.json TARGET [MARKS]   (MARKS: write hashes of marked commits)
"""

import json
import os
import subprocess
import sys
from pathlib import Path


def git(repo, env, *args):
    subprocess.run(["git", "-C", str(repo), *args], env=env, check=True,
                   stdout=subprocess.DEVNULL)


def rev(repo, ref):
    return subprocess.run(["git", "-C", str(repo), "rev-parse", ref], check=True,
                          capture_output=True, text=True).stdout.strip()


def main():
    steps = json.loads(Path(sys.argv[1]).read_text())
    repo = Path(sys.argv[2])
    repo.mkdir(parents=True)
    git(repo, None, "init", "-q", "-b", "main")
    marks = {}
    for step in steps:
        name, email = step["author"]
        env = dict(os.environ, GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email,
                   GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email,
                   GIT_AUTHOR_DATE=step["date"], GIT_COMMITTER_DATE=step["date"])
        if step["op"] == "commit":
            for path, content in step["files"].items():
                (repo / path).parent.mkdir(parents=True, exist_ok=True)
                (repo / path).write_text(content)
            git(repo, env, "add", "-A")
            git(repo, env, "commit", "-q", "-m", step["message"])
            if "mark" in step:
                marks[step["mark"]] = rev(repo, "HEAD")
        elif step["op"] == "tag":
            git(repo, env, "tag", "-a", step["name"], "-m", step["message"])
        elif step["op"] == "branch":
            git(repo, env, "checkout", "-q", "-b", step["name"])
        else:
            git(repo, env, "checkout", "-q", step["name"])
    marks["tip"] = rev(repo, "main")
    if len(sys.argv) > 3:
        Path(sys.argv[3]).write_text(json.dumps(marks))


main()
'''

GIT_CHECK = r'''"""Checks the repository against a pristine rebuild (same script, same hashes)."""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

P = json.loads(Path("/tests/params.json").read_text())


def git(*args):
    return subprocess.run(["git", "-C", P["repo"], *args], capture_output=True, text=True)


def rev(ref):
    r = git("rev-parse", "--verify", "-q", ref + "^{commit}")
    return r.stdout.strip() if r.returncode == 0 else None


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def tests_pass(commit):
    with tempfile.TemporaryDirectory() as tmp:
        tree = subprocess.run(["git", "-C", P["repo"], "archive", commit], capture_output=True,
                              check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=tree, check=True)
        return subprocess.run([sys.executable, "-m", "unittest", "-q"], cwd=tmp,
                              capture_output=True).returncode == 0


def main():
    scratch = Path(tempfile.mkdtemp())
    subprocess.run([sys.executable, "/tests/build_repo.py", "/tests/history.json",
                    str(scratch / "repo"), str(scratch / "marks.json")], check=True)
    marks = json.loads((scratch / "marks.json").read_text())
    answer = Path("/root/bad_commit.txt")
    if not answer.is_file() or answer.read_text().split()[:1] != [marks["bad"]]:
        fail("/root/bad_commit.txt does not hold the hash of the first bad commit")
    if P["variant"] == "branch":
        if rev("main") != marks["tip"]:
            fail("main was moved")
        ref = P["branch"]
    else:
        ref = "main"
        if git("cat-file", "-t", P["tag"]).stdout.strip() != "tag":
            fail(f"{P['tag']} is not an annotated tag")
        if rev(P["tag"]) != rev("main"):
            fail(f"{P['tag']} does not point at main")
    tip = rev(ref)
    if tip is None:
        fail(f"{ref} does not exist")
    if git("merge-base", "--is-ancestor", marks["tip"], tip).returncode != 0:
        fail(f"{ref} does not build on the original main (history rewritten?)")
    changed = git("diff", "--name-only", marks["tip"], tip).stdout.split()
    if changed != [P["module_path"]]:
        fail(f"{ref} should differ from the original main only in {P['module_path']}: {changed}")
    if not tests_pass(tip):
        fail(f"the tests fail at {ref}")
    print("ok")


main()
'''

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


@family("git-bisect")
def git_bisect(rng: random.Random) -> GeneratedTask:
    proj = rng.choice(PROJECT_NAMES)
    pkg = proj  # the package is named after the project
    module = rng.choice(PY_MODULES)
    bug = rng.choice(module.bugs)
    steps, good, next_tag = _git_history(rng, proj, pkg, module, bug, rng.randrange(10**6))
    repo = f"/root/{proj}"
    variant = rng.choice(["branch", "tag"])
    p = {
        "repo": repo,
        "variant": variant,
        "module_path": f"{pkg}/{module.name}.py",
        "branch": f"fix/{module.name}-regression",
        "tag": next_tag,
    }
    if variant == "branch":
        task = (
            f"Create a branch `{p['branch']}` from `main` and undo that commit there with "
            "`git revert` (a new commit; keep the default message), so that the tests pass "
            "on the branch. `main` itself must stay where it is."
        )
        finish = (
            f"git switch -c {p['branch']} main && git revert --no-edit $(cat /root/bad_commit.txt)"
        )
    else:
        task = (
            "Undo that commit on `main` with `git revert` (a new commit on top; do not "
            "rewrite history), so that the tests pass on `main`. Then tag the new commit "
            f"with an annotated tag `{next_tag}`."
        )
        finish = (
            f"git revert --no-edit $(cat /root/bad_commit.txt) && "
            f"git tag -a {next_tag} -m 'Release {next_tag[1:]}'"
        )
    instruction = f"""
`{repo}` is a git repository. Its test suite (`python3 -m unittest`, run from the repository
root) passed at the release tag `{good}`, but it fails on `main` now.

1. Find the commit on `main` that broke the tests and write its full 40-character hash to
   `/root/bad_commit.txt`.
2. {task}
"""
    history = _json(steps)
    solution = [
        f"cd {repo} && git status && git log --oneline --decorate -n 15",
        f"git bisect start main {good} && git bisect run python3 -m unittest -q 2>&1 | tail -n 8",
        "git rev-parse refs/bisect/bad | tee /root/bad_commit.txt && git bisect reset",
        finish,
        "python3 -m unittest -q 2>&1 | tail -n 3 && git log --oneline --decorate -n 3",
    ]
    return GeneratedTask(
        instruction=instruction,
        setup_sh=f"python3 build_repo.py history.json {repo}\n",
        check_sh="python3 /tests/check.py\n",
        solution=solution,
        setup_files={"build_repo.py": GIT_BUILD, "history.json": history},
        test_files={
            "build_repo.py": GIT_BUILD,
            "history.json": history,
            "check.py": GIT_CHECK,
            "params.json": _json(p),
        },
    )
