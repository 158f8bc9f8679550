"""Six families of data-centred terminal work: logs, CSV/JSON, git, make, unittest, bulk data.

Bulky inputs are made at image build time by small seeded scripts shipped in setup/ (so task
directories stay small). Checkers never trust what the agent could have changed: they rebuild a
pristine copy from the same script (shipped again in tests/) and recompute the answer.
Workloads are sized so that the slow reference commands take about 1.2-3 s on one CPU.
"""

from __future__ import annotations

import json
import math
import random
import shlex
import zlib
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from environments.suite.generate import GeneratedTask, family

PROJECT_NAMES = [
    "atlas",
    "beacon",
    "quartz",
    "harbor",
    "meridian",
    "nimbus",
    "orchid",
    "pylon",
    "tundra",
    "vertex",
    "willow",
    "cobalt",
    "juniper",
    "lattice",
    "sextant",
]
# Filler vocabulary for sample texts, docs and commit contents.
_WORDS_TEXT = """
the of and to in is was for on with as by at from that this data line file system value
error server client request report table index window signal market river mountain garden
letter winter summer yellow purple engine station network battery shadow silver golden
market harbor island forest valley orbit comet planet rocket paper pencil answer question
number simple complex random method object result
"""
WORDS = _WORDS_TEXT.split()


def _json(obj: object) -> str:
    return json.dumps(obj, indent=1, sort_keys=True) + "\n"


def _printf_script(lines: list[str], path: str) -> str:
    """One shell line writing a multi-line script (how one types a script without an editor)."""
    return "printf '%s\\n' " + " ".join(shlex.quote(line) for line in lines) + f" > {path}"


def _data_task(
    instruction: str, gen: str, check: str, params: dict, solution: list[str]
) -> GeneratedTask:
    """A task whose input is written by `gen` at build time and re-derived by `check`."""
    return GeneratedTask(
        instruction=instruction,
        setup_sh="python3 gen.py params.json\n",
        check_sh="python3 /tests/check.py\n",
        solution=solution,
        setup_files={"gen.py": gen, "params.json": _json(params)},
        test_files={"gen.py": gen, "check.py": check, "params.json": _json(params)},
    )


# --------------------------------------------------------------------------------------------
# 1. log-analysis: nginx-style access logs, rotated and gzipped; reports with awk and sort.

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


# --------------------------------------------------------------------------------------------
# 2. csv-json: join an orders export (CSV or JSON lines) with customers.json in python3.

ORDERS_GEN = r'''"""Customers and orders of one task, generated deterministically from params.json.

`python3 gen.py params.json` writes them; the checker imports customers() and orders().
"""

import csv
import json
import random
import sys
from datetime import date, timedelta
from pathlib import Path

FIRST = ["Ana", "Ben", "Chloe", "Dmitri", "Elif", "Farah", "Goran", "Hana", "Ivan", "Jia",
         "Kofi", "Lena", "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq"]
LAST = ["Abe", "Berg", "Costa", "Dube", "Eze", "Fischer", "Garcia", "Haddad", "Ito", "Jensen",
        "Kim", "Lopez", "Moreau", "Novak", "Okafor", "Patel", "Rossi", "Silva", "Tanaka", "Weber"]
TIERS = ["bronze"] * 6 + ["silver"] * 3 + ["gold"]
MESSY = [str.title, str.upper, lambda s: f" {s}", lambda s: f"{s} "]


def customers(p):
    rng = random.Random(f"{p['seed']}:customers")
    out = []
    for i in range(p["customers"]):
        signup = date(2019, 1, 1) + timedelta(days=rng.randrange(1500))
        out.append({"id": f"C{100000 + 13 * i + rng.randrange(13)}",
                    "name": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
                    "region": rng.choice(p["regions"]), "tier": rng.choice(TIERS),
                    "signup": signup.isoformat()})
    return out


def orders(p):
    """Every order as a dict; unit prices in integer cents (unit_price_cents)."""
    rng = random.Random(f"{p['seed']}:orders")
    ids = [c["id"] for c in customers(p)]
    gone = [f"C{900000 + i}" for i in range(40)]  # customers deleted since the export
    products = [(f"SKU-{rng.randrange(10000, 99999)}", rng.randrange(199, 25000))
                for _ in range(300)]
    start = date.fromisoformat(p["start"])
    for n in range(p["orders"]):
        customer = rng.choice(gone) if rng.random() < p["orphan_rate"] else rng.choice(ids)
        sku, price = rng.choice(products)
        r = rng.random()
        status = "completed" if r < 0.7 else "cancelled" if r < 0.82 else (
            "refunded" if r < 0.9 else "pending")
        if p["messy"] and rng.random() < 0.3:
            status = rng.choice(MESSY)(status)
        day = start + timedelta(days=n * p["days"] // p["orders"])
        when = f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}"
        yield {"order_id": f"O{p['first_order'] + n}", "customer_id": customer,
               "created_at": f"{day.isoformat()}T{when}Z", "sku": sku,
               "quantity": rng.choice((1, 1, 1, 1, 2, 2, 3, 4, 5, 10)),
               "unit_price_cents": price, "status": status}


def main():
    p = json.loads(Path(sys.argv[1]).read_text())
    out = Path(p["dir"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "customers.json").write_text(json.dumps(customers(p), indent=2) + "\n")
    fields = ["order_id", "customer_id", "created_at", "sku", "quantity", "unit_price", "status"]
    with open(out / p["orders_file"], "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n") if p["format"] == "csv" else None
        if writer:
            writer.writerow(fields)
        for o in orders(p):
            cents = o.pop("unit_price_cents")
            if writer:
                o["unit_price"] = f"{cents // 100}.{cents % 100:02d}"
                writer.writerow([o[k] for k in fields])
            else:
                o["unit_price"] = cents / 100
                f.write(json.dumps({k: o[k] for k in fields}) + "\n")


if __name__ == "__main__":
    main()
'''

ORDERS_CHECK = r'''"""Recomputes the expected summary from pristine data; compares the agent's."""

import csv
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, "/tests")
import gen  # noqa: E402


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def totals(p):
    """{key: [orders, cents]} over completed orders of known customers; and the customers."""
    q = p["question"]
    customers = {c["id"]: c for c in gen.customers(p)}
    out = defaultdict(lambda: [0, 0])
    for o in gen.orders(p):
        c = customers.get(o["customer_id"])
        if c is None or o["status"].strip().lower() != "completed":
            continue
        if q["kind"] == "region_revenue":
            key = c["region"]
        elif q["kind"] == "top_customers":
            key = o["customer_id"]
        elif o["created_at"].startswith(str(q["year"])):
            key = (o["created_at"][:7], c["tier"])
        else:
            continue
        out[key][0] += 1
        out[key][1] += o["quantity"] * o["unit_price_cents"]
    return out, customers


def same_money(value, cents):
    try:
        return abs(float(value) - cents / 100) < 0.005
    except (TypeError, ValueError):
        return False


def check_json(path, want):
    try:
        got = json.loads(path.read_text())
    except ValueError as e:
        fail(f"{path} is not valid JSON: {e}")
    if not isinstance(got, dict) or sorted(got) != sorted(want):
        fail(f"keys differ: want {sorted(want)}")
    for key, (orders, cents) in want.items():
        entry = got[key]
        if not isinstance(entry, dict) or entry.get("orders") != orders \
                or not isinstance(entry.get("revenue"), (int, float)) \
                or not same_money(entry["revenue"], cents):
            fail(f"{key}: want orders={orders} revenue={cents / 100:.2f}, got {entry}")


def check_csv(path, header, want_rows):
    """want_rows: lists whose last item is revenue in cents; the rest compare as text."""
    with open(path, newline="") as f:
        rows = [row for row in csv.reader(f) if row]
    if not rows or rows[0] != header:
        fail(f"header must be {','.join(header)}")
    if len(rows) - 1 != len(want_rows):
        fail(f"want {len(want_rows)} data rows, got {len(rows) - 1}")
    for got, want in zip(rows[1:], want_rows):
        if len(got) != len(want) or got[:-1] != [str(v) for v in want[:-1]] \
                or not same_money(got[-1], want[-1]):
            fail(f"row {got} should be {want[:-1]} + revenue {want[-1] / 100:.2f}")


def main():
    p = json.loads(Path("/tests/params.json").read_text())
    q = p["question"]
    out = Path(q["output"])
    if not out.is_file():
        fail(f"{out} does not exist")
    want, customers = totals(p)
    if q["kind"] == "region_revenue":
        check_json(out, want)
    elif q["kind"] == "top_customers":
        best = sorted(want.items(), key=lambda kv: (-kv[1][1], kv[0]))[: q["top"]]
        rows = [[cid, customers[cid]["name"], n, cents] for cid, (n, cents) in best]
        check_csv(out, ["customer_id", "name", "orders", "revenue"], rows)
    else:
        rows = [[month, tier, n, cents] for (month, tier), (n, cents) in sorted(want.items())]
        check_csv(out, ["month", "tier", "orders", "revenue"], rows)
    print("ok")


main()
'''

