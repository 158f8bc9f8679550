"""Task families about files: organising, text processing, find/xargs, permissions, archives
and configuration.

Each family draws its parameters from `rng` into a JSON spec. Setup and check are small Python
scripts (stdlib only, they run in the task image) that read the spec: setup builds the starting
state from it, check recomputes what the solved state must be. Bulky data is generated at build
time from seeds in the spec, so task directories stay small, and the check regenerates the same
bytes rather than trusting anything the agent could have edited.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable

from environments.suite.generate import GeneratedTask, family

# Prepended to every check script: load the spec next to it, fail with a message.
CHECK_HEAD = r'''import json, os, random, sys
HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "spec.json")) as f:
    SPEC = json.load(f)


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def files_under(root):
    """Relative paths of everything that is not a directory under root."""
    found = set()
    for dirpath, dirnames, names in os.walk(root):
        found.update(os.path.relpath(os.path.join(dirpath, n), root) for n in names)
    return found


def expect_tree(root, expected):
    """Fail unless root holds exactly the expected regular files (rel -> bytes)."""
    found = files_under(root)
    missing, extra = sorted(set(expected) - found), sorted(found - set(expected))
    if missing:
        fail(f"{root}: missing {len(missing)} files, e.g. {missing[:3]}")
    if extra:
        fail(f"{root}: unexpected files, e.g. {extra[:3]}")
    for rel in sorted(expected):
        path = os.path.join(root, rel)
        if os.path.islink(path) or not os.path.isfile(path):
            fail(f"{path} is not a regular file")
        with open(path, "rb") as f:
            if f.read() != expected[rel]:
                fail(f"{path} does not have the expected content")
'''


def _dump(spec: dict) -> str:
    return json.dumps(spec, indent=1, sort_keys=True) + "\n"


def _task(
    instruction: str,
    solution: list[str],
    setup_py: str,
    check_py: str,
    setup_spec: dict,
    check_spec: dict,
    setup_sh: str = "",
) -> GeneratedTask:
    """A task whose setup and check are Python scripts driven by JSON specs (setup_sh: shell
    commands to run before setup.py)."""
    return GeneratedTask(
        instruction=instruction,
        setup_sh=setup_sh + "python3 setup.py\n",
        check_sh='python3 "$(dirname "$0")/check.py"\n',
        solution=solution,
        setup_files={"setup.py": setup_py, "spec.json": _dump(setup_spec)},
        test_files={"check.py": CHECK_HEAD + check_py, "spec.json": _dump(check_spec)},
    )


def _random_date(rng: random.Random, first: dt.date, last: dt.date) -> dt.date:
    return dt.date.fromordinal(rng.randint(first.toordinal(), last.toordinal()))


def _unique_names(rng: random.Random, n: int, make: Callable[[random.Random], str]) -> list[str]:
    """n distinct names from make(rng), in the order drawn."""
    names: list[str] = []
    seen: set[str] = set()
    while len(names) < n:
        name = make(rng)
        if name not in seen:
            seen.add(name)
            names.append(name)
    return names


# --- file-organize: sort a camera-card dump into a dated library ---------------------------

# Content of a media file depends on its stem only, so a duplicate has identical bytes.
ORGANIZE_SETUP = r"""import json, os, random
with open("spec.json") as f:
    SPEC = json.load(f)
