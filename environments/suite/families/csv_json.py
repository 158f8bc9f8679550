"""csv-json: join an orders export (CSV or JSON lines) with customers.json in python3.

The task: a summary of completed orders (revenue per region as JSON, top customers or
monthly revenue per tier as CSV), with messy status values and orphaned orders to handle.
gen.py writes the data at build time; the check rebuilds a pristine copy, recomputes the
summary and compares it with the agent's file (money to the cent).
"""

from __future__ import annotations

import random
import shlex

from obsspec.environments.suite.families._common import _data_task
from obsspec.environments.suite.registry import GeneratedTask, family


def _printf_script(lines: list[str], path: str) -> str:
    """One shell line writing a multi-line script (how one types a script without an editor)."""
    return "printf '%s\\n' " + " ".join(shlex.quote(line) for line in lines) + f" > {path}"


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
