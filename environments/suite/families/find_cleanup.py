"""find-cleanup: free space on a CI server with find and xargs.

The task: in a CI job tree (names with spaces) delete old temp files, gzip the big logs, list
and delete the corrupt .gz files, prune empty directories. The check regenerates the bytes of
every file that must stay, wants the big logs as .gz files that unpack to the original, no
other file and no empty directory, and the exact sorted list of corrupt archives.
"""

from __future__ import annotations

import datetime as dt
import random

from obsspec.environments.suite.families._common import _random_date, _spec_task
from obsspec.environments.suite.registry import GeneratedTask, family

# Shared by setup and check: the bytes of every file in the spec.
CI_GEN = r'''import gzip, random
TEMPLATES = [
    "[%s] + make -j4 target={w}", "[%s] gcc -O2 -c src/{w}.c -o build/{w}.o",
    "[%s] PASS tests/{w}_test.py::test_{w}_{n} ({n}ms)", "[%s] npm WARN deprecated {w}@{n}",
    "[%s] Downloading {w}-{n}.tar.gz ({n} kB)", "[%s] WARNING: {w} is deprecated, see #{n}",
    "[%s] ok {n} - {w} returns {n}", "[%s] Step {n}/40 : RUN ./scripts/{w}.sh",
]
WORDS = "core utils parser lexer cache auth http db queue render worker sched io net".split()


def log_text(key, size):
    """A build log: timestamped lines, every other one with a random request id."""
    r = random.Random(key)
    lines = [r.choice(TEMPLATES).format(w=r.choice(WORDS), n=r.randrange(1000))
             for _ in range(1500)]
    out, total, ms = [], 0, 0
    while total < size:
        for line in r.choices(lines, k=2000):
            ms += r.randrange(1, 400)
            line %= (f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}"
                     f".{ms % 1000:03d}")
            if ms % 2:
                line += f" id={r.getrandbits(64):016x}"
            out.append(line + "\n")
            total += len(line) + 1
    return "".join(out).encode()


def content(kind, key, size):
    if kind == "bin":
        return random.Random(key).randbytes(size)
    text = log_text(key, size)
    if kind == "log":
        return text
    packed = gzip.compress(text, mtime=0)
    return packed if kind == "gz" else packed[: len(packed) * 3 // 5]  # "badgz": truncated
'''

CI_SETUP = r"""import json, os
with open("spec.json") as f:
    SPEC = json.load(f)
for rel, kind, key, size, mtime in SPEC["files"]:
    path = os.path.join("/srv/ci", rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content(kind, key, size))
    os.utime(path, (mtime, mtime))
for rel in SPEC["empty_dirs"]:
    os.makedirs(os.path.join("/srv/ci", rel), exist_ok=True)
"""

CI_CHECK = r"""
want, packed = {}, {}  # final files: exact bytes, or bytes once gunzipped
for rel, kind, key, size in SPEC["keep"]:
    (packed if kind == "packed" else want)[rel] = content(kind.replace("packed", "log"), key, size)
found = files_under("/srv/ci")
for rel in sorted(packed):
    if rel in found:
        fail(f"/srv/ci/{rel} should have been compressed")
    try:
        with gzip.open(os.path.join("/srv/ci", rel + ".gz")) as f:
            if f.read() != packed[rel]:
                fail(f"/srv/ci/{rel}.gz does not unpack to the original log")
    except (OSError, EOFError):
        fail(f"/srv/ci/{rel}.gz is missing or not a valid gzip file")
    found.discard(rel + ".gz")
for rel in sorted(found - set(want)):
    fail(f"/srv/ci/{rel} should not be there")
for rel in sorted(want):
    path = os.path.join("/srv/ci", rel)
    if rel not in found:
        fail(f"{path} is missing")
    with open(path, "rb") as f:
        if f.read() != want[rel]:
            fail(f"{path} was modified")
for dirpath, dirnames, names in os.walk("/srv/ci"):
    if dirpath != "/srv/ci" and not dirnames and not names:
        fail(f"empty directory {dirpath} is still there")
try:
    with open("/root/corrupt-gz.txt") as f:
        listed = f.read()
except OSError:
    fail("/root/corrupt-gz.txt does not exist")
if listed != "".join(p + "\n" for p in SPEC["corrupt"]):
    fail("/root/corrupt-gz.txt does not list exactly the corrupt archives, sorted")
"""

CI_JOBS = [
    "api-server",
    "web frontend",
    "nightly build",
    "docs",
    "release (manual)",
    "mobile-app",
    "integration tests",
    "infra",
    "data pipeline",
    "billing",
]
DAY = 86_400