ORDERS_REGIONS = ["EMEA", "APAC", "NA", "LATAM", "ANZ", "MEA", "NORDICS", "DACH"]
ORDERS_ROWS = {"csv": 660_000, "jsonl": 520_000}  # one python3 pass: ~1.2-2 s on one CPU


def _orders_script(p: dict) -> tuple[str, list[str]]:
    """(output path, lines of a python3 script computing the asked summary)."""
    q = p["question"]
    data = p["dir"]
    reader = (
        f'rows = csv.DictReader(open("{data}/orders.csv", newline=""))'
        if p["format"] == "csv"
        else f'rows = map(json.loads, open("{data}/orders.jsonl"))'
    )
    lines = [
        "import csv, json",
        "from collections import defaultdict",
        f'customers = {{c["id"]: c for c in json.load(open("{data}/customers.json"))}}',
        reader,
        "orders, revenue = defaultdict(int), defaultdict(float)",
        "for row in rows:",
        '    customer = customers.get(row["customer_id"])',
        '    if customer is None or row["status"].strip().lower() != "completed":',
        "        continue",
    ]
    if q["kind"] == "region_revenue":
        lines.append('    key = customer["region"]')
    elif q["kind"] == "top_customers":
        lines.append('    key = row["customer_id"]')
    else:
        lines += [
            f'    if not row["created_at"].startswith("{q["year"]}"):',
            "        continue",
            '    key = (row["created_at"][:7], customer["tier"])',
        ]
    lines += [
        "    orders[key] += 1",
        '    revenue[key] += int(row["quantity"]) * float(row["unit_price"])',
    ]
    out = q["output"]
    if q["kind"] == "region_revenue":
        lines.append(
            'summary = {k: {"orders": orders[k], "revenue": round(revenue[k], 2)} '
            "for k in sorted(orders)}"
        )
        lines.append(f'json.dump(summary, open("{out}", "w"), indent=2)')
        return out, lines
    if q["kind"] == "top_customers":
        lines += [
            f"keys = sorted(revenue, key=lambda k: (-round(revenue[k], 2), k))[:{q['top']}]",
            f'w = csv.writer(open("{out}", "w", newline=""))',
            'w.writerow(["customer_id", "name", "orders", "revenue"])',
            "for k in keys:",
            '    w.writerow([k, customers[k]["name"], orders[k], f"{revenue[k]:.2f}"])',
        ]
    else:
        lines += [
            f'w = csv.writer(open("{out}", "w", newline=""))',
            'w.writerow(["month", "tier", "orders", "revenue"])',
            "for k in sorted(orders):",
            '    w.writerow([k[0], k[1], orders[k], f"{revenue[k]:.2f}"])',
        ]
    return out, lines


def _orders_question(rng: random.Random, p: dict) -> tuple[dict, str]:
    kind = rng.choice(["region_revenue", "top_customers", "monthly_tiers"])
    if kind == "region_revenue":
        q = {"kind": kind, "output": "/root/out/region_revenue.json"}
        text = (
            f"Write `{q['output']}`: a JSON object with one key per customer region that "
            "has at least one counted order, each mapping to "
            '`{"orders": <number of counted orders>, "revenue": <their revenue>}`.'
        )
    elif kind == "top_customers":
        top = rng.randint(5, 15)
        q = {"kind": kind, "top": top, "output": "/root/out/top_customers.csv"}
        text = (
            f"Write `{q['output']}`: a CSV file with the header "
            "`customer_id,name,orders,revenue` and one row for each of the "
            f"{top} customers with the highest revenue (highest first, ties by "
            "customer_id ascending): number of counted orders and their revenue."
        )
    else:
        year = rng.choice([2022, 2023])
        q = {"kind": kind, "year": year, "output": f"/root/out/monthly_{year}.csv"}
        text = (
            f"Write `{q['output']}`: a CSV file with the header `month,tier,orders,revenue` "
            f"and one row per month of {year} (`YYYY-MM`, from `created_at`) and customer "
            "tier that has counted orders, sorted by month then tier: the number of counted "
            "orders and their revenue."
        )
    return q, text


@family("csv-json")
def csv_json(rng: random.Random) -> GeneratedTask:
    fmt = rng.choice(["csv", "jsonl"])
    p = {
        "seed": rng.randrange(2**31),
        "dir": "/root/data",
        "format": fmt,
        "orders_file": f"orders.{fmt}",
        "customers": rng.randint(1500, 4000),
        "regions": sorted(rng.sample(ORDERS_REGIONS, rng.randint(3, 6))),
        "orders": ORDERS_ROWS[fmt],
        "first_order": rng.randrange(10**6, 9 * 10**6),
        "start": "2022-01-01",
        "days": 730,
        "orphan_rate": rng.choice([0.0, 0.01, 0.03]),
        "messy": rng.random() < 0.6,
    }
    q, text = _orders_question(rng, p)
    p["question"] = q
    orders_path = f"{p['dir']}/{p['orders_file']}"
    wrinkles = []
    if p["messy"]:
        wrinkles.append(
            "`status` values are not consistently formatted: compare them "
            "case-insensitively and ignore surrounding spaces."
        )
    if p["orphan_rate"]:
        wrinkles.append(
            "Some orders belong to customers that no longer exist in "
            "`customers.json`: leave those orders out."
        )
    layout = "CSV with a header line" if fmt == "csv" else "JSON lines, one order per line"
    instruction = f"""
`{orders_path}` is an export of web-shop orders ({layout}), and
`{p["dir"]}/customers.json` lists the customers (`id`, `name`, `region`, `tier`, ...).

Only orders whose `status` is `completed` count. The revenue of an order is
`quantity * unit_price`; report revenue rounded to 2 decimals. {" ".join(wrinkles)}

{text}

Use python3 (standard library only; there is no pandas). Create `/root/out/` if needed.
"""
    out, script = _orders_script(p)
    head = f"head -n 3 {orders_path}" if fmt == "csv" else f"head -n 2 {orders_path}"
    rows = (
        f"csv.DictReader(open('{orders_path}'))"
        if fmt == "csv"
        else f"map(json.loads, open('{orders_path}'))"
    )
    # A first look at the data: which statuses occur, and how many orders lack a customer.
    survey = (
        "python3 -c \"import csv, json, collections; ids = {c['id'] for c in json.load(open("
        f"'{p['dir']}/customers.json'))}}; print(collections.Counter((r['status'], "
        f"r['customer_id'] in ids) for r in {rows}))\""
    )
    solution = [
        f"ls -lh {p['dir']} && {head} && head -c 400 {p['dir']}/customers.json",
        survey,
        _printf_script(script, "/root/summarize.py"),
        f"mkdir -p /root/out && python3 /root/summarize.py && head -n 12 {out}",
    ]
    return _data_task(instruction, ORDERS_GEN, ORDERS_CHECK, p, solution)


