"""log-analysis: nginx-style access logs, rotated and gzipped; reports with awk and sort.

The task: one question about a service's access logs (5xx per endpoint, 5xx per hour of a
day, top 404 clients, or status codes for one path), answered into a report file. gen.py
writes the logs at build time; the check rebuilds a pristine copy with the same gen.py,
recomputes the report and compares it with the agent's.
"""

from __future__ import annotations

import random
from datetime import date, timedelta

from obsspec.environments.suite.families._common import _data_task
from obsspec.environments.suite.registry import GeneratedTask, family

LOG_GEN = r'''"""Access logs of one task, generated deterministically from params.json.

`python3 gen.py params.json` writes them; the checker imports lines() for a pristine copy.
"""

import gzip
import json
import random
import sys
from datetime import date, timedelta
from pathlib import Path

MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
AGENTS = [
    "Mozilla/5.0 (X11; Linux x86_64; rv:123.0) Gecko/20100101 Firefox/123.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/122.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_3 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
    "curl/8.5.0",
    "python-requests/2.31.0",
    "Go-http-client/1.1",
]
SCANNER_AGENT = "Mozilla/5.0 zgrab/0.x"
PROBES = ["/wp-login.php", "/.env", "/admin.php", "/phpmyadmin/index.php", "/.git/config"]
FIRST_OCTETS = [23, 31, 37, 45, 62, 77, 81, 89, 94, 103, 141, 152, 178, 185, 193, 203, 212]
HOURLY = [2, 1, 1, 1, 1, 2, 4, 7, 9, 10, 10, 10, 9, 10, 10, 9, 9, 8, 8, 7, 6, 5, 4, 3]
SEARCH_WORDS = ["lamp", "desk", "chair", "mug", "cable", "phone", "case", "shoe", "sock", "tent"]


def cumulative(weights):
    out, total = [], 0.0
    for weight in weights:
        total += weight
        out.append(total)
    return out


def clients(seed):
    """Client addresses with long-tailed popularity, plus ten scanners."""
    rng = random.Random(f"{seed}:clients")
    pool = set()
    while len(pool) < 700:
        a, b, c = rng.choice(FIRST_OCTETS), rng.randrange(256), rng.randrange(256)
        pool.add(f"{a}.{b}.{c}.{rng.randrange(1, 255)}")
    ips = sorted(pool)
    rng.shuffle(ips)
    return ips[:690], cumulative(1 / (rank + 1) ** 0.9 for rank in range(690)), ips[690:]


def query(rng, kind):
    if kind == "page":
        return f"?page={rng.randrange(1, 30)}" if rng.random() < 0.6 else ""
    if kind == "id":
        return f"?id={rng.randrange(1, 100000)}"
    if kind == "q":
        return f"?q={rng.choice(SEARCH_WORDS)}&limit={rng.choice((10, 20, 50))}"
    return ""


def request(rng, ep):
    """(target, status, size) of one request to endpoint ep."""
    r = rng.random()
    if r < ep["err5"]:
        status = rng.choice((500, 502, 503, 504))
    elif r < ep["err5"] + ep["p404"]:
        status = 404
    elif ep["method"] == "GET" and r > 0.92:
        status = 304
    else:
        status = 201 if ep["method"] == "POST" else 200
    size = 0 if status == 304 else rng.randrange(120, 48000)
    return ep["path"] + query(rng, ep["query"]), status, size


def day_lines(p, index, day):
    """The lines of the file holding `day`, in time order."""
    rng = random.Random(f"{p['seed']}:{index}")
    ips, ip_cum, scanners = clients(p["seed"])
    endpoints = p["endpoints"]
    ep_cum = cumulative(ep["weight"] for ep in endpoints)
    stamp = f"{day.day:02d}/{MONTHS[day.month - 1]}/{day.year}"
    per_weight = p["lines_per_day"] / sum(HOURLY)
    out = []
    for hour, weight in enumerate(HOURLY):
        n = int(per_weight * weight * rng.uniform(0.85, 1.15))
        picks = zip(rng.choices(ips, cum_weights=ip_cum, k=n),
                    rng.choices(endpoints, cum_weights=ep_cum, k=n))
        events = [(rng.randrange(3600), ip, ep) for ip, ep in picks]
        for ip in scanners:
            if rng.random() < 0.25:  # this scanner is active during this hour
                start = rng.randrange(3000)
                events += [(start + i, ip, None) for i in range(rng.randrange(20, 200))]
        events.sort(key=lambda event: event[0])
        for sec, ip, ep in events:
            if ep is None:
                method, target, status, size = "GET", rng.choice(PROBES), 404, 153
                agent = SCANNER_AGENT
            else:
                target, status, size = request(rng, ep)
                method, agent = ep["method"], rng.choice(AGENTS)
            when = f"{stamp}:{hour:02d}:{sec // 60:02d}:{sec % 60:02d} +0000"
            request_line = f"{method} {target} HTTP/1.1"
            out.append(f'{ip} - - [{when}] "{request_line}" {status} {size} "-" "{agent}"')
    return out


def log_files(p):
    """[(name, day)], newest first: access.log, access.log.1.gz, access.log.2.gz, ..."""
    last = date.fromisoformat(p["last_day"])
    out = []
    for i in range(p["files"]):
        name = "access.log" if i == 0 else f"access.log.{i}"
        out.append((name + (".gz" if i else ""), last - timedelta(days=i)))
    return out


def lines(p):
    """Every line of every file, oldest file first."""
    for index, (_, day) in reversed(list(enumerate(log_files(p)))):
        yield from day_lines(p, index, day)


def main():
    p = json.loads(Path(sys.argv[1]).read_text())
    out = Path(p["dir"])
    out.mkdir(parents=True, exist_ok=True)
    for index, (name, day) in enumerate(log_files(p)):
        data = ("\n".join(day_lines(p, index, day)) + "\n").encode()
        if name.endswith(".gz"):
            data = gzip.compress(data, compresslevel=6, mtime=0)
        (out / name).write_bytes(data)


if __name__ == "__main__":
    main()
'''

