"""workflow-ci: a project whose CI stages are slow; one setting breaks a stage.

The task: get `./ci.sh lint`, `build`, `test` and `package` through, in order, fixing the one
planted problem in `ci.conf` (a worker count out of range, which fails `test`, or a version
that disagrees with `src/VERSION`, which fails `package`), and leave the package in `dist/`.

This is the suite's slow-command workload: each stage waits a few seconds, as a remote runner,
a download or a migration does, and prints a short report that follows from `ci.conf` (which
the agent reads first). Slow commands with predictable output are where observation
speculation pays, so `obsspec profile` measures on this family. The stages wait rather than
compute so that, on a small machine, they do not compete with the inference engines for CPU
(on a GPU cluster tools and inference do not share processors either).

The check does not trust the agent's `ci.sh`: it runs its own copy (with CI_FAST=1, which
skips the waiting) on the agent's `ci.conf` and `src/`, then checks the agent's package.
"""

from __future__ import annotations

import random

from obsspec.environments.suite.families._common import PROJECT_NAMES, WORDS
from obsspec.environments.suite.registry import GeneratedTask, family

CI_SH = r"""#!/bin/bash
# The project's CI: ./ci.sh lint|build|test|package, in that order. Each stage waits for its
# runner first (CI_FAST=1 skips the waiting).
set -u
cd "$(dirname "$0")"
. ./ci.conf
wait_for_runner() { [ -n "${CI_FAST:-}" ] || sleep "$1"; }
fail() { echo "[$stage] error: $1"; echo "FAILED: $2"; exit 2; }
stage=${1:-}
case "$stage" in
lint)
    wait_for_runner @LINT@
    echo "[lint] checked $modules modules of $name: no problems"
    next="next: ./ci.sh build"
    ;;
build)
    wait_for_runner @BUILD@
    rm -rf build && mkdir -p build && cp -r src build/$name
    echo "[build] compiled $modules modules into build/$name"
    next="next: ./ci.sh test"
    ;;
test)
    [ -d build/$name ] || fail "nothing is built" "run ./ci.sh build first"
    wait_for_runner @TEST@
    [[ "$workers" =~ ^[1-8]$ ]] ||
        fail "workers=$workers in ci.conf; it must be between 1 and 8" \
            "fix ci.conf, then run ./ci.sh test again"
    touch build/.tested
    echo "[test] $tests tests passed on $workers workers"
    next="next: ./ci.sh package"
    ;;
package)
    [ -f build/.tested ] || fail "the build is not tested" "run ./ci.sh test first"
    wait_for_runner @PACKAGE@
    [ "$version" = "$(cat src/VERSION)" ] ||
        fail "version=$version in ci.conf but src/VERSION says $(cat src/VERSION)" \
            "fix ci.conf, then run ./ci.sh package again"
    mkdir -p dist && tar -czf dist/$name-$version.tar.gz -C build $name
    echo "[package] wrote dist/$name-$version.tar.gz"
    next="all stages passed"
    ;;
*)
    echo "usage: ./ci.sh lint|build|test|package"
    exit 64
    ;;
esac
echo "OK, $next"
"""

STAGES = ("lint", "build", "test", "package")


def _ci_script(rng: random.Random) -> str:
    script = CI_SH
    for stage in STAGES:  # seconds each stage waits: slow, but not all alike
        script = script.replace(f"@{stage.upper()}@", f"{rng.uniform(2.5, 4.5):.1f}")
    return script


def _modules(rng: random.Random, name: str, count: int) -> dict[str, str]:
    files = {}
    for word in rng.sample(WORDS, count):
        files[f"src/{word}.py"] = (
            f'"""The {word} part of {name}."""\n\n\ndef {word}_ready():\n    return True\n'
        )
    return files


@family("workflow-ci")
def workflow_ci(rng: random.Random) -> GeneratedTask:
    name = rng.choice(PROJECT_NAMES)
    version = f"{rng.randint(1, 3)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}"
    modules, tests = rng.randint(3, 8), rng.randint(12, 60)
    problem = rng.choice(["workers", "version"])
    workers = rng.choice(["0", "12", "16", "auto"]) if problem == "workers" else "4"
    conf_version = version
    if problem == "version":
        conf_version = f"{version.split('.')[0]}.{rng.randint(0, 9)}.{rng.randint(10, 19)}"
    conf = (
        f"name={name}\nversion={conf_version}\nmodules={modules}\ntests={tests}\n"
        f"workers={workers}\n"
    )
    root = f"/root/{name}"
    ci = _ci_script(rng)
    files = {"ci.sh": ci, "ci.conf": conf, "src/VERSION": version + "\n"}
    files |= _modules(rng, name, modules)
    instruction = f"""
The project in `{root}` is released by its CI script, `./ci.sh`, run from `{root}` with one
stage at a time: `lint`, `build`, `test`, then `package`. Each stage takes a few seconds.

Get every stage to pass, in that order, and leave the package the last stage writes in
`{root}/dist/`. If a stage fails, fix the cause in `ci.conf` (keep `src/` and `ci.sh` as they
are).
"""
    fix = (
        "sed -i 's/^workers=.*/workers=4/' ci.conf"
        if problem == "workers"
        else f"sed -i 's/^version=.*/version={version}/' ci.conf"
    )
    solution = [f"cd {root} && cat ci.conf", "./ci.sh lint", "./ci.sh build", "./ci.sh test"]
    if problem == "workers":
        solution += [fix, "./ci.sh test", "./ci.sh package"]
    else:
        solution += ["./ci.sh package", fix, "./ci.sh package"]
    check = f"""rm -rf /tmp/verify && mkdir -p /tmp/verify
cp -r {root}/src {root}/ci.conf /tmp/verify/ && cp /tests/ci.sh /tmp/verify/ci.sh
cd /tmp/verify
for stage in build test package; do CI_FAST=1 bash ci.sh $stage; done
. ./ci.conf
[ "$version" = "{version}" ] && [ "$name" = "{name}" ]
tar -tzf {root}/dist/{name}-{version}.tar.gz | grep '^{name}/VERSION$' >/dev/null
"""
    return GeneratedTask(
        instruction=instruction,
        setup_sh=f"mkdir -p {root} && cp -r project/. {root}/ && chmod +x {root}/ci.sh\n",
        check_sh=check,
        solution=solution,
        setup_files={f"project/{k}": v for k, v in files.items()},
        test_files={"ci.sh": ci},
    )