# --------------------------------------------------------------------------------------------
# Python modules with property tests and known single-line bugs; used by unittest-fix and
# git-bisect. Test templates use __PKG__, __N__ (iterations of the random test) and __SEED__.


@dataclass(frozen=True)
class Bug:
    func: str  # the function the bug is in (for the reference solution's grep)
    old: str  # the correct line fragment, unique in the module
    new: str  # the buggy replacement
    message: str  # a plausible commit message for the change


@dataclass(frozen=True)
class PyModule:
    name: str
    source: str
    test: str
    bugs: tuple[Bug, ...]
    per_second: int  # iterations of the random test per second of one CPU (measured)


INTERVALS_SRC = '''"""Closed integer intervals [start, end]."""


def merge(intervals):
    """Merge overlapping intervals into sorted, disjoint [start, end] pairs."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def covered(intervals):
    """How many integers lie in at least one interval."""
    return sum(end - start + 1 for start, end in merge(intervals))
'''

INTERVALS_TEST = '''import random
import unittest

from __PKG__.intervals import covered, merge


def reference(intervals):
    """Brute force on doubled coordinates, where touching intervals share a point."""
    points = sorted({x for start, end in intervals for x in range(2 * start, 2 * end + 1)})
    runs = []
    for x in points:
        if runs and x == runs[-1][1] + 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    return [[a // 2, b // 2] for a, b in runs]


class MergeTest(unittest.TestCase):
    def test_examples(self):
        self.assertEqual(merge([[5, 8], [1, 3], [2, 4]]), [[1, 4], [5, 8]])
        self.assertEqual(merge([[1, 3], [3, 6]]), [[1, 6]])
        self.assertEqual(merge([[1, 10], [2, 3]]), [[1, 10]])
        self.assertEqual(covered([[1, 3], [2, 5], [9, 9]]), 6)

    def test_random(self):
        rng = random.Random(__SEED__)
        mismatches = []
        for _ in range(__N__):
            intervals = []
            for _ in range(rng.randrange(1, 10)):
                start = rng.randrange(60)
                intervals.append([start, start + rng.randrange(12)])
            want = reference(intervals)
            got = merge([list(i) for i in intervals])
            if got != want or covered(intervals) != sum(b - a + 1 for a, b in want):
                mismatches.append((intervals, got, want))
        self.assertEqual(mismatches[:2], [])


if __name__ == "__main__":
    unittest.main()
'''

STATS_SRC = '''"""Summary statistics for non-empty lists of numbers."""


def mean(values):
    return sum(values) / len(values)


def median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def percentile(values, pct):
    """Nearest-rank percentile: the smallest value with at least pct% of the values <= it."""
    ordered = sorted(values)
    rank = max(1, -(-pct * len(ordered) // 100))
    return ordered[rank - 1]
'''

STATS_TEST = """import random
import statistics
import unittest

from __PKG__.stats import mean, median, percentile


def reference_percentile(values, pct):
    return min(v for v in values if sum(x <= v for x in values) * 100 >= pct * len(values))


class StatsTest(unittest.TestCase):
    def test_examples(self):
        self.assertEqual(median([3, 1, 2]), 2)
        self.assertEqual(median([4, 1, 3, 2]), 2.5)
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)
        self.assertEqual(percentile([15, 20, 35, 40, 50], 30), 20)
        self.assertEqual(percentile([15, 20, 35, 40, 50], 100), 50)

    def test_random(self):
        rng = random.Random(__SEED__)
        mismatches = []
        for _ in range(__N__):
            values = [rng.randrange(-50, 50) for _ in range(rng.randrange(1, 30))]
            pct = rng.randrange(1, 101)
            got = (mean(values), median(values), percentile(values, pct))
            want = (statistics.mean(values), statistics.median(values),
                    reference_percentile(values, pct))
            if got != want:
                mismatches.append((values, pct, got, want))
        self.assertEqual(mismatches[:2], [])


if __name__ == "__main__":
    unittest.main()
"""

SLUGS_SRC = '''"""Turning titles into URL slugs."""


def slugify(text):
    """Lower-case ASCII letters and digits; every other run of characters becomes one dash."""
    out = []
    pending_dash = False
    for ch in text.lower():
        if ch.isascii() and ch.isalnum():
            if pending_dash and out:
                out.append("-")
            out.append(ch)
            pending_dash = False
        else:
            pending_dash = True
    return "".join(out)


def unique_slug(text, taken):
    """slugify(text), with -2, -3, ... appended until it is not in `taken`."""
    base = slugify(text) or "item"
    slug, n = base, 1
    while slug in taken:
        n += 1
        slug = f"{base}-{n}"
    return slug
'''

SLUGS_TEST = """import random
import re
import string
import unittest

from __PKG__.slugs import slugify, unique_slug

ALPHABET = string.ascii_letters + string.digits + "    --__.,!?&'\\u00e9\\u00fc\\u00df\\u00d8"


def reference(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


class SlugTest(unittest.TestCase):
    def test_examples(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")
        self.assertEqual(slugify("  D\\u00e9j\\u00e0 vu -- again  "), "d-j-vu-again")
        self.assertEqual(unique_slug("Hello", {"hello", "hello-2"}), "hello-3")
        self.assertEqual(unique_slug("!!!", set()), "item")

    def test_random(self):
        rng = random.Random(__SEED__)
        mismatches = []
        for _ in range(__N__):
            text = "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 40)))
            if slugify(text) != reference(text):
                mismatches.append((text, slugify(text), reference(text)))
        self.assertEqual(mismatches[:2], [])


if __name__ == "__main__":
    unittest.main()
"""

MONEY_SRC = '''"""Splitting amounts of money; amounts are non-negative integer cents."""


def split(amount, parts):
    """`parts` shares that differ by at most one cent, larger shares first."""
    base, extra = divmod(amount, parts)
    return [base + 1 if i < extra else base for i in range(parts)]


def allocate(amount, weights):
    """Shares proportional to positive integer weights, by the largest-remainder method."""
    total = sum(weights)
    shares = [amount * w // total for w in weights]
    order = sorted(range(len(weights)), key=lambda i: (-(amount * weights[i] % total), i))
    for i in order[: amount - sum(shares)]:
        shares[i] += 1
    return shares
'''

MONEY_TEST = """import random
import unittest
from fractions import Fraction

from __PKG__.money import allocate, split


def reference_allocate(amount, weights):
    quotas = [Fraction(amount * w, sum(weights)) for w in weights]
    shares = [int(q) for q in quotas]
    ranked = sorted(range(len(weights)), key=lambda i: (shares[i] - quotas[i], i))
    for i in ranked[: amount - sum(shares)]:
        shares[i] += 1
    return shares


class MoneyTest(unittest.TestCase):
    def test_examples(self):
        self.assertEqual(split(100, 3), [34, 33, 33])
        self.assertEqual(split(7, 7), [1] * 7)
        self.assertEqual(allocate(100, [1, 1, 1]), [34, 33, 33])
        self.assertEqual(allocate(10, [1, 2]), [3, 7])
        self.assertEqual(allocate(5, [3, 3, 4]), [2, 1, 2])

    def test_random(self):
        rng = random.Random(__SEED__)
        mismatches = []
        for _ in range(__N__):
            amount, parts = rng.randrange(0, 100000), rng.randrange(1, 12)
            shares = split(amount, parts)
            if sum(shares) != amount or shares != sorted(shares, reverse=True) \\
                    or max(shares) - min(shares) > 1:
                mismatches.append((amount, parts, shares))
            weights = [rng.randrange(1, 20) for _ in range(parts)]
            if allocate(amount, weights) != reference_allocate(amount, weights):
                mismatches.append((amount, weights, allocate(amount, weights)))
        self.assertEqual(mismatches[:2], [])


if __name__ == "__main__":
    unittest.main()
"""

