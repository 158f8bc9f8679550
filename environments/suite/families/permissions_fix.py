"""permissions-fix: repair ownership and modes of an app tree, make its build runnable.

The task: an app tree copied with broken owners and modes; fix them by rule (scripts found by
their shebang, a secret file, a setgid upload directory), then make a CRLF build script run
and build the C program. The check walks the tree for owners, modes and unchanged contents,
and runs the built program, whose output it recomputes from the spec.
"""

from __future__ import annotations

import random

from obsspec.environments.suite.families._common import _spec_task
from obsspec.environments.suite.registry import GeneratedTask, family

# Shared by setup and check: file contents, and what the built program must print.
PERMS_GEN = r'''import random
M = 0xFFFFFFFF
BUILD_SH = """#!/bin/bash
# Build {app} into dist/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p dist
./bin/gen-version.sh > dist/version.h
gcc -O2 -Idist -Isrc -o dist/{app} src/*.c
echo "built dist/{app}"
"""
SCRIPTS = {
    "genver": '#!/bin/sh\necho \'#define VERSION "{version}"\'\n',
    "start": "#!/bin/sh\nexec /opt/{app}/dist/{app} \"$@\"\n",
    "health": "#!/usr/bin/env python3\nimport subprocess\n"
              "subprocess.run(['/opt/{app}/dist/{app}'], check=True)\n",
    "conf": "[server]\nport = 8081\nworkers = 4\n",
    "secrets": "DB_PASSWORD={token}\nAPI_KEY={token}{token}\n",
    # Not a script, though a line in it starts with "#!".
    "deploy": "# Deploying {app}\n\nCreate a wrapper like this:\n\n```sh\n#!/bin/sh\n"
              "exec /opt/{app}/bin/start.sh\n```\n",
    "readme": "# {app}\n\nRun `bin/build.sh`, then `bin/start.sh`.\n",
}


def functions(spec):
    r = random.Random(spec["seed"])
    return [(r.getrandbits(32) | 1, r.getrandbits(32), r.randint(3, 20), r.getrandbits(16),
             r.randint(1, 31)) for _ in range(spec["n_funcs"])]


def expected_output(spec):
    total = 0
    for i, (a, b, k, c, s) in enumerate(functions(spec)):
        h = b ^ i
        for j in range(k):
            h = ((h ^ (j * c)) * a) & M
        total += h ^ (h >> s)
    return f"{spec['app']} {spec['version']} checksum={total & M}\n"


def c_part(spec, part):
    out = ["#include <stdint.h>\n"]
    for i, (a, b, k, c, s) in enumerate(functions(spec)):
        if i % spec["parts"] == part:
            out.append(f"uint32_t f_{i}(uint32_t x) {{\n    uint32_t h = {b}u ^ x;\n"
                       f"    for (int k = 0; k < {k}; k++)\n"
                       f"        h = (h ^ (uint32_t)(k * {c}u)) * {a}u;\n"
                       f"    return h ^ (h >> {s});\n}}\n")
    return "".join(out)


def c_header(spec):
    n = spec["n_funcs"]
    protos = "".join(f"uint32_t f_{i}(uint32_t);\n" for i in range(n))
    table = ", ".join(f"f_{i}" for i in range(n))
    return (f"#include <stdint.h>\n#define N_FUNCS {n}\n{protos}"
            f"static uint32_t (*const FUNCS[])(uint32_t) = {{{table}}};\n")


C_MAIN = """#include <stdio.h>
#include "version.h"
#include "{app}.h"

int main(void) {{
    uint32_t sum = 0;
    for (uint32_t i = 0; i < N_FUNCS; i++)
        sum += FUNCS[i](i);
    printf("{app} %s checksum=%u\\n", VERSION, sum);
    return 0;
}}
"""


def module_text(key, script):
    r = random.Random(key)
    names = [f"{r.choice(['load', 'parse', 'emit', 'check'])}_{r.randrange(999)}"
             for _ in range(r.randint(2, 8))]
    body = "".join(f"\n\ndef {n}(value):\n    return value * {r.randrange(1, 99)}\n"
                   for n in names)
    head = "#!/usr/bin/env python3\n" if script else ""
    return f'{head}"""{key}"""\n{body}'


def content(spec, kind, rel):
    """The bytes of a file as setup writes it (build.sh with CRLF line ends)."""
    key = spec["app"] + "/" + rel
    fmt = {"app": spec["app"], "version": spec["version"], "token": spec["token"]}
    if kind == "build":
        return BUILD_SH.format(**fmt).replace("\n", "\r\n").encode()
    if kind in SCRIPTS:
        return SCRIPTS[kind].format(**fmt).encode()
    if kind in ("py", "script"):
        return module_text(key, kind == "script").encode()
    if kind == "upload":
        return b"\x89PNG\r\n" + random.Random(key).randbytes(4000)
    if kind == "header":
        return c_header(spec).encode()
    if kind == "main":
        return C_MAIN.format(**fmt).encode()
    return c_part(spec, int(kind[1:])).encode()  # "c<part>"
'''

