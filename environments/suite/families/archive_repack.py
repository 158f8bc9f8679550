"""archive-repack: verify backups, restore the newest good one, repack parts of it.

The task: weekly site backups with a SHA256SUMS file, some archives rotten: list the corrupt
ones, restore the newest intact site backup, repack it as a slim archive and a logs archive,
append their checksums. The check regenerates the site tree from the spec and compares the
restore and both archives with it, wants the exact list of corrupt files, and judges each
SHA256SUMS line by the file it names.
"""

from __future__ import annotations

import datetime as dt
import random

from obsspec.environments.suite.families._common import _random_date, _spec_task
from obsspec.environments.suite.registry import GeneratedTask, family

# Shared by setup and check: the files of the site at each snapshot, path -> bytes.
SITE_GEN = r'''import os, random


def words(r, vocabulary, n):
    return " ".join(r.choices(vocabulary, k=n))


def vocabulary(spec):
    r = random.Random(f"{spec['seed']}:words")
    return ["".join(r.choices("etaoinshrdlu", k=r.randint(2, 9))) for _ in range(1500)]


def base_files(spec):
    """The files every snapshot shares, path -> str or bytes."""
    r, vocab = random.Random(spec["seed"]), vocabulary(spec)
    files = {}
    for i in range(spec["pages"]):
        body = "\n".join(f"<p>{words(r, vocab, 120)}</p>" for _ in range(r.randint(30, 60)))
        files[f"site/public/page-{i:03d}.html"] = f"<html><body>\n{body}\n</body></html>\n"
    for name in ("app.js", "vendor.js", "style.css"):
        files[f"site/public/assets/{name}"] = "\n".join(
            f"/* {words(r, vocab, 12)} */ var x{i} = {i};" for i in range(20000)) + "\n"
    for i in range(spec["uploads"]):
        size = r.randint(40, 140) * 1000
        files[f"site/uploads/{2020 + i % 5}/img-{i:04d}.jpg"] = r.randbytes(size)
    for i in range(spec["cache"]):
        files[f"site/cache/{i % 16:x}/{r.getrandbits(40):010x}.html"] = words(r, vocab, 400)
    for name in ("access.log", "error.log", "php-fpm.log"):
        files[f"site/logs/{name}"] = "\n".join(
            f"2024 {words(r, vocab, 9)} status={r.randrange(600)}" for _ in range(140000)) + "\n"
    return files


def snapshot_files(spec, snapshot):
    """The files that differ between snapshots (none of them is in base_files)."""
    r = random.Random(f"{spec['seed']}:{snapshot}")
    news = f"<h1>News {snapshot}</h1>\n<p>{words(r, vocabulary(spec), 300)}</p>\n"
    return {"site/VERSION": f"snapshot {snapshot}\n", "site/public/news.html": news,
            "site/cache/latest.html": news,
            "site/logs/backup.log": f"{snapshot} backup started\n{snapshot} backup done\n"}


def write_tree(root, files):
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())


def site_files(spec, snapshot):
    """The tree in the backup taken on date `snapshot`, path -> bytes."""
    files = {**base_files(spec), **snapshot_files(spec, snapshot)}
    return {rel: data if isinstance(data, bytes) else data.encode()
            for rel, data in files.items()}
'''

ARCHIVE_SETUP = r"""import hashlib, json, os, random, shutil, subprocess
with open("spec.json") as f:
    SPEC = json.load(f)
os.makedirs("/srv/backups")
write_tree("build/base", base_files(SPEC))
for snapshot in SPEC["snapshots"]:  # shared files as hard links, all made before tar reads
    shutil.copytree("build/base", os.path.join("build", snapshot), copy_function=os.link)
    write_tree(os.path.join("build", snapshot), snapshot_files(SPEC, snapshot))
jobs = []
for snapshot in SPEC["snapshots"]:
    jobs.append(subprocess.Popen(["tar", "czf", f"/srv/backups/site-{snapshot}.tar.gz",
                                  "-C", os.path.join("build", snapshot), "site"]))
    r = random.Random(f"{SPEC['seed']}:db:{snapshot}")
    dump = "".join(f"INSERT INTO orders VALUES ({i}, {r.randrange(10**6)}, '{snapshot}');\n"
                   for i in range(40000))
    with open(f"/srv/backups/db-{snapshot}.sql", "w") as f:
        f.write(dump)
    jobs.append(subprocess.Popen(["gzip", "-n", f"/srv/backups/db-{snapshot}.sql"]))
for job in jobs:
    if job.wait():
        raise SystemExit("archiving failed")
names = sorted(os.listdir("/srv/backups"))
with open("/srv/backups/SHA256SUMS", "w") as out:
    for name in names:
        with open(os.path.join("/srv/backups", name), "rb") as f:
            out.write(f"{hashlib.sha256(f.read()).hexdigest()}  {name}\n")
for name in SPEC["corrupt"]:  # bit rot after the checksums were taken
    with open(os.path.join("/srv/backups", name), "r+b") as f:
        size = f.seek(0, 2)
        for pos in (size // 3, size // 2):
            f.seek(pos)
            byte = f.read(1)[0]
            f.seek(pos)
            f.write(bytes([byte ^ 0x5A]))
"""

