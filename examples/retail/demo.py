"""The end-to-end demo on the local default: a realistic, dirty retail feed through every layer.

:func:`generate` writes the landing feed once (its manifest, :class:`Feed`, is kept under the
root, so a second run finds it, generates nothing and ingests nothing new); ``--fresh`` deletes
the lakehouse root first. The orders feed holds, besides the plain events:

* **duplicate events**: a till re-sends some events a few minutes later, in the same file;
* **re-delivered files**: two files are exported again, under new names, right after the next;
* **late events**: an offline till uploads its first six hours of orders later, after the
  first run: a delivery of its own, far behind the watermark by then;
* **malformed lines**: a truncated JSON object and an HTML error page in every tenth file;
* **rejected events**: orders with a quantity of 0, which silver's expectation quarantines;
* **an extra column**: one file carries a ``coupon`` key the schema does not know (rescued);
* **a producer change halfway**: from the middle file on, every event carries a new
  ``channel`` key (rescued, or a new column under ``schema_evolution: addNewColumns``);
* **an unreadable file**: a gzip file cut short in transfer (moved whole to the quarantine);
* **a store not known yet**: a store opens for the feed's last day (``s12``), and its row comes
  in a stores file of its own, delivered later: silver's ``references`` check holds its orders
  in ``silver.orders_held`` until silver.stores has it, then releases them (and gold counts
  them).

The customers feed is a CSV extract, then a second one that updates some customers with its
columns in another order (read by name: each value lands in its own column). The update moves
them to another segment and country from halfway through the orders' event time on: silver
keeps both versions of each (SCD type 2), and the ``segment_sales`` mart counts each order
under the segment its customer had when it was placed.

Event times advance by four hours a file, and a re-delivered file comes right after the next
one: its events are within silver's deduplication delay (two days) of the first copies, so
they are duplicates, not late rows. The first run reads the whole backlog; silver and gold
read whole commits of the layer before (see :mod:`framework.eventtime`), so the backlog is one
silver micro-batch. The offline till's file is landed after it (:func:`deliver_later`) and
read by a second run, whose watermark is far ahead of its events: they are dropped as late.
The new store's file is landed with it: the second run's silver.orders releases the orders it
held, within gold's watermark (the store opens a day before the feed's end).
:func:`summarize` gathers what each layer did and what its tables hold.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from framework.config.checks import CheckAction
from framework.config.model import Layer, ProjectConfig, Table
from framework.errors import ConfigError
from gold.spec import MartSpec
from silver.spec import SilverTableSpec

MANIFEST = ".demo-feed.json"
LATER = ".demo-later"  # files delivered after the first run, under the root, by feed
FIRST_EVENT = datetime(2026, 11, 1, tzinfo=UTC)
FILE_SPAN = timedelta(hours=4)
STORES = 12
CUSTOMERS = 200
REGIONS = ("north", "south", "east", "west")
NEW_STORE = f"s{STORES:02d}"  # opens for the feed's last day; its row is delivered later
NEW_STORE_FILES = 6  # the files of that day (FILE_SPAN each)


@dataclass
class Feed:
    """What the generated orders feed holds; the figures the layers must account for."""

    files: int = 0  # landing files of the orders feed, the unreadable one included
    records: int = 0  # lines in the readable files: what bronze must account for
    events: int = 0  # distinct, well-formed orders
    duplicate_events: int = 0  # lines repeating an event of the same file
    redelivered_files: list[str] = field(default_factory=list)
    redelivered_records: int = 0
    late_events: int = 0
    later_files: list[str] = field(default_factory=list)  # landed after the first run
    malformed_lines: int = 0
    rejected_events: int = 0  # quantity 0
    extra_column_file: str = ""
    extra_column_events: int = 0  # lines holding it
    new_column: str = "channel"
    new_column_from: str = ""  # the first file whose events carry the new column
    new_column_events: int = 0  # lines holding it
    customer_updates: int = 0  # rows of the second customers extract (columns reordered)
    customer_updates_at: str = ""  # their updated_at: halfway through the orders' event time
    unreadable_file: str = ""
    new_store: str = NEW_STORE  # a store whose row comes in a later stores file
    new_store_from: str = ""  # the first orders file with its orders
    new_store_orders: int = 0  # its orders of a quantity above 0: held until its row lands

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def generate(project: ProjectConfig, orders: int = 500_000, files: int = 100,
             seed: int = 7) -> tuple[Feed, bool]:
    """Write the demo's landing files unless they were written before.

    Returns the feed's manifest and whether it was generated now.
    """
    if files < 30 or orders < files * 10:
        # fewer files span too little event time for the offline till's orders to be late
        raise ConfigError(f"expected at least 30 files of at least 10 orders each, found "
                          f"{orders} orders over {files} files")
    root = Path(project.env.root)
    manifest = root / MANIFEST
    if manifest.exists():
        return Feed(**json.loads(manifest.read_text())), False
    rng = random.Random(seed)
    landing = root / "landing"
    feed = _orders(landing / "orders", orders, files, rng)
    feed.customer_updates_at = (FIRST_EVENT + (files // 2) * FILE_SPAN).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    feed.customer_updates = _customers(landing / "customers", rng, feed.customer_updates_at)
    _stores(landing / "stores", root / LATER / "stores", feed,
            opened_on=FIRST_EVENT + (files - NEW_STORE_FILES) * FILE_SPAN)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps(feed.to_dict(), indent=2))
    return feed, True


def reset(project: ProjectConfig) -> None:
    """Delete the local lakehouse root (``--fresh``)."""
    shutil.rmtree(project.env.root, ignore_errors=True)


# ---------------------------------------------------------------------- the feed
class _Delivery:
    """Writes landing files one after another, each one second newer than the last, so the
    file source takes them in delivery order."""

    def __init__(self, folder: Path, count: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.mtime = time.time() - count - 10

    def write(self, name: str, data: bytes) -> str:
        path = self.folder / name
        path.write_bytes(data)
        self.mtime += 1
        os.utime(path, (self.mtime, self.mtime))
        return name


def _lines(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def _orders(folder: Path, orders: int, files: int, rng: random.Random) -> Feed:
    feed = Feed()
    delivery = _Delivery(folder, files + 4)
    per_file = orders // files
    redeliver = {files // 3, (2 * files) // 3}
    extra_column = 2
    new_column_from = files // 2
    new_store_from = files - NEW_STORE_FILES
    sent: dict[int, list[str]] = {}
    n = 0
    for f in range(files):
        count = per_file + (orders - per_file * files if f == files - 1 else 0)
        start = FIRST_EVENT + f * FILE_SPAN
        offsets = sorted(rng.randrange(int(FILE_SPAN.total_seconds())) for _ in range(count))
        lines = []
        stores = STORES + 1 if f >= new_store_from else STORES  # the new store's too
        for offset in offsets:
            event = _order(n, start + timedelta(seconds=offset), rng, stores=stores)
            n += 1
            if event["quantity"] == 0:
                feed.rejected_events += 1
            elif event["store_id"] == NEW_STORE:
                feed.new_store_orders += 1
            if f == extra_column:
                event["coupon"] = f"AUTUMN{rng.randrange(10, 30)}"
            if f >= new_column_from:
                event["channel"] = rng.choice(["store", "web", "app"])
            lines.append(json.dumps(event))
        feed.events += count
        # a till retries about one event in a hundred a little later
        for _ in range(max(1, count // 100)):
            i = rng.randrange(len(lines))
            lines.insert(min(len(lines), i + rng.randrange(1, 20)), lines[i])
            feed.duplicate_events += 1
        if f % 10 == 5 and f not in redeliver:
            lines.insert(len(lines) // 3, lines[0][: len(lines[0]) // 2])  # cut short
            lines.insert(2 * len(lines) // 3, "<html><body>504 Gateway Timeout</body></html>")
            feed.malformed_lines += 2
        name = delivery.write(f"orders-{f:05d}.json", _lines(lines))
        feed.records += len(lines)
        if f >= new_column_from:
            feed.new_column_events += sum(1 for line in lines if '"channel"' in line)
        if f == new_column_from:
            feed.new_column_from = name
        if f == new_store_from:
            feed.new_store_from = name
        if f == extra_column:
            feed.extra_column_file = name
            feed.extra_column_events = sum(1 for line in lines if '"coupon"' in line)
        sent[f] = lines
        if f - 1 in redeliver:  # the export of f - 1 is re-sent after f
            again = delivery.write(f"orders-{f - 1:05d}-resent.json", _lines(sent[f - 1]))
            if f - 1 >= new_column_from:
                feed.new_column_events += sum(1 for line in sent[f - 1] if '"channel"' in line)
            feed.redelivered_files.append(again)
            feed.redelivered_records += len(sent[f - 1])
            feed.records += len(sent[f - 1])
        sent.pop(f - 2, None)
    # a gzip file cut short in transfer: nothing in it can be read
    late = max(20, orders // 1000)
    whole = gzip.compress(_lines([json.dumps(_order(n + late + i, FIRST_EVENT, rng))
                                  for i in range(100)]))
    feed.unreadable_file = delivery.write(f"orders-{files:05d}.json.gz", whole[:20])
    # an offline till uploads its first six hours later: far behind every watermark by then
    lines = [json.dumps(_order(n + i, FIRST_EVENT + timedelta(seconds=rng.randrange(21_600)),
                               rng, quantity=rng.randint(1, 5))) for i in range(late)]
    later = folder.parent.parent / LATER / folder.name
    later.mkdir(parents=True, exist_ok=True)
    (later / "orders-till-offline.json").write_bytes(_lines(lines))
    feed.later_files.append("orders-till-offline.json")
    feed.late_events = late
    feed.records += late
    feed.files = files + len(redeliver) + 2
    return feed


def deliver_later(project: ProjectConfig) -> dict[str, list[str]]:
    """Land the files the feed holds back for a later delivery (the offline till's upload, the
    new store's row), each into its bronze table's landing folder with ``medallion land``'s
    ordering; returns them by table (none once they have landed)."""
    from framework.storage import LocalStorage, land

    landed: dict[str, list[str]] = {}
    later = Path(project.env.root) / LATER
    for folder in sorted(p for p in later.glob("*") if p.is_dir()) if later.is_dir() else []:
        table = project.table(folder.name, Layer.BRONZE)
        files = sorted(str(p) for p in folder.glob("*"))
        if not files:
            continue
        done = land(LocalStorage(), files, table.spec.landing(table))  # type: ignore[attr-defined]
        for f in files:
            os.remove(f)
        landed[table.name] = [info.path for info in done]
    return landed


def _order(n: int, at: datetime, rng: random.Random, quantity: int | None = None,
           stores: int = STORES) -> dict[str, Any]:
    return {
        "order_id": f"o{n:08d}",
        "customer_id": f"c{rng.randrange(CUSTOMERS):04d}",
        "store_id": f"s{rng.randrange(stores):02d}",
        "event_time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "quantity": quantity if quantity is not None else
        (0 if rng.random() < 0.001 else rng.randint(1, 5)),
        "unit_price": f"{rng.uniform(1, 80):.2f}",
        "status": rng.choices(["new", "paid", "shipped", "refunded"], [30, 40, 29.9, 0.1])[0],
    }


def _customers(folder: Path, rng: random.Random, updated_at: str) -> int:
    """The customers extract, then an update of some of them whose columns come in another
    order (matched by name), effective at ``updated_at``; returns the update's rows."""
    rows = ["customer_id,name,segment,country,updated_at"]
    rows += [f"c{c:04d},Customer {c},{rng.choice(['retail', 'business'])},"
             f"{rng.choice(['NL', 'DE', 'FR', 'BE'])},2026-10-01T00:00:00Z"
             for c in range(CUSTOMERS)]
    rows.append("c9999,Bad Row,retail,NL,not-a-timestamp,extra")  # does not fit: quarantined
    delivery = _Delivery(folder, 2)
    delivery.write("customers.csv", _lines(rows))
    updated = range(0, CUSTOMERS, 10)
    update = ["updated_at,country,segment,customer_id,name"]
    update += [f"{updated_at},LU,wholesale,c{c:04d},Customer {c}" for c in updated]
    delivery.write("customers-update.csv", _lines(update))
    return len(updated)


def _store(s: int, opened_on: str) -> str:
    return json.dumps({"store_id": f"s{s:02d}", "name": f"Store {s}", "region": REGIONS[s % 4],
                       "opened_on": opened_on})


def _stores(folder: Path, later: Path, feed: Feed, opened_on: datetime) -> None:
    """The stores file, and the new store's row in a file of its own, delivered later."""
    _Delivery(folder, 1).write("stores.json", _lines(
        [_store(s, f"20{10 + s}-03-01") for s in range(STORES)]))
    later.mkdir(parents=True, exist_ok=True)
    (later / "stores-opened.json").write_bytes(_lines(
        [_store(STORES, opened_on.strftime("%Y-%m-%d"))]))
    feed.later_files.append("stores-opened.json")


# ---------------------------------------------------------------------- the summary
COLUMNS = ("rows", "added", "quarantined", "duplicates_dropped", "late_rows_dropped",
           "files_archived")
# The demo's marts (conf/tables/gold), each shown by a query when configured: the regional
# view, whose filter on a dimension column prunes the fact, and the segments, materialized,
# whose orders count under their customer's segment at the time (an SCD2 join as_of).
PRUNING_MART, PRUNING_QUERY = "regional_sales", (
    "SELECT window_date, name, region, orders, items, revenue FROM {mart} "
    "WHERE region = 'north' ORDER BY window_date DESC, name LIMIT 5")
SEGMENTS_MART, SEGMENTS_QUERY = "segment_sales", (
    "SELECT segment, min(order_date) AS first_day, max(order_date) AS last_day, "
    "sum(orders) AS orders, sum(revenue) AS revenue FROM {mart} GROUP BY segment "
    "ORDER BY segment")


def _is_mart(table: Table) -> bool:
    return isinstance(table.spec, MartSpec)


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Run summaries (``RunSummary.to_dict``) as one: per table, rows and counts added up
    (the state's size is the last run's), the worst status, the total duration."""
    tables: dict[str, dict[str, Any]] = {}
    for run in runs:
        for t in run["tables"]:
            acc = tables.setdefault(t["table"], {**t, "batches": 0, "rows_in": 0,
                                                 "rows_out": 0, "counts": {}})
            for key in ("batches", "rows_in", "rows_out"):
                acc[key] += t[key]
            for key, value in t["counts"].items():
                last = key == "state_rows"
                acc["counts"][key] = value if last else acc["counts"].get(key, 0) + value
            if t["status"] != "succeeded":
                acc["status"], acc["error"] = t["status"], t["error"]
    statuses = [r["status"] for r in runs]
    status = next((s for s in ("failed", "stopped") if s in statuses), "succeeded")
    return {**runs[0], "status": status, "tables": list(tables.values()),
            "duration_s": round(sum(r["duration_s"] for r in runs), 3), "runs": len(runs)}


def summarize(spark: Any, project: ProjectConfig, run: dict[str, Any], feed: Feed,
              generated: bool) -> dict[str, Any]:
    """What the demo did, for a person and as JSON: the feed, per layer and table the rows it
    holds and what this run added, quarantined, dropped and archived, a gold query that
    prunes, with its rows and what it read, and the orders per customer segment at the time."""
    from framework.pruning import explain_pruning

    by_table = {t["table"]: t for t in run["tables"]}
    layers: dict[str, dict[str, Any]] = {}
    for table in sorted(project.tables, key=lambda t: list(Layer).index(t.layer)):
        if _is_mart(table):
            continue  # built from its fact, not fed: its query below shows it
        done = by_table.get(table.full_name, {})
        counts = done.get("counts", {})
        figures = {
            "rows": spark.table(table.full_name).count()
            if spark.catalog.tableExists(table.full_name) else 0,
            "added": done.get("rows_out", 0),
            "quarantined": counts.get("quarantined_rows", 0),
            "duplicates_dropped": counts.get("duplicates_dropped", 0),
            "late_rows_dropped": counts.get("late_rows_dropped",
                                            counts.get("late_groups_dropped", 0)),
            "files_archived": counts.get("files_archived", 0),
        }
        if "files_quarantined" in counts:
            figures["files_quarantined"] = counts["files_quarantined"]
        if "rescued_rows" in counts:
            figures["rescued"] = counts["rescued_rows"]
        if "held_rows" in counts:
            figures |= _held(spark, table, counts)
        history = table.companion_location("schemas")
        if table.layer is Layer.BRONZE and os.path.isdir(os.path.join(history, "_delta_log")):
            figures["schema_changes"] = [
                {"version": r["version"], "batch_id": r["batch_id"], "cause": r["cause"],
                 "added": r["added"], "widened": r["widened"]}
                for r in spark.read.format("delta").load(history).orderBy("version").collect()
                if r["version"] > 1]
        layers.setdefault(table.layer.value, {})[table.name] = figures
    summary: dict[str, Any] = {
        "root": project.env.root,
        "feed": {"generated_now": generated, **feed.to_dict()},
        "status": run["status"],
        "duration_s": run["duration_s"],
        "layers": layers,
        "run": run,
    }
    marts = {t.name: t for t in project.of_layer(Layer.GOLD) if _is_mart(t)}
    if run["status"] != "succeeded":
        return summary
    if PRUNING_MART in marts:
        sql = PRUNING_QUERY.format(mart=marts[PRUNING_MART].full_name)
        df = spark.sql(sql)  # collected once, then the evidence is read from the plan that ran
        summary["query"] = {**_answer(df, sql),
                            "pruning": explain_pruning(spark, df, run=False).to_dict()}
    if SEGMENTS_MART in marts:
        sql = SEGMENTS_QUERY.format(mart=marts[SEGMENTS_MART].full_name)
        summary["segments"] = _answer(spark.sql(sql), sql)
    return summary


def _held(spark: Any, table: Table, counts: dict[str, Any]) -> dict[str, Any]:
    """The rows a table's batches held for a key another table lacked, those its runs released
    (or quarantined, held too long), those still held, and what they wait for."""
    spec = cast(SilverTableSpec, table.spec)
    held = table.qualified("held")
    return {
        "held": counts["held_rows"], "released": counts.get("released_rows", 0),
        "expired": counts.get("expired_rows", 0),
        "still_held": spark.table(held).count() if spark.catalog.tableExists(held) else 0,
        "held_for": [f"{c.references.column} in {c.references.layer}.{c.references.table}"
                     for c in spec.references if c.action is CheckAction.HOLD],
    }


def _answer(df: Any, sql: str) -> dict[str, Any]:
    """A query's text, columns and rows."""
    return {"sql": sql, "columns": df.columns, "rows": [[_plain(v) for v in r]
                                                          for r in df.collect()]}


def _plain(value: Any) -> Any:
    return value if isinstance(value, int | float | str | type(None)) else str(value)


def render(summary: dict[str, Any]) -> str:
    """The summary as text for a terminal."""
    from framework.text import render_table

    feed = summary["feed"]
    out = [
        f"feed: {feed['files']} order files, {feed['records']:,} lines: {feed['events']:,} "
        f"orders, {feed['duplicate_events']:,} duplicate events, "
        f"{len(feed['redelivered_files'])} re-delivered files ({feed['redelivered_records']:,} "
        f"lines), {feed['late_events']:,} late events, {feed['malformed_lines']} malformed "
        f"lines, {feed['rejected_events']} orders of quantity 0, an extra column in "
        f"{feed['extra_column_file']}, a new column '{feed['new_column']}' from "
        f"{feed['new_column_from']} on ({feed['new_column_events']:,} lines), unreadable "
        f"{feed['unreadable_file']}"
        + (f", {feed['new_store_orders']:,} orders of a new store {feed['new_store']} from "
           f"{feed['new_store_from']} on, its row in a later stores file"
           if feed.get("new_store_orders") else "")
        + f"; customers: an update of {feed['customer_updates']} "
        "with its columns in another order"
        + (f", effective {feed['customer_updates_at']}" if feed.get("customer_updates_at")
           else "")
        + ("" if feed["generated_now"] else " (generated by an earlier run)"),
        "",
    ]
    header = ("table", "rows", "added", "quarantined", "duplicates dropped",
              "late rows dropped", "files archived")
    rows = []
    for layer, tables in summary["layers"].items():
        for name, f in tables.items():
            archived = str(f["files_archived"])
            if f.get("files_quarantined"):
                archived += f" (+{f['files_quarantined']} quarantined)"
            rows.append((f"{layer}.{name}", f"{f['rows']:,}", f"{f['added']:,}",
                         f"{f['quarantined']:,}", f"{f['duplicates_dropped']:,}",
                         f"{f['late_rows_dropped']:,}", archived))
    out.append(render_table(header, rows, sep="  "))
    for layer, tables in summary["layers"].items():
        for name, f in tables.items():
            if f.get("rescued"):
                out.append(f"{layer}.{name}: {f['rescued']:,} rows with rescued values "
                           "(_rescued_data)")
            if f.get("held"):
                out.append(f"{layer}.{name}: {f['held']:,} rows held in {layer}.{name}_held for "
                           f"a key not there yet ({', '.join(f['held_for'])}): "
                           f"{f['released']:,} released when it arrived, "
                           + (f"{f['expired']:,} quarantined past max_hold, " if f["expired"]
                              else "") + f"{f['still_held']:,} still held")
            for change in f.get("schema_changes", []):
                what = "; ".join(part for part in (
                    f"added {change['added']}" if change["added"] else "",
                    f"widened {change['widened']}" if change["widened"] else "") if part)
                out.append(f"{layer}.{name}: schema v{change['version']} from batch "
                           f"{change['batch_id']} ({change['cause']}): {what}")
    query = summary.get("query")
    if query:
        out += ["", f"gold query: {query['sql']}",
                render_table(query["columns"], [[str(v) for v in r] for r in query["rows"]])]
        for scan in query["pruning"]["scans"]:
            if scan["partitions_total"]:
                out.append(f"  {scan['table']}: read {scan['partitions_read']} of "
                           f"{scan['partitions_total']} partitions, {scan['files_read']} of "
                           f"{scan['files_total']} files"
                           + (" (dynamic partition pruning)" if scan["dynamic_pruning"] else ""))
    segments = summary.get("segments")
    if segments:
        out += ["", "orders per customer segment, each under its customer's segment when "
                "placed (silver.customers keeps a version per change, SCD type 2):",
                f"gold query: {segments['sql']}",
                render_table(segments["columns"],
                             [[str(v) for v in r] for r in segments["rows"]])]
    return "\n".join(out)