@family("find-cleanup")
def make_find_cleanup(rng: random.Random) -> GeneratedTask:
    """A CI server's job tree: delete old temp files, gzip the big logs, find and delete corrupt
    .gz files, prune empty directories; some names contain spaces. Slow parts: gzip of ~60 MB
    of logs, and `gzip -t` run per archive over ~500 archives."""
    cutoff = _random_date(rng, dt.date(2023, 6, 1), dt.date(2024, 9, 1))
    cutoff_ts = (cutoff - dt.date(1970, 1, 1)).days * DAY
    files: list[list] = []  # [rel, kind, content key, size, mtime]
    keep: list[list] = []  # [rel, kind, key, size]: "packed" = must end up gzipped
    corrupt: list[str] = []
    empty_dirs: list[str] = []

    def add(rel: str, kind: str, size: int, stays: bool = True, mtime: int | None = None):
        key = f"{rel}:{rng.randrange(2**32)}"
        when = mtime if mtime is not None else cutoff_ts + rng.randint(-200, 60) * DAY
        files.append([rel, kind, key, size, when])
        if stays:
            keep.append([rel, "packed" if kind == "log" and size > 2**20 else kind, key, size])

    builds = [
        f"jobs/{job}/{build}"
        for job in sorted(rng.sample(CI_JOBS, rng.randint(5, 7)))
        for build in range(1, rng.randint(12, 18) + 1)
    ]
    big = set(rng.sample(builds, rng.randint(11, 13)))  # their logs total ~60 MB
    for base in builds:
        add(
            f"{base}/console.log",
            "log",
            rng.randint(4_500_000, 5_500_000) if base in big else rng.randint(10_000, 300_000),
        )
        for k in range(rng.randint(0, 4)):
            old = rng.random() < 0.6  # tmp files: old ones go, recent ones stay
            age = rng.randint(3, 200) if old else -rng.randint(2, 40)
            add(
                f"{base}/tmp/{rng.choice(['cc', 'npm', 'pip'])}-{k}.tmp",
                "bin",
                rng.randint(1_000, 40_000),
                not old,
                cutoff_ts - age * DAY,
            )
        for name in rng.sample(["app.tar", "report.xml", "coverage.json"], rng.randint(1, 2)):
            add(f"{base}/artifacts/{name}", "bin", rng.randint(2_000, 50_000))
        for k in range(1, rng.randint(3, 7) + 1):
            rel = f"{base}/archive/console.{k}.log.gz"
            bad = rng.random() < 0.08
            add(rel, "badgz" if bad else "gz", rng.randint(5_000, 60_000), not bad)
            if bad:
                corrupt.append("/srv/ci/" + rel)
        if rng.random() < 0.3:
            empty_dirs.append(f"{base}/workspace")

    instruction = f"""\
The CI server's disk is full. Clean up the job tree under `/srv/ci` (job names may contain
spaces):

1. Delete every `*.tmp` file last modified before {cutoff.isoformat()} 00:00 UTC. Newer
   `.tmp` files must stay.
2. Compress every `*.log` file larger than 1 MiB with gzip, replacing it by `<name>.log.gz`
   (as `gzip FILE` does). Smaller logs stay as they are.
3. Some `.gz` files are corrupt (truncated). Find every `.gz` file under `/srv/ci` that fails
   `gzip -t`, write their full paths (starting with `/srv/ci/`), one per line, sorted in byte
   order, to `/root/corrupt-gz.txt`, then delete them.
4. Finally remove every directory under `/srv/ci` that is empty (but keep `/srv/ci` itself).

Do not touch any other file.
"""
    solution = [
        "du -sh /srv/ci; find /srv/ci -type f -name '*.log' -size +1M | wc -l",
        f"find /srv/ci -type f -name '*.tmp' ! -newermt '{cutoff.isoformat()}' -delete",
        "find /srv/ci -type f -name '*.log' -size +1M -print0 | xargs -0 gzip",
        "find /srv/ci -type f -name '*.gz' -print0 | xargs -0 -n1 sh -c"
        ' \'gzip -t "$0" 2>/dev/null || echo "$0"\' | sort > /root/corrupt-gz.txt',
        "xargs -d '\\n' rm -f < /root/corrupt-gz.txt && find /srv/ci -mindepth 1 -type d -empty"
        " -delete",
    ]
    setup_spec = {"files": sorted(files), "empty_dirs": sorted(empty_dirs)}
    check_spec = {"keep": sorted(keep), "corrupt": sorted(corrupt)}
    return _spec_task(
        instruction, solution, CI_GEN + CI_SETUP, CI_GEN + CI_CHECK, setup_spec, check_spec
    )