ARCHIVE_CHECK = r"""import hashlib, re, tarfile
want = site_files(SPEC, SPEC["restore"])
expect_tree("/srv/restore/site", {rel[len("site/"):]: data for rel, data in want.items()})
try:
    with open("/root/corrupt.txt") as f:
        corrupt = f.read().split()
except OSError:
    fail("/root/corrupt.txt does not exist")
if corrupt != SPEC["corrupt"]:
    fail(f"/root/corrupt.txt lists {corrupt}, expected {SPEC['corrupt']}")


def expect_archive(name, wanted, dir_ok):
    # Fail unless /srv/backups/name is a tar.gz of exactly the files of `want` that
    # wanted(path) accepts, plus directories that dir_ok(path) accepts.
    try:
        with tarfile.open(os.path.join("/srv/backups", name), "r:gz") as tar:
            members = tar.getmembers()
            packed = {m.name: tar.extractfile(m).read() for m in members if m.isfile()}
    except (OSError, tarfile.TarError, EOFError) as e:
        fail(f"cannot read /srv/backups/{name}: {e}")
    expected = {rel: data for rel, data in want.items() if wanted(rel)}
    for m in members:
        if not (m.isfile() or m.isdir() and dir_ok(m.name + "/")):
            fail(f"{name} must not contain {m.name}")
    if packed != expected:
        wrong = sorted(set(packed) ^ set(expected)) or ["(contents differ)"]
        fail(f"{name} does not hold the expected files: {wrong[:3]}")


slim, logs = (f"site-{SPEC['restore']}-{kind}.tar.gz" for kind in ("slim", "logs"))
expect_archive(slim, lambda rel: not rel.startswith("site/cache/") and not rel.endswith(".log"),
               lambda d: d.startswith("site/") and not d.startswith("site/cache/"))
expect_archive(logs, lambda rel: rel.startswith("site/logs/"),
               lambda d: d == "site/" or d.startswith("site/logs/"))


def sha256(name):
    try:
        with open(os.path.join("/srv/backups", name), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


# The original checksums come from the build, so judge each line by the file it names: still
# matching for intact archives, still not matching for the corrupt ones.
with open("/srv/backups/SHA256SUMS") as f:
    lines = [re.fullmatch(r"([0-9a-f]{64}) [ *](\S+)", line) for line in f.read().splitlines()]
names = [m[2] for m in lines] if all(lines) else []
n = len(SPEC["listed"])
if names[:n] != SPEC["listed"] or sorted(names[n:]) != sorted([logs, slim]):
    fail(f"SHA256SUMS must keep its lines and end with one line each for {slim} and {logs}")
for m in lines:
    if (m[1] == sha256(m[2])) == (m[2] in SPEC["corrupt"]):
        fail(f"the SHA256SUMS line for {m[2]} is wrong")
"""


@family("archive-repack")
def make_archive_repack(rng: random.Random) -> GeneratedTask:
    """Weekly site backups with a checksum list, some archives rotten: report them, restore the
    newest intact one, repack it as a slim archive and a logs archive, record their checksums.
    Slow parts: gzipping ~35 MB for the slim archive and ~25 MB of logs (extracting the ~70 MB
    tree takes about a second too)."""
    last = _random_date(rng, dt.date(2023, 3, 1), dt.date(2024, 11, 1))
    snapshots = [(last - dt.timedelta(days=7 * k)).isoformat() for k in (2, 1, 0)]
    broken = rng.choice([1, 1, 2])  # how many of the newest site backups rotted
    corrupt = [f"site-{d}.tar.gz" for d in snapshots[3 - broken :]]
    if rng.random() < 0.5:
        corrupt.append(f"db-{rng.choice(snapshots)}.sql.gz")
    corrupt.sort()
    restore = snapshots[2 - broken]
    listed = sorted([f"site-{d}.tar.gz" for d in snapshots] + [f"db-{d}.sql.gz" for d in snapshots])
    spec = {
        "seed": rng.randrange(2**32),
        "snapshots": snapshots,
        "pages": rng.randint(570, 610),
        "uploads": rng.randint(120, 150),
        "cache": rng.randint(800, 1000),
        "corrupt": corrupt,
    }
    instruction = """\
`/srv/backups` holds weekly backups of a web site (`site-<date>.tar.gz`) and of its database
(`db-<date>.sql.gz`), and a `SHA256SUMS` file with their checksums. Some files have rotted
since the checksums were taken.

1. Write the names of the files that no longer match their checksum (just the file names, as
   in `SHA256SUMS`), one per line in sorted order, to `/root/corrupt.txt`.
2. Restore the newest site backup that is intact: extract it into `/srv/restore`, so that its
   `site/` directory becomes `/srv/restore/site`.
3. Repack it as two gzipped tars in `/srv/backups`, named with the date of the backup you
   restored, both with the same `site/...` member paths as the original:
   - `site-<date>-slim.tar.gz`: everything except the `site/cache` directory and `*.log` files;
   - `site-<date>-logs.tar.gz`: only the `site/logs` directory.
4. Append the checksums of the two new archives to `SHA256SUMS`, in the same format, so that
   `sha256sum -c SHA256SUMS` run in `/srv/backups` checks them too. Keep the existing lines.
"""
    slim, logs = f"site-{restore}-slim.tar.gz", f"site-{restore}-logs.tar.gz"
    solution = [
        "cd /srv/backups && ls -la && cat SHA256SUMS",
        "sha256sum -c SHA256SUMS 2>/dev/null | grep -v ': OK$' | cut -d: -f1 | sort"
        " | tee /root/corrupt.txt",
        f"mkdir -p /srv/restore && tar xzf site-{restore}.tar.gz -C /srv/restore",
        f"tar czf {slim} -C /srv/restore --exclude=site/cache --exclude='*.log' site",
        f"tar czf {logs} -C /srv/restore site/logs",
        f"sha256sum {slim} {logs} >> SHA256SUMS && sha256sum -c SHA256SUMS 2>/dev/null | tail -3",
    ]
    check_spec = {**spec, "restore": restore, "listed": listed}
    return _spec_task(
        instruction,
        solution,
        SITE_GEN + ARCHIVE_SETUP,
        SITE_GEN + ARCHIVE_CHECK,
        spec,
        check_spec,
    )