DATES_SRC = '''"""Calendar arithmetic on the proleptic Gregorian calendar, without datetime."""


def is_leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    if month == 2:
        return 29 if is_leap(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def day_of_year(year, month, day):
    return sum(days_in_month(year, m) for m in range(1, month)) + day


def weekday(year, month, day):
    """0 = Monday ... 6 = Sunday (Zeller's congruence)."""
    if month < 3:
        month += 12
        year -= 1
    k, j = year % 100, year // 100
    h = (day + 13 * (month + 1) // 5 + k + k // 4 + j // 4 + 5 * j) % 7
    return (h + 5) % 7
'''

DATES_TEST = """import calendar
import datetime
import random
import unittest

from __PKG__.dates import day_of_year, days_in_month, is_leap, weekday


class DatesTest(unittest.TestCase):
    def test_examples(self):
        self.assertTrue(is_leap(2000))
        self.assertFalse(is_leap(1900))
        self.assertEqual(days_in_month(2023, 2), 28)
        self.assertEqual(days_in_month(2024, 11), 30)
        self.assertEqual(day_of_year(2024, 3, 1), 61)
        self.assertEqual(weekday(2024, 1, 1), 0)

    def test_random(self):
        rng = random.Random(__SEED__)
        mismatches = []
        for _ in range(__N__):
            year, month = rng.randrange(1600, 2400), rng.randrange(1, 13)
            length = calendar.monthrange(year, month)[1]
            day = rng.randrange(1, length + 1)
            d = datetime.date(year, month, day)
            got = (is_leap(year), days_in_month(year, month), day_of_year(year, month, day),
                   weekday(year, month, day))
            want = (calendar.isleap(year), length, d.timetuple().tm_yday, d.weekday())
            if got != want:
                mismatches.append((d.isoformat(), got, want))
        self.assertEqual(mismatches[:2], [])


if __name__ == "__main__":
    unittest.main()
"""

RLE_SRC = '''"""Run-length encoding of text: "aaab" <-> "3a1b" (text without digits)."""


def encode(text):
    out = []
    i = 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == text[i]:
            j += 1
        out.append(f"{j - i}{text[i]}")
        i = j
    return "".join(out)


def decode(data):
    out = []
    count = ""
    for ch in data:
        if ch.isdigit():
            count += ch
        else:
            out.append(ch * int(count))
            count = ""
    return "".join(out)
'''

RLE_TEST = """import itertools
import random
import unittest

from __PKG__.rle import decode, encode


def reference(text):
    return "".join(f"{len(list(group))}{ch}" for ch, group in itertools.groupby(text))


class RleTest(unittest.TestCase):
    def test_examples(self):
        self.assertEqual(encode("aaab"), "3a1b")
        self.assertEqual(encode("x" * 12), "12x")
        self.assertEqual(decode("12x2y"), "x" * 12 + "yy")
        self.assertEqual(encode(""), "")

    def test_random(self):
        rng = random.Random(__SEED__)
        mismatches = []
        for _ in range(__N__):
            text = "".join(rng.choice("abc -") * rng.choice((1, 1, 2, 3, 11, 25))
                           for _ in range(rng.randrange(0, 12)))
            want = reference(text)
            if encode(text) != want or decode(want) != text:
                mismatches.append((text, encode(text)))
        self.assertEqual(mismatches[:2], [])


if __name__ == "__main__":
    unittest.main()
"""

LRU_SRC = '''"""A small least-recently-used cache."""

from collections import OrderedDict


class LRUCache:
    def __init__(self, capacity):
        self.capacity = capacity
        self.items = OrderedDict()

    def get(self, key, default=None):
        if key not in self.items:
            return default
        self.items.move_to_end(key)
        return self.items[key]

    def put(self, key, value):
        self.items[key] = value
        self.items.move_to_end(key)
        if len(self.items) > self.capacity:
            self.items.popitem(last=False)

    def __len__(self):
        return len(self.items)
'''

LRU_TEST = """import random
import unittest

from __PKG__.lru import LRUCache


class ReferenceLRU:
    def __init__(self, capacity):
        self.capacity, self.keys, self.values = capacity, [], {}

    def get(self, key, default=None):
        if key not in self.values:
            return default
        self.keys.remove(key)
        self.keys.append(key)
        return self.values[key]

    def put(self, key, value):
        if key in self.values:
            self.keys.remove(key)
        self.keys.append(key)
        self.values[key] = value
        if len(self.keys) > self.capacity:
            del self.values[self.keys.pop(0)]


class LRUTest(unittest.TestCase):
    def test_examples(self):
        cache = LRUCache(2)
        cache.put("a", 1)
        cache.put("b", 2)
        self.assertEqual(cache.get("a"), 1)
        cache.put("c", 3)
        self.assertIsNone(cache.get("b"))
        self.assertEqual(cache.get("a"), 1)
        self.assertEqual(len(cache), 2)

    def test_random(self):
        rng = random.Random(__SEED__)
        mismatches = []
        for _ in range(__N__):
            capacity = rng.randrange(1, 8)
            cache, ref = LRUCache(capacity), ReferenceLRU(capacity)
            for step in range(40):
                key = rng.randrange(12)
                if rng.random() < 0.5:
                    cache.put(key, step)
                    ref.put(key, step)
                elif cache.get(key) != ref.get(key):
                    mismatches.append((capacity, step, key))
            if len(cache) != len(ref.keys):
                mismatches.append((capacity, len(cache), len(ref.keys)))
        self.assertEqual(mismatches[:2], [])


if __name__ == "__main__":
    unittest.main()
"""

SEARCH_SRC = '''"""Binary search over sorted lists."""


def first_at_least(items, target):
    """Index of the first element >= target (len(items) if there is none)."""
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def count_in_range(items, low, high):
    """How many integer elements x satisfy low <= x <= high."""
    return first_at_least(items, high + 1) - first_at_least(items, low)
'''

SEARCH_TEST = """import bisect
import random
import unittest

from __PKG__.search import count_in_range, first_at_least


class SearchTest(unittest.TestCase):
    def test_examples(self):
        self.assertEqual(first_at_least([1, 3, 3, 5], 3), 1)
        self.assertEqual(first_at_least([1, 3], 9), 2)
        self.assertEqual(first_at_least([], 1), 0)
        self.assertEqual(count_in_range([1, 2, 2, 3, 7], 2, 3), 3)

    def test_random(self):
        rng = random.Random(__SEED__)
        mismatches = []
        for _ in range(__N__):
            items = sorted(rng.randrange(50) for _ in range(rng.randrange(0, 30)))
            target, low = rng.randrange(-5, 55), rng.randrange(-5, 55)
            high = low + rng.randrange(20)
            got = (first_at_least(items, target), count_in_range(items, low, high))
            want = (bisect.bisect_left(items, target), sum(low <= x <= high for x in items))
            if got != want:
                mismatches.append((items, target, low, high, got, want))
        self.assertEqual(mismatches[:2], [])


if __name__ == "__main__":
    unittest.main()
"""

ROMAN_SRC = '''"""Roman numerals for 1..3999."""

NUMERALS = [
    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
    (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
]


def to_roman(number):
    if not 0 < number < 4000:
        raise ValueError(f"out of range: {number}")
    out = []
    for value, symbol in NUMERALS:
        count, number = divmod(number, value)
        out.append(symbol * count)
    return "".join(out)


def from_roman(text):
    values = {symbol: value for value, symbol in NUMERALS if len(symbol) == 1}
    total = 0
    for i, ch in enumerate(text):
        value = values[ch]
        if i + 1 < len(text) and values[text[i + 1]] > value:
            total -= value
        else:
            total += value
    return total
'''