for rel, key, size in SPEC["files"]:
    path = os.path.join("/srv/import", rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(random.Random(key).randbytes(size))
"""

ORGANIZE_CHECK = r"""
for root in ("/srv/photos", "/srv/videos"):
    expected = {rel: random.Random(key).randbytes(size)
                for rel, (key, size) in SPEC[root].items()}
    expect_tree(root, expected)
left = sorted(files_under("/srv/import")) if os.path.isdir("/srv/import") else []
if left:
    fail(f"/srv/import still holds files, e.g. {left[:3]}")
"""

CAMERA_BRANDS = ["CANON", "NIKON", "MSDCF", "OLYMP", "FUJI"]


def _media_stem(rng: random.Random, prefix: str) -> str:
    day = _random_date(rng, dt.date(2019, 1, 1), dt.date(2024, 12, 31))
    clock = f"{rng.randrange(24):02d}{rng.randrange(60):02d}{rng.randrange(60):02d}"
    return f"{prefix}_{day:%Y%m%d}_{clock}"


@family("file-organize")
def make_file_organize(rng: random.Random) -> GeneratedTask:
    """Camera cards dumped into /srv/import: file photos by month and videos by year, drop the
    duplicates and the junk. Slow part: a per-file shell loop over several hundred files."""
    photo_prefix = rng.choice(["IMG", "DSC", "PIC"])
    nested = rng.random() < 0.5  # photos in YYYY/MM or in YYYY/YYYY-MM
    folders = [
        f"card{c}/DCIM/{100 + k}{rng.choice(CAMERA_BRANDS)}"
        for c in range(1, rng.randint(2, 4) + 1)
        for k in range(rng.randint(1, 2))
    ]
    photos = _unique_names(rng, rng.randint(250, 300), lambda r: _media_stem(r, photo_prefix))
    videos = _unique_names(rng, rng.randint(200, 240), lambda r: _media_stem(r, "VID"))

    files: list[list] = []  # [path under /srv/import, content key, size]
    expected: dict[str, dict[str, list]] = {"/srv/photos": {}, "/srv/videos": {}}
    for stems, kind, exts, sizes in (
        (photos, "photos", [".JPG", ".jpg", ".jpeg", ".JPG"], (8_000, 60_000)),
        (videos, "videos", [".MP4", ".mp4"], (40_000, 160_000)),
    ):
        for stem in stems:
            size = rng.randint(*sizes)
            copies = 2 if rng.random() < 0.1 else 1  # imported from two cards
            for folder in rng.sample(folders, copies):
                files.append([f"{folder}/{stem}{rng.choice(exts)}", stem, size])
            year, month = stem[4:8], stem[8:10]
            if kind == "videos":
                rel = f"{year}/{stem}.mp4"
                if rng.random() < 0.7:  # camera thumbnail sidecar
                    files.append([f"{folder}/{stem}.THM", stem + ".thm", 3_000])
            else:
                rel = f"{year}/{f'{year}-{month}' if nested else month}/{stem}.jpg"
            expected[f"/srv/{kind}"][rel] = [stem, size]
    for folder in folders:
        for junk in (".DS_Store", "Thumbs.db"):
            if rng.random() < 0.5:
                files.append([f"{folder}/{junk}", folder + junk, rng.randint(200, 6_000)])
    files.sort()

    month_dir = "<YYYY>/<YYYY>-<MM>" if nested else "<YYYY>/<MM>"
    example = f"{photo_prefix}_20230412_101502"
    instruction = f"""\
Several camera memory cards were copied into `/srv/import` (folders `card*/DCIM/*`). Organise
them into a library:

- Every photo (extension `.jpg` or `.jpeg`, in any letter case) must end up in
  `/srv/photos/{month_dir}/`, where the year and month come from the date in the file name
  (`{example}.JPG` was taken on 2023-04-12, so it belongs in
  `/srv/photos/{"2023/2023-04" if nested else "2023/04"}/`). Name it after the original file
  with the extension normalised to lowercase `.jpg`: `{example}.jpg`.
- Every video (extension `.mp4`, any case, e.g. `VID_20230412_101502.MP4`) must end up in
  `/srv/videos/<YYYY>/`, named with a lowercase `.mp4` extension.
- Some files were imported twice (the same name on two cards, identical content): the library
  must hold exactly one copy of each.
- Everything else in the dump (`.THM` thumbnails, `.DS_Store`, `Thumbs.db`) is junk: delete
  it. When you are done, no files may be left under `/srv/import` (empty folders are fine).

`/srv/photos` and `/srv/videos` must contain nothing but the photos and videos.
"""
    photo_dir = "${b:4:4}/${b:4:4}-${b:8:2}" if nested else "${b:4:4}/${b:8:2}"
    solution = [
        "find /srv/import -type f | sed 's/.*\\.//' | sort | uniq -c",
        "find /srv/import -type f \\( -iname '*.thm' -o -name .DS_Store -o -name Thumbs.db \\)"
        " -delete",
        "find /srv/import -type f \\( -iname '*.jpg' -o -iname '*.jpeg' \\) | while read -r f;"
        f' do b=$(basename "$f"); d=/srv/photos/{photo_dir}; mkdir -p "$d";'
        ' mv "$f" "$d/${b%.*}.jpg"; done',
        "find /srv/import -type f -iname '*.mp4' | while read -r f; do b=$(basename \"$f\");"
        ' d=/srv/videos/${b:4:4}; mkdir -p "$d"; mv "$f" "$d/${b%.*}.mp4"; done',
        "find /srv/import -type f | wc -l; find /srv/photos /srv/videos -type f | wc -l",
    ]
    return _task(instruction, solution, ORGANIZE_SETUP, ORGANIZE_CHECK, {"files": files}, expected)


# --- text-logs: reports from rotated web logs with awk, a config rewrite with sed ------------

# Shared by setup and check: the log lines of each day, from the seed in the spec.
LOGS_GEN = r'''import datetime, random
MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
AGENTS = [
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/122.0.0.0"
    " Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:123.0) Gecko/20100101 Firefox/123.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_3_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML,"
    " like Gecko) Version/17.3 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko)"
    " Version/17.2 Safari/605.1.15",
    "curl/8.5.0", "python-requests/2.31.0",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
]
STATUSES = [200, 301, 304, 404, 500, 502, 503]
STATUS_WEIGHTS = [80, 3, 8, 5, 2, 1, 1]


def pools(spec):
    r = random.Random(spec["seed"])
    ips = [f"{r.choice([10, 172, 192, 203])}.{r.randrange(256)}.{r.randrange(256)}."
           f"{r.randrange(1, 255)}" for _ in range(1500)]
    weights = [1 / (i + 1) ** 0.8 for i in range(len(ips))]
    words = spec["words"]
    paths = sorted({"/" + "/".join(r.sample(words, r.randint(1, 3))) for _ in range(300)})
    paths += [p + "?id=" + str(r.randrange(1000)) for p in r.sample(paths, 60)]
    return ips, weights, paths


def day_lines(spec, day, pool):
    ips, weights, paths = pool
    r = random.Random(f"{spec['seed']}:{day}")
    n = spec["per_day"][day]
    date = datetime.date.fromisoformat(spec["start"]) + datetime.timedelta(days=day)
    stamp = f"{date.day:02d}/{MONTHS[date.month - 1]}/{date.year}"
    who = r.choices(ips, weights=weights, k=n)
    what = r.choices(paths, k=n)
    codes = r.choices(STATUSES, weights=STATUS_WEIGHTS, k=n)
    agents = r.choices(AGENTS, k=n)
    refs = r.choices(["-", "-", f"https://{spec['site']}/"] + paths[:20], k=n)
    for i in range(n):
        minute, sec = divmod(i * 86400 // n, 60)
        code = codes[i]
        size = 0 if code == 304 else r.randrange(120, 90000)
        method = "POST" if i % 11 == 0 else "GET"
        yield (f'{who[i]} - - [{stamp}:{minute // 60:02d}:{minute % 60:02d}:{sec:02d} +0000] '
               f'"{method} {what[i]} HTTP/1.1" {code} {size} "{refs[i]}" "{agents[i]}"\n')


def log_name(spec, day):
    """Daily rotation: the newest day is access.log, then .1, then .2.gz and older."""
    age = len(spec["per_day"]) - 1 - day
    return "access.log" + ("" if age == 0 else f".{age}" if age == 1 else f".{age}.gz")
'''

LOGS_SETUP = r"""import gzip, json, os
with open("spec.json") as f:
    SPEC = json.load(f)
os.makedirs("/var/log/app", exist_ok=True)
pool = pools(SPEC)
for day in range(len(SPEC["per_day"])):
    path = "/var/log/app/" + log_name(SPEC, day)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt") as f:
        f.writelines(day_lines(SPEC, day, pool))
os.makedirs(os.path.dirname(SPEC["conf_path"]), exist_ok=True)
with open(SPEC["conf_path"], "w") as f:
    f.write(SPEC["conf"])
"""

LOGS_CHECK = r"""import collections


def report(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        fail(f"{path} does not exist")


errors, requests, bytes_by_path = collections.Counter(), collections.Counter(), {}
visitors = collections.defaultdict(set)
pool = pools(SPEC)
for day in range(len(SPEC["per_day"])):
    date = datetime.date.fromisoformat(SPEC["start"]) + datetime.timedelta(days=day)
    for line in day_lines(SPEC, day, pool):
        f = line.split()
        requests[date] += 1
        visitors[date].add(f[0])
        if f[8].startswith("5"):
            errors[f[0]] += 1
        path = f[6].split("?")[0]
        bytes_by_path[path] = bytes_by_path.get(path, 0) + int(f[9])

top = sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
want = "".join(f"{n} {ip}\n" for ip, n in top)
if report("/root/report/errors_by_ip.txt") != want:
    fail("errors_by_ip.txt is wrong; expected:\n" + want)
want = "date,requests,unique_ips\n" + "".join(
    f"{d.isoformat()},{requests[d]},{len(visitors[d])}\n" for d in sorted(requests))
if report("/root/report/daily.csv") != want:
    fail("daily.csv is wrong; expected:\n" + want)
top = sorted(bytes_by_path.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
want = "".join(f"{p} {n}\n" for p, n in top)
if report("/root/report/top_paths.txt") != want:
    fail("top_paths.txt is wrong; expected:\n" + want)
if report(SPEC["conf_path"]) != SPEC["conf_want"]:
    fail(SPEC["conf_path"] + " is not as required")
"""

LOG_WORDS = (  # path segments
    "api v1 v2 items cart checkout login static img css js search user orders admin health"
    " assets feed blog tags help"
)

NGINX_CONF = """\
# {site}: reverse proxy in front of the app servers
upstream app_backend {{
    server {old}:8080 max_fails=3 fail_timeout=10s;
    server {decoy}:8080 backup;
    keepalive 16;
}}

server {{
    listen 80;
    server_name {site};
    client_max_body_size {body}m;
    access_log /var/log/app/access.log combined;

    location / {{
        proxy_pass http://app_backend;
        proxy_set_header Host $host;
    }}

    location /metrics {{
        allow {old};
        allow {decoy};
        deny all;
        proxy_pass http://{old}:9100;
    }}
}}
# primary app server: {old} (see ticket OPS-{ticket}); standby: {decoy}
"""


def _nginx_conf(rng: random.Random) -> tuple[dict[str, str], str, str]:
    """Config parameters, the starting text and the text after the requested edit."""
    net = f"10.{rng.randrange(256)}.{rng.randrange(256)}"
    last = rng.randint(11, 24)
    p = {
        "site": rng.choice(["shop", "portal", "api", "www"]) + ".example.com",
        "old": f"{net}.{last}",
        "decoy": f"{net}.{last}{rng.randrange(10)}",  # the old address is a prefix of it
        "new": f"{net}.{rng.randint(30, 99)}",
        "body": str(rng.choice([1, 2, 8, 10])),
        "new_body": str(rng.choice([16, 32, 50, 64, 100])),
        "ticket": str(rng.randint(1000, 9999)),
    }
    before = NGINX_CONF.format(**p)
    after = NGINX_CONF.format(**{**p, "old": p["new"], "body": p["new_body"]})
    return p, before, after


@family("text-logs")
def make_text_logs(rng: random.Random) -> GeneratedTask:
    """Three reports over a week of rotated (partly gzipped) access logs, plus a sed edit of an
    nginx config with a look-alike address. Slow part: each report is a pass over ~1M lines."""
    days = rng.randint(7, 9)
    conf, before, after = _nginx_conf(rng)
    spec = {
        "site": conf["site"],
        "seed": rng.randrange(2**32),
        "start": _random_date(rng, dt.date(2023, 1, 1), dt.date(2024, 10, 1)).isoformat(),
        "per_day": [rng.randint(160_000, 180_000) * 8 // days for _ in range(days)],
        "words": sorted(rng.sample(LOG_WORDS.split(), 14)),
    }
    conf_path = f"/etc/nginx/conf.d/{conf['site'].split('.')[0]}.conf"
    setup_spec = {**spec, "conf_path": conf_path, "conf": before}
    check_spec = {**spec, "conf_path": conf_path, "conf_want": after}
    old_re = conf["old"].replace(".", "\\.")

    instruction = f"""\
The web server's access logs (nginx "combined" format) are in `/var/log/app`: `access.log`
is today's, `access.log.1` yesterday's, and older days are compressed (`access.log.2.gz`, ...).
Write three reports covering **all** of these logs together, into `/root/report/`:

1. `errors_by_ip.txt`: the 10 client IPs with the most requests answered with a 5xx status,
   one per line as `<count> <ip>` (single space), most errors first; ties by IP in plain
   byte (ASCII) order.
2. `daily.csv`: the header line `date,requests,unique_ips`, then one line per day (ISO date
   `YYYY-MM-DD`, oldest first) with the number of requests and of distinct client IPs.
3. `top_paths.txt`: the 5 request paths (without any `?query` part) that sent the most
   response bytes in total, one per line as `<path> <total_bytes>`, largest first (ties by
   path in byte order).

Then edit `{conf_path}`: the app server moved from `{conf["old"]}` to
`{conf["new"]}`. Replace every occurrence of exactly that address (and no other) with the
new one, and set `client_max_body_size` to `{conf["new_body"]}m`. Change nothing else.
"""
    months = 'split("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec",m," ");'
    solution = [
        "cd /var/log/app && ls -la && mkdir -p /root/report",
        "zcat -f access.log* | awk '$9 ~ /^5/ {print $1}' | sort | uniq -c"
        " | sort -k1,1nr -k2,2 | head -10 | awk '{print $1, $2}' > /root/report/errors_by_ip.txt",
        "zcat -f access.log* | awk '{k=substr($4, 2, 11); n[k]++;"
        " if (!((k, $1) in seen)) {seen[k, $1]=1; u[k]++}}"
        f' END {{{months} for (i in m) mi[m[i]]=sprintf("%02d", i);'
        ' for (k in n) {split(k, d, "/"); print d[3] "-" mi[d[2]] "-" d[1] "," n[k] "," u[k]}}\''
        " | sort | sed '1i date,requests,unique_ips' > /root/report/daily.csv",
        'zcat -f access.log* | awk \'{p=$7; sub(/\\?.*/, "", p); b[p]+=$10}'
        " END {for (p in b) print b[p], p}' | sort -k1,1nr -k2,2 | head -5"
        " | awk '{print $2, $1}' > /root/report/top_paths.txt",
        f"sed -i -e 's/\\b{old_re}\\b/{conf['new']}/g' -e 's/client_max_body_size [0-9]*m;"
        f"/client_max_body_size {conf['new_body']}m;/' {conf_path}",
    ]
    return _task(
        instruction,
        solution,
        LOGS_GEN + LOGS_SETUP,
        LOGS_GEN + LOGS_CHECK,
        setup_spec,
        check_spec,
    )


# --- find-cleanup: free space on a CI server with find and xargs -----------------------------

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
    return _task(
        instruction, solution, CI_GEN + CI_SETUP, CI_GEN + CI_CHECK, setup_spec, check_spec
    )


# --- permissions-fix: repair ownership and modes of an app tree, make its build runnable ------

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
    return _task(
        instruction,
        solution,
        PERMS_GEN + PERMS_SETUP,
        PERMS_GEN + PERMS_CHECK,
        spec,
        spec,
        setup_sh=useradd,
    )


# --- archive-repack: verify backups, restore the newest good one, repack parts of it ---------

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
    return _task(
        instruction,
        solution,
        SITE_GEN + ARCHIVE_SETUP,
        SITE_GEN + ARCHIVE_CHECK,
        spec,
        check_spec,
    )


# --- env-config: point a tool at the right data via its INI file and root's shell profile ----

# Shared by setup and check: the order exports of each quarter.
SALES_GEN = r'''import datetime, random
REGIONS = ["amer", "apac", "emea", "latam"]


def quarter_rows(spec, quarter):
    """Rows (date, region, product, amount) of quarter "YYYY-qN"."""
    r = random.Random(f"{spec['seed']}:{quarter}")
    year, q = int(quarter[:4]), int(quarter[-1])
    first = datetime.date(year, 3 * q - 2, 1).toordinal()
    n = spec["rows"][quarter]
    days = sorted(r.choices(range(first, first + 90), k=n))
    regions = r.choices(REGIONS, weights=[5, 3, 4, 1], k=n)
    products = r.choices(spec["products"], k=n)
    for i in range(n):
        date = datetime.date.fromordinal(days[i]).isoformat()
        yield date, regions[i], products[i], r.randint(100, 200_000)  # in cents
'''

# The tool the agent has to configure (installed as /opt/<tool>/bin/<tool>).
SALES_TOOL = r'''#!/usr/bin/env python3
"""{tool}: roll up order exports into per-product totals. Usage: {tool} report|check"""
import configparser, csv, os, sys
from decimal import Decimal


def settings():
    path = os.environ.get("{var}")
    if not path:
        sys.exit("{tool}: {var} is not set (it must name the configuration file)")
    cfg = configparser.ConfigParser()
    if not cfg.read(path):
        sys.exit(f"{tool}: cannot read {{path}}")
    return cfg


def report(cfg):
    region, minimum = cfg["filter"]["region"], Decimal(cfg["filter"]["min_amount"])
    totals = {{}}
    with open(cfg["input"]["path"], newline="") as f:
        for row in csv.DictReader(f):
            amount, key = Decimal(row["amount"]), (row["region"], row["product"])
            if amount >= minimum and region in ("*", key[0]):
                orders, total = totals.get(key, (0, 0))
                totals[key] = orders + 1, total + amount
    delimiter = {{"csv": ",", "tsv": "\t"}}[cfg["output"]["format"]]
    with open(cfg["output"]["path"], "w", newline="") as f:
        out = csv.writer(f, delimiter=delimiter, lineterminator="\n")
        out.writerow(["region", "product", "orders", "total"])
        for (reg, product), (orders, total) in sorted(totals.items()):
            out.writerow([reg, product, orders, total])
    print(f"wrote {{len(totals)}} rows to {{cfg['output']['path']}}")


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "check":
        cfg = settings()
        for section in cfg.sections():
            print(section, dict(cfg[section]))
    elif command == "report":
        report(settings())
    else:
        sys.exit(__doc__)
'''

SALES_INI = """\
# {tool} configuration; all paths are absolute.

[input]
# order export: date,region,product,amount
path = {input}

[filter]
# a region (amer, apac, emea, latam), or * for all of them
region = {region}
# ignore orders below this amount
min_amount = {min_amount}

[output]
path = {output}
# csv or tsv
format = {format}
"""

CONFIG_SETUP = r"""import json, os
with open("spec.json") as f:
    SPEC = json.load(f)
tool = SPEC["tool"]
os.makedirs(f"/srv/{tool}/data")
os.makedirs(f"/srv/{tool}/reports")
for quarter in SPEC["quarters"]:
    with open(f"/srv/{tool}/data/{quarter}.csv", "w") as f:
        f.write("date,region,product,amount\n")
        f.writelines(f"{d},{g},{p},{a // 100}.{a % 100:02d}\n"
                     for d, g, p, a in quarter_rows(SPEC, quarter))
for path, text, mode in SPEC["install"]:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
"""

CONFIG_CHECK = r"""import collections, configparser, subprocess
tool, var = SPEC["tool"], SPEC["var"]
cfg = configparser.ConfigParser()
try:
    if not cfg.read(SPEC["ini"]):
        fail(f"cannot read {SPEC['ini']}")
except configparser.Error as e:
    fail(f"{SPEC['ini']} does not parse: {e}")
if {s: dict(cfg[s]) for s in cfg.sections()} != SPEC["settings"]:
    fail(f"{SPEC['ini']} does not hold exactly the required settings")
with open(SPEC["ini"]) as f:
    comments = [line for line in f.read().splitlines() if line.startswith("#")]
if comments != SPEC["comments"]:
    fail(f"the comments in {SPEC['ini']} changed")
tool_path, tool_text, _ = SPEC["install"][0]
with open(tool_path) as f:
    if f.read() != tool_text:
        fail(f"{tool_path} was modified")

# Fresh shells, as root would start them: the profile must set the variable and the PATH.
for flag in ("-lc", "-ic"):
    env = {"HOME": "/root", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    out = subprocess.run(["bash", flag, f'printf "%s\\n" "${var}"; command -v {tool}'],
                         env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL).stdout
    if out.split() != [SPEC["ini"], tool_path]:
        fail(f"in `bash {flag}`, {var} and the tool on PATH are not set up: {out!r}")

s = SPEC["settings"]
minimum, region = int(s["filter"]["min_amount"]) * 100, s["filter"]["region"]
totals = collections.defaultdict(lambda: [0, 0])
for date, reg, product, amount in quarter_rows(SPEC, SPEC["quarter"]):
    if amount >= minimum and reg == region:
        totals[reg, product][0] += 1
        totals[reg, product][1] += amount
sep = "\t" if s["output"]["format"] == "tsv" else ","
want = sep.join(["region", "product", "orders", "total"]) + "\n" + "".join(
    sep.join([reg, product, str(n), f"{t // 100}.{t % 100:02d}"]) + "\n"
    for (reg, product), (n, t) in sorted(totals.items()))
try:
    with open(s["output"]["path"]) as f:
        got = f.read()
except OSError:
    fail(f"the report {s['output']['path']} does not exist")
if got != want:
    fail(f"the report {s['output']['path']} is not what the tool makes from the required settings")
"""

TOOL_NAMES = ["tally", "rollup", "salesctl", "sumup", "ledgerly", "orderstat"]


@family("env-config")
def make_env_config(rng: random.Random) -> GeneratedTask:
    """A reporting tool that reads an INI file named by an environment variable: edit the INI
    (the key `path` is in two sections), export the variable and extend PATH in root's
    .bashrc, run the report. Slow part: the report reads ~1M CSV rows."""
    tool = rng.choice(TOOL_NAMES)
    var = tool.upper() + "_CONFIG"
    year = rng.randint(2021, 2024)
    quarters = [f"{year}-q{q}" for q in range(1, 5)]
    quarter = rng.choice(quarters[1:])
    region = rng.choice(["amer", "apac", "emea", "latam"])
    fmt = rng.choice(["csv", "tsv"])
    ini = f"/etc/{tool}/{tool}.ini"
    before = {
        "input": {"path": f"/srv/{tool}/data/{quarters[0]}.csv"},
        "filter": {"region": "*", "min_amount": "0"},
        "output": {"path": f"/srv/{tool}/reports/report.csv", "format": "csv"},
    }
    after = {
        "input": {"path": f"/srv/{tool}/data/{quarter}.csv"},
        "filter": {"region": region, "min_amount": str(rng.choice([50, 100, 250, 500]))},
        "output": {"path": f"/srv/{tool}/reports/{region}-{quarter}.{fmt}", "format": fmt},
    }

    def ini_text(v: dict) -> str:
        return SALES_INI.format(
            tool=tool,
            input=v["input"]["path"],
            output=v["output"]["path"],
            format=v["output"]["format"],
            **v["filter"],
        )

    spec = {
        "tool": tool,
        "seed": rng.randrange(2**32),
        # Only the quarter to report on is big: it is the one the tool reads.
        "rows": {
            q: rng.randint(1_000_000, 1_100_000) if q == quarter else rng.randint(150_000, 300_000)
            for q in quarters
        },
        "products": sorted(
            {f"{rng.choice(['widget', 'gadget', 'gizmo'])}-{rng.randrange(60)}" for _ in range(40)}
        ),
        "quarters": quarters,
        "install": [
            [f"/opt/{tool}/bin/{tool}", SALES_TOOL.format(tool=tool, var=var), 0o755],
            [ini, ini_text(before), 0o644],
        ],
    }
    check_spec = {
        **spec,
        "var": var,
        "ini": ini,
        "quarter": quarter,
        "settings": after,
        "comments": [ln for ln in ini_text(before).splitlines() if ln.startswith("#")],
    }
    data = f"/srv/{tool}/data/{quarter}.csv"
    instruction = f"""\
The reporting tool `/opt/{tool}/bin/{tool}` reads its settings from the INI file named
by the environment variable `{var}`. Configure it and produce a report:

1. Edit `{ini}` so that the tool
   - reads `{data}`,
   - only counts the region `{region}` and ignores orders below `{after["filter"]["min_amount"]}`,
   - writes `{after["output"]["path"]}` in `{fmt}` format.

   Change only those values (`[input] path`, `[filter] region` and `min_amount`, `[output]
   path` and `format`); keep every other line, comments included.
2. Set up root's shell in `/root/.bashrc`: export `{var}={ini}` and add
   `/opt/{tool}/bin` to `PATH`, so that new shells (`bash -l` as well as `bash -i`) can run
   `{tool}` by name.
3. Run `{tool} report` once, so that the report file exists.
"""
    set_value = "/^\\[{sec}\\]/,/^\\[/ s|^{key} *=.*|{key} = {value}|"
    edits = [
        ("input", "path", data),
        ("filter", "region", region),
        ("filter", "min_amount", after["filter"]["min_amount"]),
        ("output", "path", after["output"]["path"]),
        ("output", "format", fmt),
    ]
    sed = " ".join(f"-e '{set_value.format(sec=s, key=k, value=v)}'" for s, k, v in edits)
    solution = [
        f"cat {ini}; ls -la /srv/{tool}/data; /opt/{tool}/bin/{tool} report",
        f"sed -i {sed} {ini} && cat {ini}",
        f"printf 'export {var}={ini}\\nexport PATH=\"$PATH:/opt/{tool}/bin\"\\n' >> ~/.bashrc"
        " && source ~/.bashrc",
        f"{tool} report && head -3 {after['output']['path']}",
    ]
    return _task(
        instruction,
        solution,
        SALES_GEN + CONFIG_SETUP,
        SALES_GEN + CONFIG_CHECK,
        spec,
        check_spec,
    )