LOG_CHECK = r'''"""Recomputes the report from a pristine copy of the logs; compares the agent's."""

import json
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, "/tests")
import gen  # noqa: E402

LINE = re.compile(
    r'(\S+) \S+ \S+ \[(\d\d/\w{3}/\d{4}):(\d\d):\d\d:\d\d [^\]]*\] "\S+ (\S+) [^"]*" (\d{3}) '
)


def records(p):
    for line in gen.lines(p):
        ip, day, hour, target, status = LINE.match(line).groups()
        yield ip, day, hour, target.split("?")[0], int(status)


def ranked(counter, top):
    return sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:top]


def expected(p):
    q = p["question"]
    recs = records(p)
    if q["kind"] == "errors_by_endpoint":
        counts = Counter(path for _, _, _, path, status in recs if 500 <= status <= 599)
        return [f"{n} {path}" for path, n in ranked(counts, q["top"])]
    if q["kind"] == "hourly_errors":
        counts = Counter(hour for _, day, hour, _, status in recs
                         if day == q["stamp"] and 500 <= status <= 599)
        return [f"{h:02d} {counts[f'{h:02d}']}" for h in range(24)]
    if q["kind"] == "top_404_clients":
        counts = Counter(ip for ip, _, _, _, status in recs if status == 404)
        return [f"{ip} {n}" for ip, n in ranked(counts, q["top"])]
    counts = Counter(status for _, _, _, path, status in recs if path == q["path"])
    return [f"{status} {n}" for status, n in sorted(counts.items())]


def main():
    p = json.loads(Path("/tests/params.json").read_text())
    report = Path(p["question"]["report"])
    if not report.is_file():
        sys.exit(f"FAIL: {report} does not exist")
    got = [line.rstrip() for line in report.read_text().rstrip().splitlines()]
    want = expected(p)
    if got != want:
        print("FAIL: report differs\nexpected:", *want[:30], "got:", *got[:30], sep="\n")
        sys.exit(1)
    print("ok")


main()
'''

# (method, path, kind of query string)
LOG_ENDPOINTS = [
    ("GET", "/", None),
    ("GET", "/api/v1/products", "page"),
    ("GET", "/api/v1/product", "id"),
    ("GET", "/api/v1/search", "q"),
    ("POST", "/api/v1/cart", None),
    ("GET", "/api/v1/cart", None),
    ("POST", "/api/v1/orders", None),
    ("GET", "/api/v1/orders", "page"),
    ("POST", "/api/v1/login", None),
    ("POST", "/api/v1/logout", None),
    ("GET", "/api/v1/users/me", None),
    ("PUT", "/api/v1/users/me", None),
    ("GET", "/api/v1/recommendations", "id"),
    ("GET", "/static/app.js", None),
    ("GET", "/static/app.css", None),
    ("GET", "/healthz", None),
    ("POST", "/api/v1/payments", None),
    ("GET", "/api/v1/inventory", "page"),
]
# Spelled out, not strftime("%b"): the host's locale must not change the tasks.
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
LOG_APPS = ["shop", "billing", "catalog", "gateway", "accounts", "storefront", "media", "checkout"]
LOG_TOTAL_LINES = 1_800_000  # one zcat | awk pass over all files: ~1.2-2.5 s on one CPU


def _log_endpoints(rng: random.Random) -> list[dict]:
    chosen = rng.sample(LOG_ENDPOINTS, rng.randint(10, 14))
    flaky = set(rng.sample(range(len(chosen)), 3))  # a few endpoints fail far more often
    return [
        {
            "method": method,
            "path": path,
            "query": query,
            "weight": rng.randint(1, 20),
            "err5": round(
                rng.uniform(0.008, 0.04) if i in flaky else rng.uniform(0.0005, 0.004), 5
            ),
            "p404": round(
                rng.uniform(0.005, 0.02) if query == "id" else rng.uniform(0.0, 0.004), 5
            ),
        }
        for i, (method, path, query) in enumerate(chosen)
    ]