PERMS_SETUP = r"""import json, os
with open("spec.json") as f:
    SPEC = json.load(f)
root = SPEC["root"]
for rel, kind, mode, foreign in SPEC["files"]:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content(SPEC, kind, rel))
for rel, mode, foreign in SPEC["dirs"]:
    os.makedirs(os.path.join(root, rel), exist_ok=True)
# Modes and owners last: some modes would keep setup out of the directories.
for rel, *_, mode, foreign in SPEC["files"] + SPEC["dirs"]:
    path = os.path.join(root, rel)
    os.chown(path, 1001 if foreign else 0, 1001 if foreign else 0)
    os.chmod(path, mode)
"""

PERMS_CHECK = r"""import grp, pwd, stat, subprocess
root = SPEC["root"]
app_ids = pwd.getpwnam("appsvc").pw_uid, grp.getgrnam("appsvc").gr_gid
special = {"config/secrets.env": (app_ids, 0o100600),
           "var/uploads": ((app_ids[0], grp.getgrnam("www-data").gr_gid), 0o42775)}
want = {rel: content(SPEC, kind, rel) for rel, kind, _, _ in SPEC["files"]}
want["bin/build.sh"] = want["bin/build.sh"].replace(b"\r\n", b"\n")


def expect_owner_mode(path, mode):
    ids, mode = special.get(os.path.relpath(path, root), ((0, 0), mode))
    st = os.lstat(path)
    if (st.st_uid, st.st_gid) != ids:
        fail(f"{path} is owned by {st.st_uid}:{st.st_gid}, expected {ids[0]}:{ids[1]}")
    if st.st_mode != mode:
        fail(f"{path} has mode {oct(st.st_mode)}, expected {oct(mode)}")


for dirpath, dirnames, names in os.walk(root):
    if dirpath == root:
        dirnames[:] = [d for d in dirnames if d != "dist"]  # made by the build: exempt
    expect_owner_mode(dirpath, 0o40755)
    for name in names:
        path = os.path.join(dirpath, name)
        if not stat.S_ISREG(os.lstat(path).st_mode):
            fail(f"{path} is not a regular file")
        with open(path, "rb") as f:
            data = f.read()
        rel = os.path.relpath(path, root)
        if rel in want and data != want.pop(rel):
            fail(f"the content of {path} changed")
        expect_owner_mode(path, 0o100755 if data.startswith(b"#!") else 0o100644)
if want:
    fail(f"missing files, e.g. {sorted(want)[:3]}")
program = os.path.join(root, "dist", SPEC["app"])
try:
    out = subprocess.run([program], capture_output=True, text=True, timeout=20).stdout
except OSError:
    fail(f"{program} does not exist or does not run")
if out != expected_output(SPEC):
    fail(f"{program} printed {out!r}, expected {expected_output(SPEC)!r}")
"""

APP_NAMES = ["ledger", "pixelforge", "beacon", "quarry", "tally", "harbor", "sprocket"]
PKG_NAMES = "core api db jobs auth render mail search cache billing export admin cli storage"