ROMAN_TEST = """import random
import unittest

from __PKG__.roman import from_roman, to_roman

ONES = ["", "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX"]
TENS = ["", "X", "XX", "XXX", "XL", "L", "LX", "LXX", "LXXX", "XC"]
HUNDREDS = ["", "C", "CC", "CCC", "CD", "D", "DC", "DCC", "DCCC", "CM"]


def reference(n):
    return "M" * (n // 1000) + HUNDREDS[n // 100 % 10] + TENS[n // 10 % 10] + ONES[n % 10]


class RomanTest(unittest.TestCase):
    def test_examples(self):
        self.assertEqual(to_roman(1994), "MCMXCIV")
        self.assertEqual(to_roman(3999), "MMMCMXCIX")
        self.assertEqual(to_roman(444), "CDXLIV")
        self.assertEqual(from_roman("MMXXIII"), 2023)
        self.assertEqual(from_roman("XLII"), 42)

    def test_random(self):
        rng = random.Random(__SEED__)
        mismatches = []
        for _ in range(__N__):
            n = rng.randrange(1, 4000)
            if to_roman(n) != reference(n) or from_roman(reference(n)) != n:
                mismatches.append((n, to_roman(n), from_roman(reference(n))))
        self.assertEqual(mismatches[:2], [])


if __name__ == "__main__":
    unittest.main()
"""

PY_MODULES = [
    PyModule(
        "intervals",
        INTERVALS_SRC,
        INTERVALS_TEST,
        (
            Bug(
                "merge",
                "if merged and start <= merged[-1][1]:",
                "if merged and start < merged[-1][1]:",
                "Use a strict comparison in merge",
            ),
            Bug(
                "merge",
                "merged[-1][1] = max(merged[-1][1], end)",
                "merged[-1][1] = end",
                "Simplify interval extension in merge",
            ),
            Bug(
                "merge",
                "for start, end in sorted(intervals):",
                "for start, end in intervals:",
                "Skip the redundant sort in merge",
            ),
        ),
        per_second=95_000,
    ),
    PyModule(
        "stats",
        STATS_SRC,
        STATS_TEST,
        (
            Bug(
                "median",
                "return (ordered[mid - 1] + ordered[mid]) / 2",
                "return (ordered[mid] + ordered[mid + 1]) / 2",
                "Tidy median index arithmetic",
            ),
            Bug(
                "percentile",
                "rank = max(1, -(-pct * len(ordered) // 100))",
                "rank = max(1, pct * len(ordered) // 100)",
                "Simplify percentile rank",
            ),
            Bug(
                "median",
                "if len(ordered) % 2:",
                "if len(ordered) % 2 == 0:",
                "Make the parity check in median explicit",
            ),
        ),
        per_second=17_500,
    ),
    PyModule(
        "slugs",
        SLUGS_SRC,
        SLUGS_TEST,
        (
            Bug(
                "slugify",
                "if pending_dash and out:",
                "if pending_dash:",
                "Simplify dash handling in slugify",
            ),
            Bug(
                "slugify",
                "for ch in text.lower():",
                "for ch in text:",
                "Avoid copying the text in slugify",
            ),
            Bug(
                "slugify",
                "if ch.isascii() and ch.isalnum():",
                "if ch.isalnum():",
                "Accept all alphanumerics in slugify",
            ),
        ),
        per_second=64_000,
    ),
    PyModule(
        "money",
        MONEY_SRC,
        MONEY_TEST,
        (
            Bug(
                "split",
                "base + 1 if i < extra else base",
                "base + 1 if i <= extra else base",
                "Clarify remainder handling in split",
            ),
            Bug(
                "allocate",
                "key=lambda i: (-(amount * weights[i] % total), i)",
                "key=lambda i: (amount * weights[i] % total, i)",
                "Make the allocation order deterministic",
            ),
            Bug(
                "allocate",
                "shares = [amount * w // total for w in weights]",
                "shares = [round(amount * w / total) for w in weights]",
                "Round shares to the nearest cent",
            ),
        ),
        per_second=41_000,
    ),
    PyModule(
        "dates",
        DATES_SRC,
        DATES_TEST,
        (
            Bug(
                "is_leap",
                "return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)",
                "return year % 4 == 0 and year % 100 != 0",
                "Simplify the leap year rule",
            ),
            Bug(
                "days_in_month",
                "return 30 if month in (4, 6, 9, 11) else 31",
                "return 30 if month in (4, 6, 9) else 31",
                "Tidy the month length table",
            ),
            Bug(
                "day_of_year",
                "for m in range(1, month)) + day",
                "for m in range(1, month)) + day - 1",
                "Count days of the year from zero",
            ),
            Bug(
                "weekday", "return (h + 5) % 7", "return (h + 6) % 7", "Normalise weekday numbering"
            ),
        ),
        per_second=255_000,
    ),
    PyModule(
        "rle",
        RLE_SRC,
        RLE_TEST,
        (
            Bug("decode", "count += ch", "count = ch", "Simplify count parsing in decode"),
            Bug(
                "encode",
                "while j < len(text) and text[j] == text[i]:",
                "while j < len(text) and text[j] == text[i] and j - i < 9:",
                "Cap run lengths at 9 for older readers",
            ),
        ),
        per_second=63_000,
    ),
    PyModule(
        "lru",
        LRU_SRC,
        LRU_TEST,
        (
            Bug(
                "put",
                "self.items.popitem(last=False)",
                "self.items.popitem()",
                "Use the default popitem in cache eviction",
            ),
            Bug(
                "put",
                "if len(self.items) > self.capacity:",
                "if len(self.items) >= self.capacity:",
                "Evict before the cache overflows",
            ),
        ),
        per_second=52_000,
    ),
    PyModule(
        "search",
        SEARCH_SRC,
        SEARCH_TEST,
        (
            Bug(
                "first_at_least",
                "if items[mid] < target:",
                "if items[mid] <= target:",
                "Tighten the binary search comparison",
            ),
            Bug(
                "first_at_least",
                "lo, hi = 0, len(items)",
                "lo, hi = 0, len(items) - 1",
                "Avoid searching past the end",
            ),
            Bug(
                "count_in_range",
                "first_at_least(items, high + 1)",
                "first_at_least(items, high)",
                "Simplify count_in_range",
            ),
        ),
        per_second=84_000,
    ),
    PyModule(
        "roman",
        ROMAN_SRC,
        ROMAN_TEST,
        (
            Bug("to_roman", '(400, "CD")', '(400, "CCCC")', "Use the additive form for 400"),
            Bug(
                "from_roman",
                "values[text[i + 1]] > value",
                "values[text[i + 1]] >= value",
                "Handle equal neighbours in from_roman",
            ),
            Bug(
                "to_roman",
                "if not 0 < number < 4000:",
                "if not 0 < number < 3999:",
                "Tighten the range check in to_roman",
            ),
        ),
        per_second=175_000,
    ),
]


def _module_test(module: PyModule, pkg: str, seconds: float, seed: int) -> str:
    """The module's test file, sized to take about `seconds` on one CPU."""
    n = max(20, int(module.per_second * seconds))
    return (
        module.test.replace("__PKG__", pkg).replace("__N__", str(n)).replace("__SEED__", str(seed))
    )


def _buggy(module: PyModule, bug: Bug) -> str:
    buggy = module.source.replace(bug.old, bug.new)
    # Both unique, so the reference solution's sed can undo the bug exactly.
    assert module.source.count(bug.old) == 1 and buggy.count(bug.new) == 1, bug
    return buggy


