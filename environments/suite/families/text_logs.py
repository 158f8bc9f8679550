"""text-logs: reports from rotated web logs with awk, a config rewrite with sed.

The task: three reports (top 5xx clients, requests and visitors per day, paths by bytes sent)
over a week of rotated, partly gzipped access logs, then an nginx config edit that must hit
one address but not a look-alike. The check regenerates every log line from the seed in the
spec, recomputes the three reports, and compares them and the config byte for byte.
"""

from __future__ import annotations

import datetime as dt
import random

from obsspec.environments.suite.families._common import _random_date, _spec_task
from obsspec.environments.suite.registry import GeneratedTask, family

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
    return _spec_task(
        instruction,
        solution,
        LOGS_GEN + LOGS_SETUP,
        LOGS_GEN + LOGS_CHECK,
        setup_spec,
        check_spec,
    )
