"""Hostile landing files, seeded, with what bronze must make of each (``bench/fuzz.py --data``
at full size, ``tests/test_fuzz.py`` at a small one).

Three feeds, each read by its own bronze table:

* ``hostile`` (JSON Lines): a line larger than the maximum record size, JSON nested
  ``depth`` deep (an object and an array), random bytes named ``.json``, a UTF-8 BOM, CRLF, lone
  CR and mixed line ends, NUL bytes (raw in a string, a line of them, and escaped in a valid
  record), blank lines and no line end at the end, and names with a space, ``%``, ``%25``,
  ``#``, ``?``, ``*``, ``[]``, ``{}``, unicode and ``..``; and one whose name starts with ``..``,
  which Spark's file source never reads (names starting with ``.`` or ``_``): it stays in
  landing, and ``medallion status`` names it;
* ``hostile_csv``: RFC 4180 rows (a quoted line break, a quoted comma, doubled quotes, CRLF),
  a value of the wrong type, a row with a field too many, a BOM, a field larger than the
  maximum record size;
* ``tiny``: ``tiny_files`` files of one record each.

:func:`check` compares a run's tables with the expectations: per file, its ledger status and
its records read = rows in bronze + rows in quarantine, as expected; the tables' totals and ids;
the quarantine's reasons; landing drained but for the hidden name. It returns the problems
found, per case (one per hostile file; the tiny files are one case).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ORDER_SCHEMA = "order_id STRING, customer_id STRING, quantity INT, event_time TIMESTAMP"
CSV_SCHEMA = "id INT, name STRING, qty INT"
HIDDEN = "..hidden.json"  # a name Spark's file source skips
TOO_LARGE = "record too large"


@dataclass
class Expected:
    """What bronze must make of one file: its ledger status, rows in bronze and in
    quarantine, the ids it puts in bronze, and the reasons of its quarantined rows."""

    status: str = "archived"
    good: int = 0
    quarantined: int = 0
    ids: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()  # a fragment of each quarantined row's reason, in any order


def order(i: int, **extra: Any) -> dict[str, Any]:
    return {"order_id": f"o{i:07d}", "customer_id": f"c{i % 17}", "quantity": i % 9 + 1,
            "event_time": f"2026-11-01T{(i // 60) % 24:02d}:{i % 60:02d}:00Z", **extra}


class Feed:
    """Files written into one landing folder, with their expectations."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.expected: dict[str, Expected] = {}
        self.next_id = 0
        folder.mkdir(parents=True, exist_ok=True)

    def orders(self, n: int, **extra: Any) -> tuple[list[str], tuple[str, ...]]:
        """``n`` order lines and their ids."""
        rows = [order(self.next_id + i, **extra) for i in range(n)]
        self.next_id += n
        return [json.dumps(r) for r in rows], tuple(r["order_id"] for r in rows)

    def put(self, name: str, data: bytes, expected: Expected) -> None:
        (self.folder / name).write_bytes(data)
        self.expected[name] = expected


def write_json_feed(folder: Path, rng: random.Random, big_bytes: int, depth: int) -> Feed:
    feed = Feed(folder)
    lines, ids = feed.orders(20)
    feed.put("good.json", ("\n".join(lines) + "\n").encode(), Expected(good=20, ids=ids))

    (first, last), ids = feed.orders(2)
    big = json.dumps(order(10**6, note="x" * big_bytes))
    feed.put("oversized.json", f"{first}\n{big}\n{last}\n".encode(),
             Expected(good=2, quarantined=1, ids=ids, reasons=(TOO_LARGE,)))

    (line,), ids = feed.orders(1)
    nested = '{"order_id": "deep", "n": ' + '{"n": ' * depth + "1" + "}" * depth + "}"
    feed.put("deep.json", f"{line}\n{nested}\n{'[' * depth}{']' * depth}\n".encode(),
             Expected(good=1, quarantined=2, ids=ids, reasons=("malformed",) * 2))

    noise = bytes(rng.randrange(256) for _ in range(64 * 1024)) + b"\xff\xfe"  # never UTF-8
    feed.put("random.json", noise, Expected(status="quarantined"))

    for name, head, sep, tail in [("bom.json", "\ufeff", "\n", "\n"),
                                  ("crlf.json", "", "\r\n", "\r\n"),
                                  ("cr.json", "", "\r", "\r"),
                                  ("no-line-end.json", "", "\n", "")]:
        lines, ids = feed.orders(3)
        feed.put(name, (head + sep.join(lines) + tail).encode(), Expected(good=3, ids=ids))
    lines, ids = feed.orders(4)
    mixed = f"{lines[0]}\r\n{lines[1]}\r{lines[2]}\n\n   \n{lines[3]}\n"
    feed.put("mixed-line-ends.json", mixed.encode(), Expected(good=4, ids=ids))

    (first, last), ids = feed.orders(2)
    escaped, (escaped_id,) = feed.orders(1, note="a\u0000b")  # json.dumps escapes it
    raw_nul = '{"order_id": "a\x00b", "quantity": 1}'
    feed.put("nul.json", f"{first}\n{raw_nul}\n\x00\x00\x00\n{escaped[0]}\n{last}\n".encode(),
             Expected(good=3, quarantined=2, ids=(*ids, escaped_id),
                      reasons=("malformed",) * 2))

    names = ["with space.json", "100%.json", "100%25.json", "a#b.json", "a?b.json",
             "a*b.json", "[x].json", "{y,z}.json", "naïve 表 😀.json", "a..b.json",
             "odd name %20 #1 ..表.json"]
    for name in names:
        lines, ids = feed.orders(2)
        feed.put(name, ("\n".join(lines) + "\n").encode(), Expected(good=2, ids=ids))
    lines, _ = feed.orders(2)
    feed.put(HIDDEN, ("\n".join(lines) + "\n").encode(), Expected(status="landing"))
    return feed