def _log_question(rng: random.Random, p: dict) -> tuple[dict, str, str, str]:
    """(question params, question text, result format, awk pipeline after `zcat ... |`)."""
    kind = rng.choice(["errors_by_endpoint", "hourly_errors", "top_404_clients", "status_for_path"])
    if kind == "errors_by_endpoint":
        top = rng.randint(4, 8)
        q = {"kind": kind, "top": top, "report": "/root/endpoint_errors.txt"}
        text = (
            "Which endpoints fail most? Across **all** log files, count the requests answered "
            "with a 5xx status (500-599) per request path, with the query string removed "
            "(`/api/v1/orders?page=2` counts as `/api/v1/orders`; the method does not matter)."
        )
        fmt = (
            f"the {top} paths with the most such responses, one per line as `<count> <path>` "
            "(single space), sorted by count descending, ties by path in ascending byte order"
        )
        awk = (
            "awk '$9 ~ /^5/ {sub(/\\?.*/, \"\", $7); n[$7]++} END {for (p in n) print n[p], p}' "
            f"| sort -k1,1nr -k2,2 | head -n {top}"
        )
    elif kind == "hourly_errors":
        day = date.fromisoformat(p["last_day"]) - timedelta(days=rng.randrange(1, p["files"]))
        stamp = f"{day.day:02d}/{MONTHS[day.month - 1]}/{day.year}"
        q = {"kind": kind, "stamp": stamp, "report": f"/root/errors_{day.isoformat()}.txt"}
        text = (
            f"How many requests were answered with a 5xx status (500-599) in each hour of "
            f"{day.isoformat()} (the logs are in UTC)?"
        )
        fmt = (
            "24 lines, one per hour from `00` to `23` in order, as `<HH> <count>` (single "
            "space, hour zero-padded to two digits, `0` for hours without such responses)"
        )
        awk = (
            f"awk -v day={stamp} '$9 ~ /^5/ && substr($4, 2, 11) == day "
            "{n[substr($4, 14, 2)]++} END {for (h = 0; h < 24; h++) "
            'printf "%02d %d\\n", h, n[sprintf("%02d", h)]}\''
        )
    elif kind == "top_404_clients":
        top = rng.randint(5, 10)
        q = {"kind": kind, "top": top, "report": "/root/top_404_clients.txt"}
        text = (
            "Which clients hit the most missing pages? Across **all** log files, count the "
            "requests answered with status 404 per client IP address."
        )
        fmt = (
            f"the {top} addresses with the most 404 responses, one per line as `<ip> <count>` "
            "(single space), sorted by count descending, ties by the address as text in "
            "ascending byte order"
        )
        awk = (
            f"awk '$9 == 404 {{print $1}}' | sort | uniq -c | sort -k1,1nr -k2,2 "
            f"| head -n {top} | awk '{{print $2, $1}}'"
        )
    else:
        path = rng.choice(p["endpoints"])["path"]
        q = {"kind": kind, "path": path, "report": "/root/status_counts.txt"}
        text = (
            f"How did requests to `{path}` fare? Across **all** log files, count the requests "
            f"(any method) whose path, ignoring any query string, is exactly `{path}`, "
            "per HTTP status code."
        )
        fmt = (
            "one line per status code that occurs, as `<status> <count>` (single space), "
            "sorted by status code ascending"
        )
        awk = (
            f'awk -v p={path} \'$7 == p || index($7, p "?") == 1 {{n[$9]++}} '
            "END {for (s in n) print s, n[s]}' | sort -n"
        )
    return q, text, fmt, awk


@family("log-analysis")
def log_analysis(rng: random.Random) -> GeneratedTask:
    app = rng.choice(LOG_APPS)
    files = rng.randint(4, 6)
    p = {
        "seed": rng.randrange(2**31),
        "dir": f"/var/log/{app}",
        "files": files,
        "last_day": (date(2024, 1, 10) + timedelta(days=rng.randrange(330))).isoformat(),
        "lines_per_day": LOG_TOTAL_LINES // files,
        "endpoints": _log_endpoints(rng),
    }
    q, text, fmt, awk = _log_question(rng, p)
    p["question"] = q
    logs = f"{p['dir']}/access.log*"
    instruction = f"""
The `{app}` service writes its access logs (nginx "combined" format) to `{p["dir"]}/`. The
newest day is in `access.log`; older days were rotated and gzip-compressed to
`access.log.1.gz`, `access.log.2.gz`, ... Each file holds one day.

{text}

Write the result to `{q["report"]}`: {fmt}. No header and no other text.
"""
    solution = [
        f"ls -l {p['dir']} && head -n 3 {p['dir']}/access.log",
        f"zcat -f {logs} | awk '{{print $9}}' | sort | uniq -c | sort -rn",
        f"zcat -f {logs} | {awk} > {q['report']}",
        f"cat {q['report']}",
    ]
    return _data_task(instruction, LOG_GEN, LOG_CHECK, p, solution)