def _perms_layout(rng: random.Random, app: str, n_parts: int) -> list[tuple[str, str]]:
    """(relative path, kind) of every file in the app tree."""
    files = [
        ("bin/build.sh", "build"),
        ("bin/gen-version.sh", "genver"),
        ("bin/start.sh", "start"),
        ("bin/healthcheck", "health"),
        ("config/app.conf", "conf"),
        ("config/secrets.env", "secrets"),
        ("docs/README.md", "readme"),
        ("docs/deploy.md", "deploy"),
        ("src/main.c", "main"),
        (f"src/{app}.h", "header"),
    ]
    files += [(f"src/tables_{p}.c", f"c{p}") for p in range(n_parts)]
    files += [
        (f"var/uploads/{rng.randrange(16**8):08x}.png", "upload") for _ in range(rng.randint(4, 12))
    ]
    for pkg in sorted(rng.sample(PKG_NAMES.split(), rng.randint(11, 13))):
        files.append((f"lib/{app}/{pkg}/__init__.py", "py"))
        for k in range(rng.randint(95, 115)):
            if rng.random() < 0.06:  # command-line entry points
                files.append((f"lib/{app}/{pkg}/run_{k:03d}.py", "script"))
            else:
                files.append((f"lib/{app}/{pkg}/mod_{k:03d}.py", "py"))
    return sorted(set(files))


@family("permissions-fix")
def make_permissions_fix(rng: random.Random) -> GeneratedTask:
    """An app tree copied with broken owners and modes: fix them by rule (scripts by their
    shebang, a secret, a setgid upload dir) and make a CRLF build script run. Slow parts: the
    per-file shebang test over ~1300 files, and the gcc build."""
    app = rng.choice(APP_NAMES)
    root = f"/opt/{app}"
    n_parts = 4
    file_modes = [0o777, 0o666, 0o600, 0o644, 0o700, 0o755, 0o444]
    files = [
        [rel, kind, rng.choice(file_modes), rng.random() < 0.7]
        for rel, kind in _perms_layout(rng, app, n_parts)
    ]
    dirs = sorted({rel.rsplit("/", 1)[0] for rel, *_ in files} | {"var/log", "."})
    spec = {
        "root": root,
        "app": app,
        "version": f"{rng.randint(1, 4)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}",
        "token": f"{rng.getrandbits(64):016x}",
        "seed": rng.randrange(2**32),
        "n_funcs": rng.randint(560, 640),  # gcc -O2 takes ~2.5 ms per function
        "parts": n_parts,
        "files": files,
        "dirs": [[d, rng.choice([0o777, 0o700, 0o750, 0o755]), rng.random() < 0.7] for d in dirs],
    }
    instruction = f"""\
The application in `{root}` was copied over from a Windows share, and its owners and
permissions are a mess. Fix them (the user `appsvc` and the group `www-data` exist):

- Everything in the tree (`{root}` itself included) must be owned by `root:root`,
  except the two entries below.
- Directories: mode `755`. Regular files: mode `644`, except scripts, i.e. files whose very
  first line starts with `#!`, which must be `755`.
- `config/secrets.env`: owner `appsvc`, group `appsvc`, mode `600`.
- `var/uploads` (the directory itself): owner `appsvc`, group `www-data`, mode `2775`
  (setgid, so new uploads inherit the group).

Then build the app: `bin/build.sh` must run when invoked by its path; fix whatever stops it
without changing what it does, and run it once. It creates `dist/` (exempt from the rules
above). Do not change the content of any other file. (Relative paths are under `{root}`.)
"""
    solution = [
        f"cd {root} && ls -la bin && head -2 bin/build.sh | od -c | head -5",
        "chown -R root:root . && find . -type d -exec chmod 755 {} + && find . -type f"
        " -exec chmod 644 {} +",
        'find . -type f | while read -r f; do [ "$(head -c2 "$f")" = \'#!\' ]'
        ' && chmod 755 "$f"; done',
        "chown appsvc:appsvc config/secrets.env && chmod 600 config/secrets.env"
        " && chown appsvc:www-data var/uploads && chmod 2775 var/uploads",
        f"sed -i 's/\\r$//' bin/build.sh && ./bin/build.sh && ./dist/{app}",
    ]
    useradd = "useradd --system --no-create-home --shell /usr/sbin/nologin appsvc\n"
    return _spec_task(
        instruction,
        solution,
        PERMS_GEN + PERMS_SETUP,
        PERMS_GEN + PERMS_CHECK,
        spec,
        spec,
        setup_sh=useradd,
    )
