"""env-config: point a tool at the right data via its INI file and root's shell profile.

The task: a reporting tool reads an INI file named by an environment variable; edit the INI
(the key `path` is in two sections), export the variable and extend PATH in root's .bashrc,
run the report. The check compares the INI settings and comments, starts fresh login and
interactive shells to see the variable and PATH, and recomputes the report from the data seed.
"""

from __future__ import annotations

import random

from obsspec.environments.suite.families._common import _spec_task
from obsspec.environments.suite.registry import GeneratedTask, family

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
    return _spec_task(
        instruction,
        solution,
        SALES_GEN + CONFIG_SETUP,
        SALES_GEN + CONFIG_CHECK,
        spec,
        check_spec,
    )
