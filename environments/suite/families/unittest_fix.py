"""unittest-fix: a package with a planted bug; its (slow, property-based) tests fail.

The task: find and fix the bug in the package so that `python3 -m unittest` passes, without
changing the tests. The check copies the package next to its own copy of the test suite,
seeded differently so that special-casing cannot pass, and runs it.
"""

from __future__ import annotations

import random
import shlex

from obsspec.environments.suite.families._common import PROJECT_NAMES
from obsspec.environments.suite.families._py_modules import PY_MODULES, Bug, _buggy, _module_test
from obsspec.environments.suite.registry import GeneratedTask, family


def _sed_fix(bug: Bug, path: str) -> str:
    """A sed command that turns the buggy line back into the correct one."""

    def pattern(text: str) -> str:
        return "".join("\\" + ch if ch in "\\/.*[]^$" else ch for ch in text)

    def replacement(text: str) -> str:
        return "".join("\\" + ch if ch in "\\/&" else ch for ch in text)

    return f"sed -i {shlex.quote(f's/{pattern(bug.new)}/{replacement(bug.old)}/')} {path}"


UNITTEST_SECONDS = 1.9  # planned CPU time of the suite; runs measured 1.4-2.3 s on one CPU


@family("unittest-fix")
def unittest_fix(rng: random.Random) -> GeneratedTask:
    proj = rng.choice(PROJECT_NAMES)
    pkg = f"{proj}_utils"
    modules = rng.sample(PY_MODULES, 3)
    broken, bug = modules[0], rng.choice(modules[0].bugs)
    seed, hidden_seed = rng.randrange(10**6), rng.randrange(10**6)
    share = UNITTEST_SECONDS / len(modules)
    files: dict[str, str | bytes] = {
        "README.md": f"# {proj}\n\nSmall helpers shared by the {proj} services.\n\n"
        "Run the tests with `python3 -m unittest` from this directory.\n",
        f"{pkg}/__init__.py": f'"""Helpers shared by the {proj} services."""\n',
        "tests/__init__.py": "",
    }
    hidden: dict[str, str | bytes] = {"project_tests/__init__.py": ""}
    for m in modules:
        files[f"{pkg}/{m.name}.py"] = _buggy(m, bug) if m is broken else m.source
        files[f"tests/test_{m.name}.py"] = _module_test(m, pkg, share, seed)
        # The checker runs the same tests with another seed, so special-casing cannot pass.
        hidden[f"project_tests/test_{m.name}.py"] = _module_test(m, pkg, share, hidden_seed)
    root = f"/root/{proj}"
    instruction = f"""
The unit tests of the Python project in `{root}` fail. Find the bug in the package code
(`{root}/{pkg}/`) and fix it, so that `python3 -m unittest` run in `{root}` passes.

The tests are correct: do not change them (the check runs its own copy of the test suite).
"""
    check = f"""rm -rf /tmp/verify && mkdir -p /tmp/verify
cp -r {root}/{pkg} /tmp/verify/ && cp -r /tests/project_tests /tmp/verify/tests
cd /tmp/verify && python3 -m unittest -q
"""
    module_path = f"{pkg}/{broken.name}.py"
    solution = [
        f"cd {root} && ls {pkg} tests",
        "python3 -m unittest 2>&1 | tail -n 25",
        f"grep -n -A 14 'def {bug.func}' {module_path}",
        _sed_fix(bug, module_path),
        "python3 -m unittest 2>&1 | tail -n 4",
    ]
    return GeneratedTask(
        instruction=instruction,
        setup_sh=f"mkdir -p {root} && cp -r project/. {root}/\n",
        check_sh=check,
        solution=solution,
        setup_files={f"project/{k}": v for k, v in files.items()},
        test_files=hidden,
    )
