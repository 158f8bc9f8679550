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

from obsspec.environments.suite.families._common import PROJECT_NAMES, _json
from obsspec.environments.suite.families._git_history import _git_history
from obsspec.environments.suite.families._py_modules import PY_MODULES
from obsspec.environments.suite.registry import GeneratedTask, family

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