def _sed_fix(bug: Bug, path: str) -> str:
    """A sed command that turns the buggy line back into the correct one."""

    def pattern(text: str) -> str:
        return "".join("\\" + ch if ch in "\\/.*[]^$" else ch for ch in text)

    def replacement(text: str) -> str:
        return "".join("\\" + ch if ch in "\\/&" else ch for ch in text)

    return f"sed -i {shlex.quote(f's/{pattern(bug.new)}/{replacement(bug.old)}/')} {path}"


# --------------------------------------------------------------------------------------------
# 3. git-bisect: a repository whose tests broke somewhere after a release tag; find the commit
# (git bisect), then revert it on a branch or on main plus a release tag.

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


# --------------------------------------------------------------------------------------------
# 4. make-build: a multi-file C project whose Makefile is broken; build, run, save the output.

C_HEADER = """#ifndef @GUARD@
#define @GUARD@

#include <stddef.h>
#include <stdint.h>

#define DIGEST_SEED @SEED@ULL

struct file_stats {
    uint64_t lines, words, bytes;
    int in_word;
    uint64_t counts[256];
};

void crc32_init(void);
uint32_t crc32_update(uint32_t crc, const unsigned char *buf, size_t len);
uint64_t digest_update(uint64_t h, const unsigned char *buf, size_t len);
void stats_init(struct file_stats *st);
void stats_update(struct file_stats *st, const unsigned char *buf, size_t len);
double entropy_bits(const struct file_stats *st);
@ROUNDS@
#endif
"""

C_CRC32 = """#include "@PROG@.h"

static uint32_t table[256];

void crc32_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
}

uint32_t crc32_update(uint32_t crc, const unsigned char *buf, size_t len)
{
    crc = ~crc;
    for (size_t i = 0; i < len; i++)
        crc = table[(crc ^ buf[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}
"""

C_STATS = """#include <ctype.h>
#include <math.h>
#include <string.h>

#include "@PROG@.h"

void stats_init(struct file_stats *st)
{
    memset(st, 0, sizeof *st);
}

void stats_update(struct file_stats *st, const unsigned char *buf, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = buf[i];
        st->counts[c]++;
        st->bytes++;
        if (c == '\\n')
            st->lines++;
        if (isspace(c)) {
            st->in_word = 0;
        } else if (!st->in_word) {
            st->in_word = 1;
            st->words++;
        }
    }
}

/* Shannon entropy of the byte distribution, in bits per byte. */
double entropy_bits(const struct file_stats *st)
{
    double h = 0.0;
    for (int i = 0; i < 256; i++) {
        if (st->counts[i]) {
            double p = (double)st->counts[i] / (double)st->bytes;
            h -= p * log2(p);
        }
    }
    return h;
}
"""

C_MAIN = """#include <stdio.h>
#include <string.h>

#include "@PROG@.h"

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int report(const char *path)
{
    static unsigned char buf[65536];
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    struct file_stats st;
    stats_init(&st);
    uint32_t crc = 0;
    uint64_t digest = DIGEST_SEED;
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        stats_update(&st, buf, n);
        crc = crc32_update(crc, buf, n);
        digest = digest_update(digest, buf, n);
    }
    fclose(f);
    printf("%s\\t%llu\\t%llu\\t%llu\\t%08x\\t%016llx\\t%.4f\\n", base_name(path),
           (unsigned long long)st.lines, (unsigned long long)st.words,
           (unsigned long long)st.bytes, (unsigned)crc, (unsigned long long)digest,
           entropy_bits(&st));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE...\\n", argv[0]);
        return 2;
    }
    crc32_init();
    int status = 0;
    for (int i = 1; i < argc; i++)
        status |= report(argv[i]);
    return status;
}
"""

C_MAKEFILE = """CC = gcc
CFLAGS = -O2 -Wall -Wextra -Iinclude
LDLIBS = -lm
PROG = build/@PROG@
OBJS = @ROUND_OBJS@ \\
       build/crc32.o build/digest.o build/stats.o build/main.o

all: $(PROG)

$(PROG): $(OBJS)
\t$(CC) $(LDFLAGS) -o $@ $(OBJS) $(LDLIBS)

# Objects depend on the Makefile too, so changed flags rebuild everything.
build/%.o: src/%.c include/@PROG@.h Makefile
\t@mkdir -p build
\t$(CC) $(CFLAGS) -c -o $@ $<

clean:
\trm -rf build

.PHONY: all clean
"""

C_SAMPLES = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]
C_PROGS = ["filesig", "fprint", "sigscan", "textsum", "docstat", "hashwalk", "checkdoc"]
C_ROUNDS = (3, 4)  # ~0.5 s of gcc -O2 per generated round file on one CPU
MASK64 = (1 << 64) - 1


def _round_tables(rng: random.Random, count: int) -> list[list[tuple[int, int, int]]]:
    """Per round, per byte value: (xor constant, odd multiplier, shift)."""
    return [
        [(rng.getrandbits(64), rng.getrandbits(64) | 1, rng.randrange(7, 41)) for _ in range(256)]
        for _ in range(count)
    ]


def _round_source(index: int, table: list[tuple[int, int, int]]) -> str:
    cases = "\n".join(
        f"    case {b}: h = (h ^ 0x{x:016x}ULL) * 0x{m:016x}ULL; h ^= h >> {s}; break;"
        for b, (x, m, s) in enumerate(table)
    )
    return (
        f"/* Generated file: do not edit. */\n#include <stdint.h>\n\n"
        f"uint64_t round_{index}(uint64_t h, unsigned b)\n{{\n    switch (b) {{\n{cases}\n"
        "    default: break;\n    }\n    return h;\n}\n"
    )


def _digest_source(prog: str, rounds: int) -> str:
    calls = "".join(f"        h = round_{r}(h, buf[i]);\n" for r in range(rounds))
    return (
        f'#include "{prog}.h"\n\nuint64_t digest_update(uint64_t h, const unsigned char *buf, '
        f"size_t len)\n{{\n    for (size_t i = 0; i < len; i++) {{\n{calls}    }}\n"
        "    return h;\n}\n"
    )


def _signature(name: str, data: bytes, seed: int, tables: list) -> str:
    """What the C program prints for one file (a Python mirror of it)."""
    h = seed
    for b in data:
        for table in tables:
            x, m, s = table[b]
            h = ((h ^ x) * m) & MASK64
            h ^= h >> s
    counts = [0] * 256
    for b in data:
        counts[b] += 1
    entropy = 0.0
    for c in counts:
        if c:
            p = c / len(data)
            entropy -= p * math.log2(p)
    lines = data.count(b"\n")
    return (
        f"{name}\t{lines}\t{len(data.split())}\t{len(data)}\t"
        f"{zlib.crc32(data):08x}\t{h:016x}\t{entropy:.4f}"
    )


def _sample_text(rng: random.Random) -> bytes:
    lines = []
    for _ in range(rng.randint(40, 120)):
        words = [rng.choice(WORDS) for _ in range(rng.randint(0, 14))]
        if words and rng.random() < 0.3:
            words[0] = words[0].capitalize()
        lines.append(" ".join(words) + ("." if words and rng.random() < 0.5 else ""))
    return ("\n".join(lines) + "\n").encode()


def _break_makefile(rng: random.Random, makefile: str, rounds: int) -> tuple[str, str]:
    """(broken Makefile, the sed command that fixes it)."""
    bug = rng.choice(["missing_object", "missing_libm", "missing_include", "spaces"])
    if bug == "missing_object":
        gone = f"build/round_{rng.randrange(rounds)}.o"
        broken = makefile.replace(f"{gone} ", "", 1)
        return broken, f"sed -i 's|^OBJS = |OBJS = {gone} |' Makefile"
    if bug == "missing_libm":
        return (
            makefile.replace("LDLIBS = -lm", "LDLIBS ="),
            "sed -i 's/^LDLIBS =.*/LDLIBS = -lm/' Makefile",
        )
    if bug == "missing_include":
        return (makefile.replace(" -Iinclude", ""), "sed -i 's/^CFLAGS = .*/& -Iinclude/' Makefile")
    return makefile.replace("\t", "    "), "sed -i 's/^    /\\t/' Makefile"