def write_csv_feed(folder: Path, big_bytes: int) -> Feed:
    feed = Feed(folder)
    rows = ('id,name,qty\r\n1,"line one\nline two",3\r\n2,"x,y",4\r\n3,"say ""hi""",5\r\n'
            '4,bad,not-a-number\r\n5,one,field,too many\r\n6,表,7\r\n')
    # (a value that does not fit its type is rescued, its row kept; a row with a field too
    # many is malformed)
    feed.put("rfc4180.csv", rows.encode(), Expected(
        good=5, quarantined=1, ids=("1", "2", "3", "4", "6"), reasons=("malformed",)))
    feed.put("bom.csv", "\ufeffid,name,qty\n7,bom,1\n8,bom,2\n".encode(),
             Expected(good=2, ids=("7", "8")))
    feed.put("big field.csv", f"id,name,qty\n9,small,1\n10,{'x' * big_bytes},2\n".encode(),
             Expected(good=1, quarantined=1, ids=("9",), reasons=(TOO_LARGE,)))
    return feed


def write_tiny_feed(folder: Path, files: int) -> Feed:
    feed = Feed(folder)
    all_ids: list[str] = []
    for i in range(files):
        (line,), ids = feed.orders(1)
        (folder / f"tiny-{i:06d}.json").write_text(line + "\n")
        all_ids += ids
    feed.expected["*"] = Expected(good=files, ids=tuple(all_ids))
    return feed


def check(spark: Any, feed: Feed, table: Any, id_column: str, summary: Any) -> dict[str, str]:
    """The problems found, per case (a file's name, ``*`` for a whole feed of tiny files, or
    ``run`` for the run itself); empty when bronze made of every file what it must."""
    from pyspark.sql import functions as F

    from bronze.spec import ledger_path

    problems: dict[str, str] = {}
    status = getattr(summary.status, "value", summary.status)
    if status != "succeeded":
        problems["run"] = f"the run {status}: {summary.error}"
        return problems
    ledger = {Path(r["path"]).name: r.asDict()
              for r in spark.table(table.qualified("files")).collect()}
    bronze = spark.table(table.full_name)
    quarantine = spark.table(table.qualified("quarantine"))
    def name_of(source_file: str) -> str:
        return Path(ledger_path(source_file)).name

    by_file: dict[str, int] = {}
    ids_by_file: dict[str, set[str]] = {}
    for r in bronze.select("_source_file", F.col(id_column).cast("string").alias("id")
                           ).collect():
        name = name_of(r["_source_file"])
        by_file[name] = by_file.get(name, 0) + 1
        ids_by_file.setdefault(name, set()).add(r["id"])
    q_rows: dict[str, list[dict[str, Any]]] = {}
    for r in quarantine.select("_source_file", "_reason", F.length("_raw").alias("raw")
                               ).collect():
        q_rows.setdefault(name_of(r["_source_file"]), []).append(r.asDict())

    for name, want in feed.expected.items():
        names = [n for n in ledger if n.startswith("tiny-")] if name == "*" else [name]
        if want.status == "landing":
            if name in ledger or not (feed.folder / name).exists():
                problems[name] = "expected the file left in landing, unread"
            continue
        rows = [ledger.get(n) for n in names]
        if any(r is None for r in rows) or len(rows) != (len(want.ids) if name == "*" else 1):
            problems[name] = f"expected {len(names)} ledger row(s), found {rows}"
            continue
        statuses = {r["status"] for r in rows if r}
        good = sum(r["good_rows"] for r in rows if r)
        bad = sum(r["quarantined_rows"] for r in rows if r)
        read = sum(r["rows"] for r in rows if r)
        found_ids = set().union(*(ids_by_file.get(n, set()) for n in names))
        reasons = [q["_reason"] for n in names for q in q_rows.get(n, [])]
        wrong = []
        if statuses != {want.status}:
            wrong.append(f"status {statuses}, expected {want.status}")
        if (good, bad) != (want.good, want.quarantined) or read != good + bad:
            wrong.append(f"ledger read {read} = {good} in bronze + {bad} quarantined, expected "
                         f"{want.good} + {want.quarantined}")
        if sum(by_file.get(n, 0) for n in names) != want.good:
            wrong.append(f"bronze holds {sum(by_file.get(n, 0) for n in names)} rows")
        if found_ids != set(want.ids):
            wrong.append(f"bronze ids {sorted(found_ids)[:5]}, expected {sorted(want.ids)[:5]}")
        if len(reasons) != want.quarantined or sorted(
                next((w for w in want.reasons if w in r), r) for r in reasons
        ) != sorted(want.reasons):
            wrong.append(f"quarantine reasons {reasons}, expected {want.reasons}")
        if any(q["raw"] > 4096 for n in names for q in q_rows.get(n, [])
               if TOO_LARGE in q["_reason"]):
            wrong.append("an oversized record's raw text is not cut to 4096 characters")
        if any((feed.folder / n).exists() for n in names):
            wrong.append("still in landing")
        if wrong:
            problems[name] = "; ".join(wrong)
    return problems
