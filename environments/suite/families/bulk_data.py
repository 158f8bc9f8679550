"""bulk-data: questions about a ~100 MB CSV of card transactions (awk, sort, uniq).

The task: two questions (top users of a category, users with declined transactions, totals
per category, a merchant's daily counts, or double-posted ids), each answered into a file.
gen.py writes the CSV at build time; the check rebuilds a pristine copy, recomputes every
asked answer and compares it with the agent's file.
"""

from __future__ import annotations

import random
from datetime import date, timedelta

from obsspec.environments.suite.families._common import _data_task
from obsspec.environments.suite.registry import GeneratedTask, family

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