@family("make-build")
def make_build(rng: random.Random) -> GeneratedTask:
    prog = rng.choice(C_PROGS)
    proj = f"/root/{prog}"
    rounds = rng.randint(*C_ROUNDS)
    tables = _round_tables(rng, rounds)
    seed = rng.getrandbits(64)
    names = sorted(rng.sample(C_SAMPLES, rng.randint(3, 5)))
    samples = {f"{n}.txt": _sample_text(rng) for n in names}
    subs = {
        "@PROG@": prog,
        "@GUARD@": f"{prog.upper()}_H",
        "@SEED@": f"0x{seed:016x}",
        "@ROUNDS@": "".join(
            f"uint64_t round_{r}(uint64_t h, unsigned b);\n" for r in range(rounds)
        ),
        "@ROUND_OBJS@": " ".join(f"build/round_{r}.o" for r in range(rounds)),
    }

    def fill(template: str) -> str:
        for key, value in subs.items():
            template = template.replace(key, value)
        return template

    makefile, fix = _break_makefile(rng, fill(C_MAKEFILE), rounds)
    files: dict[str, str | bytes] = {
        "Makefile": makefile,
        f"include/{prog}.h": fill(C_HEADER),
        "src/main.c": fill(C_MAIN),
        "src/crc32.c": fill(C_CRC32),
        "src/stats.c": fill(C_STATS),
        "src/digest.c": _digest_source(prog, rounds),
        **{f"src/round_{r}.c": _round_source(r, t) for r, t in enumerate(tables)},
        **{f"samples/{n}": data for n, data in samples.items()},
    }
    expected = "".join(_signature(n, d, seed, tables) + "\n" for n, d in sorted(samples.items()))
    out = f"/root/{prog}-signatures.tsv"
    instruction = f"""
`{proj}` is a small C program, `{prog}`, that prints a signature line (line, word and byte
counts, CRC-32, a 64-bit digest and the byte entropy) for every file it is given. Its build is
broken: `make` in `{proj}` fails.

1. Fix the build so that a plain `make` in `{proj}` (also from a clean tree) produces the
   binary `build/{prog}`. Do not change what the program computes.
2. Run `build/{prog}` on all the files in `{proj}/samples/`, in file-name order, and save its
   standard output to `{out}`.
"""
    check = f"""[ -f {out} ] || {{ echo "FAIL: {out} missing"; exit 1; }}
diff {out} /tests/expected.tsv || {{ echo "FAIL: {out} differs"; exit 1; }}
rm -rf /tmp/verify && cp -a {proj} /tmp/verify && cd /tmp/verify && rm -rf build
make > /tmp/verify.log 2>&1 || {{ tail -n 20 /tmp/verify.log; echo "FAIL: make"; exit 1; }}
./build/{prog} samples/*.txt | diff - /tests/expected.tsv
"""
    solution = [
        f"cd {proj} && ls -R && cat Makefile",
        "make 2>&1 | tail -n 5",
        fix,
        f"make 2>&1 | tail -n 3 && ./build/{prog} samples/*.txt > {out}",
        f"cat {out}",
    ]
    return GeneratedTask(
        instruction=instruction,
        setup_sh=f"mkdir -p {proj} && cp -r project/. {proj}/\n",
        check_sh=check,
        solution=solution,
        setup_files={f"project/{k}": v for k, v in files.items()},
        test_files={"expected.tsv": expected},
    )


# --------------------------------------------------------------------------------------------
# 5. unittest-fix: a package with a planted bug; its (slow, property-based) tests fail.

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


# --------------------------------------------------------------------------------------------
# 6. bulk-data: questions about a ~100 MB CSV of card transactions (awk, sort, uniq).

BULK_GEN = r'''"""The transaction export of one task, generated deterministically from params.json.

`python3 gen.py params.json` writes it; the checker imports rows() for a pristine copy.
"""

import json
import random
import sys
from datetime import date, timedelta
from pathlib import Path

FIELDS = ["txn_id", "timestamp", "user_id", "merchant", "category", "amount_cents", "status"]


def cumulative(weights):
    out, total = [], 0.0
    for weight in weights:
        total += weight
        out.append(total)
    return out


def rows(p):
    """Every data row as a list of strings, in the file's column order."""
    rng = random.Random(p["seed"])
    users = sorted({f"u{rng.randrange(10 ** 6):06d}" for _ in range(p["users"])})
    rng.shuffle(users)
    user_cum = cumulative(1 / (rank + 1) ** 0.7 for rank in range(len(users)))
    merchants = p["merchants"]  # [name, category, weight, mean amount]
    merchant_cum = cumulative(m[2] for m in merchants)
    start = date.fromisoformat(p["start"])
    days = [(start + timedelta(days=d)).isoformat() for d in range(p["days"] + 1)]
    step = p["days"] * 86400 / p["rows"]
    order = [FIELDS.index(name) for name in p["columns"]]
    later = {}  # row number -> double-posted copies of earlier rows to emit after it
    for first in range(0, p["rows"], 5000):
        k = min(5000, p["rows"] - first)
        picks = zip(rng.choices(users, cum_weights=user_cum, k=k),
                    rng.choices(merchants, cum_weights=merchant_cum, k=k))
        for n, (user, (merchant, category, _, mean)) in enumerate(picks, first):
            t = int(n * step)
            r = rng.random()
            status = "ok" if r < 0.93 else "declined" if r < 0.985 else "reversed"
            when = f"{days[t // 86400]}T{t % 86400 // 3600:02d}:{t % 3600 // 60:02d}:{t % 60:02d}Z"
            amount = str(int(rng.expovariate(1 / mean)) + 50)
            values = (f"{rng.getrandbits(48):012x}", when, user, merchant, category, amount, status)
            row = [values[i] for i in order]
            yield row
            if rng.random() < p["dup_rate"]:
                later.setdefault(n + rng.randrange(1, 4000), []).append(row)
            yield from later.pop(n, [])
    for n in sorted(later):
        yield from later[n]


def main():
    p = json.loads(Path(sys.argv[1]).read_text())
    path = Path(p["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        f.write(",".join(p["columns"]) + "\n")
        batch = []
        for row in rows(p):
            batch.append(",".join(row))
            if len(batch) == 20000:
                f.write("\n".join(batch) + "\n")
                batch = []
        if batch:
            f.write("\n".join(batch) + "\n")


if __name__ == "__main__":
    main()
'''

BULK_CHECK = r'''"""Recomputes every asked answer from a pristine copy of the data and compares."""

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, "/tests")
import gen  # noqa: E402


def answers(p):
    """{output path: expected lines}, from one pass over the rows."""
    col = {name: i for i, name in enumerate(p["columns"])}
    user, merchant, category = col["user_id"], col["merchant"], col["category"]
    amount, status, ts, txn = col["amount_cents"], col["status"], col["timestamp"], col["txn_id"]
    qs = {q["kind"]: q for q in p["questions"]}
    top, declined, daily, ids = defaultdict(int), set(), Counter(), Counter()
    cat_n, cat_sum = Counter(), Counter()
    top_q, daily_q = qs.get("top_users", {}), qs.get("merchant_daily", {})
    for row in gen.rows(p):
        if row[status] == "ok":
            cat_n[row[category]] += 1
            cat_sum[row[category]] += int(row[amount])
            if row[category] == top_q.get("category"):
                top[row[user]] += int(row[amount])
        elif row[status] == "declined":
            declined.add(row[user])
        if row[merchant] == daily_q.get("merchant"):
            daily[row[ts][:10]] += 1
        ids[row[txn]] += 1
    expected = {
        "top_users": lambda q: [f"{u},{t}" for u, t in sorted(
            top.items(), key=lambda kv: (-kv[1], kv[0]))[: q.get("top", 0)]],
        "declined_users": lambda q: [str(len(declined))],
        "category_totals": lambda q: [f"{c},{cat_n[c]},{s}" for c, s in sorted(
            cat_sum.items(), key=lambda kv: (-kv[1], kv[0]))],
        "merchant_daily": lambda q: [f"{d},{n}" for d, n in sorted(daily.items())],
        "duplicates": lambda q: sorted(t for t, n in ids.items() if n > 1),
    }
    return {q["output"]: expected[q["kind"]](q) for q in p["questions"]}


def main():
    p = json.loads(Path("/tests/params.json").read_text())
    ok = True
    for output, want in answers(p).items():
        path = Path(output)
        got = [line.rstrip() for line in path.read_text().strip().splitlines()] \
            if path.is_file() else None
        if got != want:
            ok = False
            print(f"FAIL: {output}\nexpected:", *want[:20], "got:", *(got or ["<missing>"])[:20],
                  sep="\n")
    if not ok:
        sys.exit(1)
    print("ok")


main()
'''

BULK_CATEGORIES = {
    "books": ["pageturner", "inkwell-books", "chapter-one"],
    "travel": ["skyway-air", "railgo", "harbor-ferries", "nomad-hotels"],
    "grocery": ["freshmart", "green-basket", "corner-grocer", "daily-harvest"],
    "fuel": ["petro-plus", "fuelstop"],
    "electronics": ["voltage", "circuit-city", "pixel-store"],
    "dining": ["noodle-bar", "taco-town", "cafe-aroma", "pizza-forno", "sushi-go"],
    "health": ["carepharm", "vital-clinic"],
    "games": ["arcade-hub", "questline"],
    "apparel": ["threadline", "urban-wear", "sole-mates"],
    "home": ["nest-supply", "hammer-hall"],
}
BULK_ROWS = (1_450_000, 1_700_000)  # one awk or sort pass: ~1.2-2.5 s on one CPU


def _bulk_question(kind: str, rng: random.Random, p: dict, col: dict[str, int]) -> dict:
    """One question: its params, the instruction text and the reference shell command."""
    f = p["path"]
    st, user, amount, cat = col["status"], col["user_id"], col["amount_cents"], col["category"]
    if kind == "top_users":
        category, top = rng.choice(sorted(BULK_CATEGORIES)), rng.randint(5, 12)
        out = "/root/answers/top_users.csv"
        text = (
            f"The {top} users with the highest total `amount_cents` over transactions with "
            f"status `ok` in category `{category}`: lines `<user_id>,<total>`, highest total "
            "first, ties by user_id ascending."
        )
        cmd = (
            f'awk -F, \'${st} == "ok" && ${cat} == "{category}" {{s[${user}] += ${amount}}} '
            f'END {{for (u in s) print u "," s[u]}}\' {f} | sort -t, -k2,2nr -k1,1 '
            f"| head -n {top} > {out}"
        )
        return {
            "kind": kind,
            "category": category,
            "top": top,
            "output": out,
            "text": text,
            "cmd": cmd,
        }
    if kind == "declined_users":
        out = "/root/answers/declined_users.txt"
        text = (
            "How many distinct users have at least one transaction with status `declined`? "
            "A single integer."
        )
        cmd = f"awk -F, '${st} == \"declined\" {{print ${user}}}' {f} | sort -u | wc -l > {out}"
        return {"kind": kind, "output": out, "text": text, "cmd": cmd}
    if kind == "category_totals":
        out = "/root/answers/category_totals.csv"
        text = (
            "For each category, the number of transactions with status `ok` and their total "
            "`amount_cents`: lines `<category>,<count>,<total>`, largest total first "
            "(ties by category ascending)."
        )
        cmd = (
            f'awk -F, \'NR > 1 && ${st} == "ok" {{n[${cat}]++; s[${cat}] += ${amount}}} '
            f'END {{for (c in n) print c "," n[c] "," s[c]}}\' {f} '
            f"| sort -t, -k3,3nr -k1,1 > {out}"
        )
        return {"kind": kind, "output": out, "text": text, "cmd": cmd}
    if kind == "merchant_daily":
        merchant = rng.choice([m[0] for m in p["merchants"]])
        out = "/root/answers/merchant_daily.csv"
        text = (
            f"For merchant `{merchant}`: the number of its transactions (any status) per "
            "calendar day (UTC, from `timestamp`): lines `<YYYY-MM-DD>,<count>` in date "
            "order, leaving out days without any."
        )
        cmd = (
            f'awk -F, \'${col["merchant"]} == "{merchant}" '
            f"{{n[substr(${col['timestamp']}, 1, 10)]++}} "
            f'END {{for (d in n) print d "," n[d]}}\' {f} | sort > {out}'
        )
        return {"kind": kind, "merchant": merchant, "output": out, "text": text, "cmd": cmd}
    out = "/root/answers/duplicate_txn_ids.txt"
    text = "Every `txn_id` that occurs on more than one row: one per line, sorted ascending."
    cmd = f"cut -d, -f{col['txn_id']} {f} | sort | uniq -d > {out}"
    return {"kind": kind, "output": out, "text": text, "cmd": cmd}


@family("bulk-data")
def bulk_data(rng: random.Random) -> GeneratedTask:
    name = rng.choice(["transactions", "card_txns", "payments", "ledger_export"])
    # The status column last: every awk pass then splits whole lines, so timings are stable.
    columns = ["txn_id", "timestamp", "user_id", "merchant", "category", "amount_cents", "status"]
    merchants = [
        [m, c, rng.randint(1, 30), rng.randrange(800, 12000)]
        for c in sorted(BULK_CATEGORIES)
        for m in BULK_CATEGORIES[c]
    ]
    p = {
        "seed": rng.randrange(2**31),
        "path": f"/srv/data/{name}.csv",
        "columns": columns,
        "rows": rng.randrange(*BULK_ROWS),
        "users": rng.randint(20000, 60000),
        "merchants": merchants,
        "days": rng.randint(60, 120),
        "start": (date(2023, 1, 1) + timedelta(days=rng.randrange(300))).isoformat(),
        "dup_rate": rng.choice([0.0005, 0.001, 0.002]),
    }
    col = {c: i + 1 for i, c in enumerate(columns)}  # awk/cut field numbers
    kinds = rng.sample(
        ["top_users", "declined_users", "category_totals", "merchant_daily", "duplicates"], 2
    )
    questions = [_bulk_question(kind, rng, p, col) for kind in kinds]
    p["questions"] = [{k: v for k, v in q.items() if k not in ("text", "cmd")} for q in questions]
    asked = "\n".join(f"{i}. `{q['output']}`: {q['text']}" for i, q in enumerate(questions, 1))
    instruction = f"""
`{p["path"]}` is an export of card transactions: CSV with a header line naming the columns,
one transaction per row, amounts in integer cents. Some transactions were double-posted, so a
few rows occur twice; every row counts as it is (do not de-duplicate) unless a question says
otherwise.

Answer the questions below. Write each answer to the file named, in exactly the format given
(no header line, nothing else in the file):

{asked}
"""
    solution = [
        f"ls -lh /srv/data && head -n 4 {p['path']} && wc -l {p['path']}",
        f"mkdir -p /root/answers && {questions[0]['cmd']}",
        questions[1]["cmd"],
        "head -n 5 /root/answers/*",
    ]
    return _data_task(instruction, BULK_GEN, BULK_CHECK, p, solution)
