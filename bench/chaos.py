"""Crash consistency: interrupt the driver in every phase of bronze, silver and gold, restart,
and compare the lake with a clean run of the same feed.

    python bench/chaos.py --kills 20 --seed 1 [--terms 2] [--faults 0.3] [--orders 3000]

The demo's generator writes one dirty feed (duplicates, re-deliveries, malformed lines, an
unreadable file, a new key halfway), delivered in ``--deliveries`` slices and four reserve ones
(in the order of the files' times) into two fresh roots. From the second delivery on, each
delivery also lands:

* one orders file and one customers file again under a name already ingested, with other
  bytes (the orders one with a key of its own, so the table's schema changes again);
* new rows for the dimensions (a few customers moved to another segment, a few closed, a
  few stores renamed), so that every delivery runs silver's MERGEs and rewrites the marts.

Every delivery, the first too, also lands a full extract of the stores (``store_snapshots``:
each leaves out another fifth of them, which come back in the next one, and moves or renames a
few), kept as SCD type 2 by change data derived from snapshot to snapshot. After the slices, the
demo's later delivery lands on its own (the offline till's late file, and the row of the store
that opened for the feed's last day): silver.orders held that store's orders in
``orders_held``, and releases them in that delivery's runs.

The tables are the demo's (its customers kept as SCD type 2, and a mart joining the version
valid at each order's time), plus what the demo leaves out: its regional mart materialized, a
gold aggregate in append mode, and deletes of customers (a closed one). After each
delivery the clean root is run once with ``medallion run all`` (availableNow). The chaos root
is run the same way, as its own process group, and interrupted, restarted, interrupted
again... until the delivery's share of the kills has landed; then it runs to the end, and the
next delivery lands.

Each interruption aims at a phase (:data:`PHASES`): it waits for the job's event that opens the
phase, then a seeded random delay of up to the phase's length, and kills the process group
with SIGKILL. The phases: session start-up and the metastore, just after the run took the
lake's lease, a file delivered again under a used name being set aside (customers,
``redelivery: skip``: between its ledger row and its move) or renamed to be ingested (orders),
a bronze query's first listing, mid-batch, a schema change (the table altered, the history not
yet written), between a bronze commit and its ledger commit, a batch's moves of its files (after
its ledger commit), the ledger's replace (a move refused: with ``--faults`` only), the release of
held orders (their append to silver.orders, then their removal from ``orders_held``), a silver
MERGE, an SCD2 table's change log and MERGE (``customers``), the same for changes derived
from snapshots (``store_snapshots``), a gold MERGE, a gold append, a
mart's rewrite, and a moment drawn over the clean run's duration.

A delivery takes its share of the plan (:func:`schedule`), in the order of the moments its
interruptions would land at in the delivery's clean run (their phases' events there, or the
moment drawn; tables run at once, so that is not the pipeline's order), leaving for a later
delivery a phase that cannot open in it (one that did not open in the clean run, such as a
file sent again before the second delivery, or a second kill in a phase that opens once per
delivery). A run
that ends before its phase opens passes that kill and the delivery's later ones on to the next
delivery. The reserve slices take what is left, one by one; once every interruption has
happened, the rest of the feed lands in one delivery.

``--replay``, once the deliveries are in, runs rounds of a quarantine's lifecycle
(:func:`replay_under_kills`): silver.orders' rule ``positive_quantity`` corrected (orders of
quantity 0 pass it) and the rows it quarantined replayed (``medallion quarantine replay``),
once on the clean root, and on the chaos root interrupted in the replay's three steps (marking
its rows, their batch through the table, marking them replayed) until a replay finds nothing
left; then the strict rule back, a file of orders of quantity 0 landed, and the next round,
until every interruption was sent. A replay id is the version of the root's own quarantine, so
only whether a row has one is compared.

``--hold``, once the deliveries are in, runs rounds of held rows' lifecycle
(:func:`hold_under_kills`), silver.orders' ``max_hold`` shortened to :data:`HOLD_FOR`: two files
of orders land, of two stores silver.stores does not have, and both roots run (silver.orders
holds them in ``orders_held``); then one of the two stores lands and, once the rows are held
longer than ``max_hold``, the clean root runs once, the chaos root interrupted in the release
(its rows of the store that came appended to silver.orders, those of the store that never
comes to its quarantine, both removed from ``orders_held``: a kill completes the release at
the restart) until a run finds nothing to release; then the next round, until every
interruption was sent.

``--terms`` more interruptions are SIGTERM to the driver: the run must exit 0 with a summary
that says it stopped (or finished), and the next run carry on.

``--faults RATE`` puts the chaos root on ``faulty://``, Hadoop's local file system with a
seeded fraction of the renames and deletes of landing files refused (``tests/faultfs``): the
moves of each batch and of the reconciler. The runs that follow the kills run with the faults
on too; the run that ends each delivery and the last one with them off, and
they must settle every file left behind.

Then the two roots must hold the same lake:

* every Delta table (bronze, its quarantine and file ledger, silver, its quarantine, held rows
  and change logs, gold, the materialized marts) row for row, with chispa, leaving out the
  columns that record when a row was ingested or held and where the root is;
* bronze's rows per order id as many as the clean run's (``lost``, ``duplicated``);
* landing drained, and the same files archived and quarantined;
* the run history (``ops/runs``, which differs by run ids and times, so it is not compared
  row for row) holding exactly one row per committed batch of every query, however often
  the driver was killed: no batch without its row, none with two (``history_mismatches``);
* the summaries' counts adding up: in every completed run, each silver table's rows in = rows
  written + duplicates + late + dropped + quarantined + held; over the clean runs, silver's rows
  in = bronze's rows.

The commands' JVMs run with the tests' settings (``tests/jvm_classes.py``: the client compiler
only, the class archive, interpreted projections) unless ``SPARK_SUBMIT_OPTS`` is set: what a
kill leaves behind does not depend on them, and the harness's many short runs take about a
third of the time they take with the JVM's defaults on a busy machine.

Any difference is printed with the seed, the phases and the kill times, so it can be replayed.
The last line is one JSON object: ``kills`` (those sent), ``kills_unsent`` (planned, but their
phase never opened), ``restarts``, ``lost``, ``duplicated``, ``mismatched_tables``, the
interruptions and ``ratio`` = kills survived / kills planned (all those sent when the lake
matches, none when it does not; a kill never sent counts against it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# Columns whose values depend on when a row was ingested (or held) or on the root's path.
VOLATILE = {"_ingested_at", "_source_file", "_quarantined_at", "ingested_at", "updated_at",
            "path", "location", "_commit_version", "_commit_timestamp", "recorded_at",
            "_held_at",
            "_source_row"}  # (a silver quarantine's source row: bronze's row, ingestion too)
# Which files a bronze batch takes is Spark's file source's to decide: a kill after it logged
# its next files (``sources/0/N``) and before the query logged the batch (``offsets/N``) gives,
# at the restart, one batch of that entry and the next. A bronze table's and its ledger's batch
# ids are compared as the rows and the ledger agree on them (:func:`batch_membership`), not
# against the clean run's split.
SPLIT = {"_batch_id", "batch_id"}


@dataclass(frozen=True)
class Phase:
    """Where an interruption aims: after ``event`` (of a table whose name holds ``table``)
    by up to ``within`` seconds; with no event, at a moment up to ``within`` seconds after the
    start (or over the clean run's duration, when ``within`` is 0)."""

    name: str
    event: str | None
    within: float
    table: str = ""
    needs: tuple[str, ...] = ()  # tables, one of which must be run for the phase to open
    first: int = 1  # the first delivery in which it can open
    once: bool = False  # it opens once per delivery (a file's event, not a batch's)
    faults: bool = False  # it opens only on a store that refuses operations (--faults)
    op: str = ""  # it opens in this operation only (--refresh, --backfill, --replay)


PHASES = [  # in the pipeline's order
    Phase("start-up", None, 14.0),
    Phase("lease", "lake.lease.taken", 1.0),
    # (customers run before orders: bronze tables run in the order of their names)
    Phase("redelivery-skip", "bronze.deliveries.quarantining", 0.5, "customers",
          needs=("customers",), first=2, once=True),
    Phase("redelivery", "bronze.file.redelivering", 0.3, "orders", needs=("orders",),
          first=2, once=True),
    Phase("listing", "stream.query.started", 0.6, "bronze"),
    Phase("mid-batch", "bronze.batch.started", 1.5),
    Phase("schema-change", "bronze.schema.changing", 1.5, "orders", needs=("orders",),
          once=True),
    Phase("bronze-ledger", "bronze.batch.appended", 0.4),
    Phase("archiving", "bronze.files.settling", 0.15),
    Phase("ledger-replace", "bronze.ledger.replacing", 0.6, faults=True),
    # (silver.orders' orders held for a store that came later, written before its query)
    Phase("release", "silver.held.releasing", 2.0, "orders", needs=("orders",), first=2),
    Phase("silver-merge", "silver.batch.merging", 1.0, needs=("stores",)),
    Phase("scd2-merge", "silver.changes.applying", 1.5, "customers", needs=("customers",)),
    Phase("snapshot-merge", "silver.changes.applying", 1.5, "store_snapshots",
          needs=("store_snapshots",)),
    Phase("gold-merge", "gold.batch.merging", 1.0, needs=("store_sales",)),
    Phase("gold-append", "stream.query.started", 2.5, "store_sales_final",
          needs=("store_sales_final",)),
    Phase("mart-rewrite", "gold.mart.writing", 1.0, needs=("regional_sales", "segment_sales")),
    Phase("anywhere", None, 0.0),
    # --refresh: the refresh's own steps, and its rebuild
    Phase("refresh-begun", "journal.begun", 0.3, op="refresh"),
    Phase("refresh-set-aside", "refresh.checkpoint.moved", 0.2, op="refresh"),
    Phase("refresh-reset", "refresh.table.resetting", 0.4, op="refresh"),
    Phase("refresh-silver", "silver.batch.committed", 1.0, "orders", op="refresh"),
    Phase("refresh-gold", "gold.batch.merging", 1.0, "store_sales", needs=("store_sales",),
          op="refresh"),
    Phase("refresh-mart", "gold.mart.writing", 1.0, needs=("regional_sales", "segment_sales"),
          op="refresh"),
    Phase("refresh-finishing", "refresh.finishing", 0.3, op="refresh"),
    Phase("refresh-replay", "bronze.replay.batch.started", 1.0, "orders", op="refresh-bronze"),
    Phase("refresh-replay-ledger", "bronze.replay.ledger.replacing", 0.3, "orders",
          op="refresh-bronze"),
    # --backfill: the backfill's query, and the next run settling landing copies of its files
    Phase("backfill-start", "stream.query.started", 0.6, "orders", op="backfill"),
    Phase("backfill-batch", "bronze.batch.started", 1.5, "orders", op="backfill"),
    Phase("backfill-ledger", "bronze.batch.appended", 0.4, "orders", op="backfill"),
    Phase("backfill-landing", "bronze.file.backfilled_earlier", 0.3, "orders", op="backfill"),
    # --replay: a replay of quarantined rows, its three steps
    Phase("replay-mark", "silver.quarantine.marking", 0.3, "orders", op="replay"),
    Phase("replay-batch", "silver.quarantine.sending", 2.0, "orders", op="replay"),
    Phase("replay-finish", "silver.quarantine.finishing", 0.3, "orders", op="replay"),
    # --hold: a release of held rows (their append, the expired ones' quarantine, the rewrite
    # of the held table), and the restart's completion of one a kill stopped
    Phase("hold-release", "silver.held.releasing", 3.0, "orders", op="hold"),
]
ORDER = {p.name: i for i, p in enumerate(PHASES)}
# Without the clean run's times, a delivery takes a moment drawn over the clean run first,
# while the whole delivery is left to do (later, a run with less left can end before it).
FIRST = {**ORDER, "anywhere": -1}
FAULT = re.compile(r"injected fault: (\w+ of \S+) refused")
BY_NAME = {p.name: p for p in PHASES}
RESERVE = 4  # slices of the feed kept for interruptions left over
DELIVERY = re.compile(r"\.delivery-\d{8}T\d{9}Z(-\d+)?")


@dataclass
class Interruption:
    phase: str
    signal: str  # KILL or TERM
    delay: float  # seconds after the phase's event (or after the start)
    delivery: int = -1
    at_s: float | None = None  # seconds after the start when it was sent
    after: str = ""  # the job's last event before it
    outcome: str = "planned"  # killed, stopped, missed (the run ended first), failed
    exit_code: int | None = None

    def brief(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "delay"}


@dataclass
class Lake:
    """One root, its environment and the summaries of its completed runs."""

    name: str
    root: Path
    summaries: list[dict[str, Any]] = field(default_factory=list)
    last_log: Path | None = None  # the log of the last run that succeeded


# ---------------------------------------------------------------------------------- set-up
def write_tables(work: Path, only: set[str] | None = None) -> None:
    """The demo's tables, its regional mart materialized, deletes of customers, and a gold
    aggregate in append mode (of those named in ``only``, when given)."""
    tables = work / "conf" / "tables"
    shutil.copytree(REPO / "conf" / "tables", tables)
    mart = tables / "gold" / "regional_sales.yaml"
    mart.write_text(mart.read_text() + "materialize: true\n")
    # The orders feed drifts (an extra key in one file, a new one halfway): each new key
    # becomes a column from the batch where it first appears.
    orders = tables / "bronze" / "orders.yaml"
    spec = yaml.safe_load(orders.read_text())
    spec["source"]["schema_evolution"] = "addNewColumns"
    orders.write_text(yaml.safe_dump(spec, sort_keys=False))
    # A customers file sent again under its name is set aside (the orders' is ingested).
    customers = tables / "bronze" / "customers.yaml"
    spec = yaml.safe_load(customers.read_text())
    spec["source"]["redelivery"] = "skip"
    customers.write_text(yaml.safe_dump(spec, sort_keys=False))
    final = yaml.safe_load((tables / "gold" / "store_sales.yaml").read_text())
    final.update(description="Orders and revenue per store and day, written once the day is "
                             "final.", output_mode="append")
    final["aggregates"] = final["aggregates"][:1] + final["aggregates"][2:]
    (tables / "gold" / "store_sales_final.yaml").write_text(yaml.safe_dump(final))
    # The customers' SCD2 table: a customer whose segment becomes 'closed' is deleted
    # (dimension_changes sends some), its version closed; the segments mart joins no version
    # of it after that.
    versions = tables / "silver" / "customers.yaml"
    spec = yaml.safe_load(versions.read_text())
    spec["scd2"]["deletes"] = "segment = 'closed'"
    versions.write_text(yaml.safe_dump(spec, sort_keys=False))
    # Full snapshots of the stores, one file per delivery (snapshot_changes writes them):
    # their changes derived snapshot to snapshot and kept as SCD type 2.
    (tables / "bronze" / "store_snapshots.yaml").write_text(yaml.safe_dump({
        "description": "Full extracts of the stores, one file per extract.",
        "source": {"path": "landing/store_snapshots", "format": "json",
                   "schema": "snapshot INT, store_id STRING, name STRING, region STRING",
                   "clean_source": "archive"}}, sort_keys=False))
    (tables / "silver" / "store_snapshots.yaml").write_text(yaml.safe_dump({
        "description": "Stores, a version per change of region, from full extracts.",
        "source": "store_snapshots",
        "columns": [{"name": n} for n in ("store_id", "name", "region", "snapshot")],
        "mode": "scd2",
        "scd2": {"keys": ["store_id"], "snapshot_by": "snapshot",
                 "track_history": ["region"]}}, sort_keys=False))
    for spec in tables.rglob("*.yaml"):
        if only is not None and spec.stem not in only:
            spec.unlink()
    orders = tables / "silver" / "orders.yaml"
    if orders.exists() and not (tables / "silver" / "stores.yaml").exists():
        spec = yaml.safe_load(orders.read_text())  # its orders held for stores: none to read
        spec.pop("checks", None)
        orders.write_text(yaml.safe_dump(spec, sort_keys=False))


def write_env(work: Path, lake: Lake, faults: dict[str, str] | None = None) -> None:
    spark_conf = {"spark.ui.enabled": "false", "spark.driver.memory": "2g"}
    root = str(lake.root)
    if faults is not None:
        from tests.faultfs import spark_conf as faulty_conf

        spark_conf |= faulty_conf(**faults)
        root = f"faulty://{lake.root}"
        extra = {"metastore": str(lake.root / "metastore_db")}  # the catalog stays local
    else:
        extra = {}
    folder = work / "conf" / "environments"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{lake.name}.yaml").write_text(yaml.safe_dump({
        "runtime": "local", "root": root, "master": "local[2]", "shuffle_partitions": 2,
        "schemas": {layer: f"{layer}_{lake.name}" for layer in ("bronze", "silver", "gold")},
        "spark_conf": spark_conf, **extra}))


def deliveries(landing: Path, count: int) -> list[list[Path]]:
    """The feed's files in the order of their times, in ``count`` slices; the first file of
    each feed but the orders (its dimensions: customers, stores, whose files come last) with
    the first slice, so that every delivery runs silver's MERGEs and gold's mart, and a file
    of theirs can be sent again."""
    files = sorted((p for p in landing.rglob("*") if p.is_file()),
                   key=lambda p: (p.stat().st_mtime_ns, p.name))
    size = math.ceil(len(files) / count)
    slices = [files[i:i + size] for i in range(0, len(files), size)]
    firsts: dict[Path, Path] = {}
    for f in files:
        if f.parent.name != "orders":
            firsts.setdefault(f.parent, f)
    for first in firsts.values():
        for part in slices:
            if first in part:
                part.remove(first)
        slices[0].append(first)
    return [part for part in slices if part]


def sent_again(slices: list[list[Path]], feed: Path, again: Path, delivery: int
               ) -> list[Path]:
    """New deliveries, under names already delivered, for delivery ``delivery``: the first
    orders file of the slice before, and the first customers file delivered so far, each
    without its last ``delivery`` lines (a re-export), written under ``again`` (as under
    ``feed``) with a time after every earlier file's."""
    copies = []
    for table, earlier in (("orders", slices[delivery - 1]),
                           ("customers", [f for s in slices[:delivery] for f in s])):
        first = next((f for f in earlier if f.parent.name == table), None)
        if first is None:
            continue
        target = again / f"{delivery}" / first.relative_to(feed)
        target.parent.mkdir(parents=True, exist_ok=True)
        lines = first.read_bytes().splitlines(keepends=True)[:-delivery]
        if table == "orders":  # a re-export with a key of its own: the table's schema grows
            lines = [with_key(line, f"export_{delivery}") for line in lines]
        target.write_bytes(b"".join(lines))
        copies.append(target)
    return copies


def with_key(line: bytes, key: str) -> bytes:
    """A JSON line with one key more (a line that is no JSON object as it is)."""
    try:
        record = json.loads(line)
    except ValueError:
        return line
    if not isinstance(record, dict):
        return line
    return (json.dumps({**record, key: "yes"}) + "\n").encode()


def dimension_changes(work: Path, delivery: int) -> list[Path]:
    """New rows for the dimensions (the customers and stores the run has), written under
    ``work/dims/<delivery>`` as under the feed, so that every delivery runs silver's MERGEs
    and rewrites the marts: a few customers moved to another segment, a few closed, a few
    stores renamed, each with a sequence value after every earlier one's."""
    from examples.retail.demo import CUSTOMERS, REGIONS, STORES

    folder = work / "dims" / f"{delivery}" / "landing"
    specs = work / "conf" / "tables" / "bronze"
    written = []
    if (specs / "customers.yaml").exists():
        rows = ["customer_id,name,segment,country,updated_at"]
        rows += [f"c{c:04d},Customer {c},tier{delivery},NL,2026-11-{10 + delivery:02d}T00:00:00Z"
                 for c in range(delivery, CUSTOMERS, 37)]
        # Some close (a delete in silver.customers), to come back in a later delivery.
        rows += [f"c{c:04d},Customer {c},closed,NL,2026-11-{10 + delivery:02d}T12:00:00Z"
                 for c in range(delivery + 11, CUSTOMERS, 53)]
        written.append(folder / "customers" / f"customers-change-{delivery}.csv")
        written[-1].parent.mkdir(parents=True, exist_ok=True)
        written[-1].write_text("\n".join(rows) + "\n")
    if (specs / "stores.yaml").exists():
        rows = [json.dumps({"store_id": f"s{s:02d}", "name": f"Store {s} ({delivery})",
                            "region": REGIONS[s % 4], "opened_on": f"2040-01-{delivery:02d}"})
                for s in range(delivery % 3, STORES, 3)]
        written.append(folder / "stores" / f"stores-change-{delivery}.json")
        written[-1].parent.mkdir(parents=True, exist_ok=True)
        written[-1].write_text("\n".join(rows) + "\n")
    return written


def snapshot_changes(work: Path, delivery: int) -> list[Path]:
    """The stores' full extract number ``delivery``, written under ``work/dims/<delivery>`` as
    under the feed: each extract leaves out another fifth of the stores (which come back in
    the next), moves a few to another region (a new version) and renames others (in place)."""
    from examples.retail.demo import REGIONS, STORES

    if not (work / "conf" / "tables" / "bronze" / "store_snapshots.yaml").exists():
        return []
    rows = [json.dumps({"snapshot": delivery, "store_id": f"s{s:02d}",
                        "name": f"Store {s} ({delivery % 2})",
                        "region": REGIONS[(s + (delivery if s % 3 == 0 else 0)) % 4]})
            for s in range(STORES) if (s + delivery) % 5 != 0]
    written = work / "dims" / f"{delivery}" / "landing" / "store_snapshots" / \
        f"stores-extract-{delivery}.json"
    written.parent.mkdir(parents=True, exist_ok=True)
    written.write_text("\n".join(rows) + "\n")
    return [written]


def deliver(files: list[Path], feed: Path, roots: list[Path]) -> None:
    for f in files:
        for root in roots:
            target = root / f.relative_to(feed)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)  # keeps the file's time: Spark reads in that order


# ---------------------------------------------------------------------------------- runs
RUN_ALL = ("run", "all")


def start(work: Path, lake: Lake, command: tuple[str, ...] = RUN_ALL
          ) -> tuple[subprocess.Popen[bytes], Path, Path]:
    stamp = time.time_ns()
    log, summary = work / f"{lake.name}-{stamp}.log", work / f"{lake.name}-{stamp}.json"
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    summarised = ["--summary", str(summary)] if command == RUN_ALL else []
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(BIN / "medallion"), *command, "--conf", str(work / "conf"),
             "--env", lake.name, "--log-format", "json", "--log-level", "debug",
             *summarised],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return process, log, summary


def run_through(work: Path, lake: Lake, tries: int = 3,
                command: tuple[str, ...] = RUN_ALL) -> float:
    """Run until a run succeeds; its duration."""
    for _ in range(tries):
        began = time.perf_counter()
        process, log, summary = start(work, lake, command)
        if process.wait() == 0:
            lake.last_log = log
            if summary.exists():
                lake.summaries.append(json.loads(summary.read_text()))
            return time.perf_counter() - began
        print(f"  a run of {lake.name} failed (exit {process.returncode}): {log}", flush=True)
    raise SystemExit(f"{lake.name} did not complete in {tries} runs")


class LogTail:
    """The JSON events a run has written so far."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.rest, self.last = path, 0, "", ""

    def events(self) -> list[dict[str, Any]]:
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            chunk = fh.read().decode(errors="replace")
        self.offset += len(chunk.encode(errors="replace"))
        lines = (self.rest + chunk).split("\n")
        self.rest = lines.pop()
        found = []
        for line in lines:
            if line.startswith("{"):
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                found.append(event)
                self.last = f"{event.get('table', '')} {event.get('event', '')}".strip()
        return found


def interrupt(work: Path, lake: Lake, plan: Interruption, duration: float,
              command: tuple[str, ...] = RUN_ALL) -> Interruption:
    """Start a run, and send ``plan``'s signal when its phase comes."""
    phase = BY_NAME[plan.phase]
    process, log, summary = start(work, lake, command)
    began = time.monotonic()
    tail = LogTail(log)
    fire = began + moment(plan, duration) if phase.event is None else None
    while process.poll() is None:
        if fire is None:
            for event in tail.events():
                if event.get("event") == phase.event and phase.table in event.get("table", ""):
                    fire = time.monotonic() + plan.delay
                    break
        if fire is not None and time.monotonic() >= fire:
            tail.events()
            plan.at_s, plan.after = round(time.monotonic() - began, 2), tail.last
            if plan.signal == "KILL":
                os.killpg(process.pid, signal.SIGKILL)
            else:
                process.send_signal(signal.SIGTERM)  # the driver only, as a scheduler does
            break
        time.sleep(0.02)
    try:
        plan.exit_code = process.wait(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        plan.exit_code = process.wait()
    if plan.at_s is None:
        plan.outcome = "missed" if plan.exit_code == 0 else "failed"
    elif plan.signal == "KILL":
        plan.outcome = "killed"
    elif command != RUN_ALL:  # (a refresh writes no summary: its exit code tells)
        plan.outcome = "stopped" if plan.exit_code == 0 else "failed"
    else:
        done = json.loads(summary.read_text()) if summary.exists() else {}
        plan.outcome = "stopped" if plan.exit_code == 0 and done.get("status") in (
            "stopped", "succeeded") else "failed"
        if done:
            lake.summaries.append(done)
    if plan.outcome in ("missed", "failed") and plan.exit_code == 0 and summary.exists():
        lake.summaries.append(json.loads(summary.read_text()))
    if plan.outcome == "failed":
        print(f"  the run failed (exit {plan.exit_code}): {log}", flush=True)
    return plan


def make_plan(rng: random.Random, kills: int, terms: int, tables: set[str] | None = None,
              faults: bool = False) -> list[Interruption]:
    """``kills`` SIGKILLs and ``terms`` SIGTERMs, the phases dealt from shuffled decks (those
    that open with ``tables``, when given, and with ``faults``)."""
    phases: list[str] = []
    while len(phases) < kills + terms:
        deck = [p.name for p in PHASES if (faults or not p.faults) and not p.op
                and (tables is None or not p.needs or tables & set(p.needs))]
        rng.shuffle(deck)
        phases += deck
    signals = ["KILL"] * kills + ["TERM"] * terms
    rng.shuffle(signals)
    return [Interruption(name, sig, rng.uniform(0.0, BY_NAME[name].within or 1.0))
            for name, sig in zip(phases, signals, strict=False)]


def opened(log: Path) -> dict[str, float]:
    """When each phase with an event first opened in a run, in seconds after the run's first
    event (the events' own times)."""
    times: dict[str, float] = {}
    first: datetime | None = None
    for event in LogTail(log).events():
        try:
            at = datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00"))
        except (KeyError, ValueError):
            continue
        first = first or at
        for phase in PHASES:
            if phase.event is not None and phase.name not in times and \
                    event.get("event") == phase.event and phase.table in event.get("table", ""):
                times[phase.name] = (at - first).total_seconds()
    return times


def moment(step: Interruption, duration: float) -> float:
    """When an interruption with no event fires, in seconds after its run's start (as
    :func:`interrupt` sends it)."""
    phase = BY_NAME[step.phase]
    return step.delay if phase.within else step.delay * 0.9 * duration


def schedule(pending: list[Interruption], delivery: int,
             times: dict[str, float] | None = None, duration: float = 0.0
             ) -> tuple[list[Interruption], list[Interruption]]:
    """The interruptions of ``pending`` that can open in delivery ``delivery`` (1 on), and
    those left for a later one: a phase not open yet, a second one of a phase that opens once
    per delivery, or (given ``times``, from :func:`opened` on the delivery's clean run) a phase
    that did not open in the clean run.

    With ``times`` they go in the order of the moments they would land at in the clean run
    (their phase's opening, or the moment drawn for one with no event, over ``duration``);
    without, in the pipeline's order. Tables run at once, so the pipeline's order is not the
    order of time: a kill aimed at a silver MERGE after a gold one would find gold's work done
    by the runs before it, and a moment drawn late in the run, sent first, would pass the
    delivery's file set aside or renamed, a phase that opens once."""
    def when(step: Interruption) -> float:
        if times is None:
            return FIRST[step.phase]
        if BY_NAME[step.phase].event is None:
            return moment(step, duration)
        return times.get(step.phase, math.inf) + step.delay

    now: list[Interruption] = []
    later: list[Interruption] = []
    for step in sorted(pending, key=when):
        phase = BY_NAME[step.phase]
        names = [s.phase for s in now]
        if phase.first > delivery or (phase.once and step.phase in names) or (
                times is not None and phase.event is not None and step.phase not in times):
            later.append(step)
        else:
            now.append(step)
    return now, later


# ---------------------------------------------------------------------------------- refresh
AMOUNT, NEW_AMOUNT = "quantity * unit_price", "round(quantity * unit_price * 1.1, 2)"


def op_interruptions(rng: random.Random, op: str, kills: int, terms: int,
                     phases: str | None, tables: set[str] | None = None) -> list[Interruption]:
    """An operation's interruptions: ``phases`` (kills), or ``kills`` SIGKILLs and ``terms``
    SIGTERMs dealt from shuffled decks of the operation's phases (those that open with
    ``tables``, when given)."""
    if phases:
        names = phases.split(",")
        signals = ["KILL"] * len(names)
    else:
        names = []
        while len(names) < kills + terms:
            deck = [p.name for p in PHASES if (p.op == op or (
                op == "refresh-bronze" and p.op == "refresh")) and (
                    tables is None or not p.needs or tables & set(p.needs))]
            rng.shuffle(deck)
            names += deck
        names = names[:kills + terms]
        signals = ["KILL"] * kills + ["TERM"] * terms
        rng.shuffle(signals)
    return [Interruption(n, sig, rng.uniform(0.0, BY_NAME[n].within)) for n, sig in
            zip(names, signals, strict=True)]


def refresh_under_kills(work: Path, clean: Lake, chaos: Lake, table: str,
                        steps: list[Interruption], done: list[Interruption],
                        since: str | None = None) -> int:
    """silver.orders' amount changed; ``table`` refreshed (with what reads it; a bronze feed
    only for the files delivered from ``since`` on, when given): the clean root once, the
    chaos root interrupted at each of ``steps``. Each restart is a refresh (which
    completes the open one first, then refreshes again), every third a run (which completes
    it); a run that finds none open is done again as a refresh. A last run settles the chaos
    root. Returns the restarts."""
    spec = work / "conf" / "tables" / "silver" / "orders.yaml"
    spec.write_text(spec.read_text().replace(f'"{AMOUNT}"', f'"{NEW_AMOUNT}"'))
    refresh = ("refresh", table, "--downstream", *(("--since", since) if since else ()))
    duration = run_through(work, clean, command=refresh)
    print(f"refresh of {table}: clean {duration:.1f} s, {len(steps)} interruptions", flush=True)
    restarts = 0
    for i, step in enumerate(steps):
        command = RUN_ALL if i % 3 == 2 else refresh
        step.delivery = 0
        interrupt(work, chaos, step, duration, command)
        restarts += 1
        if step.outcome == "missed" and command == RUN_ALL:
            step.outcome, step.at_s = "planned", None
            interrupt(work, chaos, step, duration, refresh)
            restarts += 1
        done.append(step)
        print(f"  {step.signal} in {step.phase} ({' '.join(command[:2])}) at {step.at_s} s, "
              f"after {step.after or '(no event yet)'}: {step.outcome}", flush=True)
    run_through(work, chaos)
    return restarts + 1


# ---------------------------------------------------------------------------------- replay
STRICT, CORRECTED = "quantity > 0", "quantity >= 0"  # silver.orders' positive_quantity
REPLAY = ("quarantine", "replay", "silver.orders", "--rule", "positive_quantity")
QUANTITY = re.compile(r'("quantity"\s*:\s*)-?[0-9]+')


def free_orders(feed: Path, work: Path, round_: int) -> tuple[Path, Path]:
    """The feed's newest orders file again, its orders under new ids (``z<round>`` before
    each) and all of quantity 0, landed now: orders the strict rule quarantines. Returns the
    file and the folder it is delivered from."""
    orders = sorted((feed / "landing" / "orders").glob("*.json"),
                    key=lambda p: (p.stat().st_mtime, p.name))
    folder = work / "free" / str(round_)
    target = folder / "landing" / "orders" / f"z{round_}-{orders[-1].name}"
    target.parent.mkdir(parents=True, exist_ok=True)
    text = ORDER_ID.sub(rf"\g<1>z{round_}", orders[-1].read_text())
    target.write_text(QUANTITY.sub(r"\g<1>0", text))
    return target, folder


def replay_under_kills(work: Path, feed: Path, clean: Lake, chaos: Lake,
                       steps: list[Interruption], done: list[Interruption]) -> int:
    """Rounds of the quarantine's lifecycle on both roots, until every one of ``steps`` was
    sent. A round: (from the second on) a file of orders of quantity 0 landed and run under
    silver.orders' strict rule positive_quantity, which quarantines them; the rule corrected
    (orders of quantity 0 pass); the quarantined rows replayed, the clean root once, the chaos
    root interrupted at the steps in turn (each restart a replay, which first completes one a
    kill stopped) until a replay ends before its step's phase opens: nothing was left to
    replay, so the step waits for the next round; a last replay completes the round. The steps
    a cap of rounds (three per step) leaves unsent stay ``missed``. A replay and a run then
    settle both roots (gold reads the replayed rows). Returns the restarts."""
    spec = work / "conf" / "tables" / "silver" / "orders.yaml"
    strict = spec.read_text()
    loaded = yaml.safe_load(strict)
    rules = [e for e in loaded["expectations"] if e["name"] == "positive_quantity"]
    if [e["rule"] for e in rules] != [STRICT]:
        raise SystemExit(f"expected positive_quantity: {STRICT} in {spec}: the replay corrects "
                         f"it, found {rules}")
    rules[0]["rule"] = CORRECTED
    corrected = yaml.safe_dump(loaded, sort_keys=False)
    queue, restarts, round_ = list(steps), 0, 0
    while queue and round_ < 3 * len(steps):
        if round_:
            spec.write_text(strict)
            landed, folder = free_orders(feed, work, round_)
            deliver([landed], folder, [clean.root, chaos.root])
            for lake in (clean, chaos):
                run_through(work, lake)
            restarts += 1
        spec.write_text(corrected)
        duration = run_through(work, clean, command=REPLAY)
        print(f"replay round {round_}: clean {duration:.1f} s, {len(queue)} interruptions "
              f"left", flush=True)
        while queue:
            step = queue[0]
            step.delivery = round_
            interrupt(work, chaos, step, duration, REPLAY)
            restarts += 1
            if step.outcome == "missed":  # nothing left to replay: the next round
                print(f"  {step.phase}: the replay ended before the phase", flush=True)
                step.outcome, step.at_s, step.after = "planned", None, ""
                break
            done.append(queue.pop(0))
            print(f"  {step.signal} in {step.phase} (round {round_}) at {step.at_s} s, after "
                  f"{step.after or '(no event yet)'}: {step.outcome}", flush=True)
        run_through(work, chaos, command=REPLAY)
        restarts += 1
        round_ += 1
    for step in queue:
        step.outcome = "missed"
    spec.write_text(corrected)
    for lake in (clean, chaos):
        run_through(work, lake, command=REPLAY)
        run_through(work, lake)
    return restarts + 2


# ---------------------------------------------------------------------------------- hold
HOLD_FOR = 20  # seconds: silver.orders' max_hold in --hold's rounds
STORE_ID = re.compile(r'("store_id"\s*:\s*")[^"]*')


def held_orders(feed: Path, work: Path, round_: int) -> tuple[list[Path], Path, Path]:
    """The feed's newest orders file twice again, its orders under new ids, all of a store
    silver.stores lacks: ``n<round>`` (which comes) and ``x<round>`` (which never does); the
    row of store ``n<round>``; and the folder they are delivered from."""
    orders = sorted((feed / "landing" / "orders").glob("*.json"),
                    key=lambda p: (p.stat().st_mtime, p.name))
    folder = work / "held" / str(round_)
    written = []
    for store in (f"n{round_}", f"x{round_}"):
        target = folder / "landing" / "orders" / f"{store}-{orders[-1].name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        text = ORDER_ID.sub(rf"\g<1>{store}-", orders[-1].read_text())
        target.write_text(STORE_ID.sub(rf"\g<1>{store}", text))
        written.append(target)
    store = folder / "landing" / "stores" / f"store-n{round_}.json"
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps({"store_id": f"n{round_}", "name": f"Store n{round_}",
                                 "region": "north", "opened_on": "2026-11-01"}) + "\n")
    return written, store, folder


def released(log: Path) -> tuple[int, int]:
    """The rows a run released and expired (its ``silver.held.released`` events)."""
    events = [e for e in LogTail(log).events() if e.get("event") == "silver.held.released"]
    return (sum(int(e.get("released_rows", 0)) for e in events),
            sum(int(e.get("expired_rows", 0)) for e in events))


def hold_under_kills(work: Path, feed: Path, clean: Lake, chaos: Lake,
                     steps: list[Interruption], done: list[Interruption]) -> int:
    """Rounds of held rows' lifecycle on both roots, until every one of ``steps`` was sent
    (see the module's text); the steps a cap of rounds (three per step) leaves unsent stay
    ``missed``. Returns the restarts."""
    spec = work / "conf" / "tables" / "silver" / "orders.yaml"
    loaded = yaml.safe_load(spec.read_text())
    holds = [c for c in loaded.get("checks", []) if c.get("action") == "hold"]
    if len(holds) != 1 or not (work / "conf" / "tables" / "silver" / "stores.yaml").exists():
        raise SystemExit(f"--hold needs silver.stores and one check of silver.orders that "
                         f"holds rows for it, found {holds} in {spec}")
    holds[0]["max_hold"] = f"{HOLD_FOR} seconds"
    spec.write_text(yaml.safe_dump(loaded, sort_keys=False))
    roots = [clean.root, chaos.root]
    queue, restarts, round_ = list(steps), 0, 0
    while queue and round_ < 3 * len(steps):
        orders, store, folder = held_orders(feed, work, round_)
        deliver(orders, folder, roots)
        held_at = {}
        for lake in (clean, chaos):  # the rows held
            run_through(work, lake)
            held_at[lake.name] = time.monotonic()
        restarts += 1
        deliver([store], folder, roots)
        for lake in (clean, chaos):
            time.sleep(max(held_at[lake.name] + HOLD_FOR + 2 - time.monotonic(), 0.0))
            if lake is clean:  # the release, once
                duration = run_through(work, clean)
                ready, expired = released(clean.last_log) if clean.last_log else (0, 0)
                if not (ready and expired):
                    raise SystemExit(f"round {round_}: the clean root released {ready} rows "
                                     f"and expired {expired}, expected some of each: "
                                     f"{clean.last_log}")
                print(f"hold round {round_}: clean {duration:.1f} s ({ready} rows released, "
                      f"{expired} expired), {len(queue)} interruptions left", flush=True)
        settled = False
        while queue:
            step = queue[0]
            step.delivery = round_
            interrupt(work, chaos, step, duration)
            restarts += 1
            if step.outcome == "missed":  # released: the next round
                print(f"  {step.phase}: the run ended before the phase", flush=True)
                step.outcome, step.at_s, step.after = "planned", None, ""
                settled = True
                break
            done.append(queue.pop(0))
            print(f"  {step.signal} in {step.phase} (round {round_}) at {step.at_s} s, after "
                  f"{step.after or '(no event yet)'}: {step.outcome}", flush=True)
        if not settled:
            run_through(work, chaos)
            restarts += 1
        round_ += 1
    for step in queue:
        step.outcome = "missed"
    return restarts


# ---------------------------------------------------------------------------------- backfill
ORDER_ID = re.compile(r'("order_id"\s*:\s*")')


def make_history(feed: Path, hist: Path) -> list[Path]:
    """A historical folder of orders beside the feed's: each order file of the feed again
    under ``h-<name>`` with new order ids (``h`` before each), a day apart, plus two of the
    feed's files as they are, under their names (the landing feed ingested them: a backfill
    leaves them out). Returns the ``h-`` files."""
    hist.mkdir(parents=True, exist_ok=True)
    orders = sorted((feed / "landing" / "orders").glob("*.json"))
    made = []
    start = time.time() - 400 * 86_400
    for i, path in enumerate(orders):
        target = hist / f"h-{path.name}"
        target.write_text(ORDER_ID.sub(r"\1h", path.read_text()))
        os.utime(target, (start + i * 86_400, start + i * 86_400))
        made.append(target)
    for path in orders[:2]:
        shutil.copy2(path, hist / path.name)
    return made


def folder_state(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def backfill_under_kills(work: Path, clean: Lake, chaos: Lake, feed: Path,
                         steps: list[Interruption], done: list[Interruption]
                         ) -> tuple[int, list[str]]:
    """A historical folder backfilled into bronze.orders: the clean root once, the chaos root
    interrupted at each of ``steps`` in the backfill (each restart a backfill), then run to
    its end; then, for each ``backfill-landing`` step, two of the folder's files landed in
    both roots (the same names and bytes), the clean root run, the chaos root's run
    interrupted as it settles them. A last run settles the chaos root. Returns the restarts
    and what is wrong with the folder (it must be untouched)."""
    hist = work / "history"
    copies = make_history(feed, hist)
    before = folder_state(hist)
    backfill = ("backfill", "orders", "--from", str(hist), "--max-files", "5")
    duration = run_through(work, clean, command=backfill)
    run_through(work, clean)
    print(f"backfill of {len(before)} files: clean {duration:.1f} s, {len(steps)} "
          f"interruptions", flush=True)
    restarts = 0
    ordered = [s for s in steps if s.phase != "backfill-landing"] + \
        [s for s in steps if s.phase == "backfill-landing"]
    finished = False
    for step in ordered:
        landing = step.phase == "backfill-landing"
        if landing and not finished:
            run_through(work, chaos, command=backfill)
            run_through(work, chaos)
            restarts += 2
            finished = True
        if landing:
            sent, copies = copies[:2], copies[2:]
            deliver(sent, hist, [clean.root / "landing" / "orders",
                                 chaos.root / "landing" / "orders"])
            run_through(work, clean)
        step.delivery = 0
        interrupt(work, chaos, step, duration, RUN_ALL if landing else backfill)
        restarts += 1
        done.append(step)
        print(f"  {step.signal} in {step.phase} at {step.at_s} s, after "
              f"{step.after or '(no event yet)'}: {step.outcome}", flush=True)
    if not finished:
        run_through(work, chaos, command=backfill)
        restarts += 1
    run_through(work, chaos)
    wrong = [] if folder_state(hist) == before else ["the historical folder changed"]
    for line in wrong:
        print(f"  backfill: {line}", flush=True)
    return restarts + 1, wrong


def journal_mismatches(root: Path) -> list[str]:
    """What the chaos root's journal says wrongly after the last run: an operation still
    open, or one closed that is not done."""
    wrong = []
    if (root / "_refresh" / "journal").exists():
        wrong.append("an operation is still open")
    for op in sorted((root / "_refresh" / "closed").glob("*")):
        records = sorted(op.glob("*.json"))
        last = json.loads(records[-1].read_text()) if records else {}
        if last.get("state") != "done":
            wrong.append(f"{op.name} closed {last.get('state')}")
    for line in wrong:
        print(f"  journal: {line}", flush=True)
    return wrong


# ---------------------------------------------------------------------------------- checks
def files_under(folder: Path, names: set[str]) -> list[str]:
    """The feed's files under ``folder`` (not the archive's own manifests), a file sent again
    under the name it was given (``x.delivery-<time>Z.json``)."""
    return sorted(p.name for p in folder.rglob("*")
                  if p.is_file() and DELIVERY.sub("", p.name) in names)


def compare(spark: Any, clean: Path, chaos: Path, names: set[str]
            ) -> tuple[list[str], int, int]:
    """Mismatched tables and folders, and bronze orders rows lost and duplicated: per order
    id, fewer or more rows than the clean run has (the feed repeats some on purpose)."""
    from chispa import assert_df_equality
    from pyspark.sql import functions as F

    mismatched = []
    tables = sorted(t for p in (clean / "tables").rglob("_delta_log")
                    if (t := p.parent.relative_to(clean / "tables")).parts[0] != "ops")
    for table in tables:
        a = spark.read.format("delta").load(str(clean / "tables" / table))
        try:
            b = spark.read.format("delta").load(str(chaos / "tables" / table))
            keep = [c for c in a.columns if c not in VOLATILE
                    and not (table.parts[0] == "bronze" and c in SPLIT)]
            if "_replay_id" in keep:  # (a replay's id is the version of its root's quarantine)
                a, b = (df.withColumn("_replay_id", F.col("_replay_id").isNotNull())
                        for df in (a, b))
            # the column comments name the lake's own schemas (gold_clean, gold_chaos)
            assert_df_equality(b.select(keep).orderBy(*keep), a.select(keep).orderBy(*keep),
                               ignore_nullable=True, ignore_metadata=True)
        except Exception as exc:  # any difference, or a table missing
            print(f"  mismatch in {table}: {' '.join(str(exc).split())[:400]}", flush=True)
            mismatched.append(str(table))

    def per_id(root: Path) -> Any:
        bronze = spark.read.format("delta").load(str(root / "tables" / "bronze" / "orders"))
        return bronze.groupBy("order_id").count()

    totals: dict[str, Any] = {}
    if (clean / "tables" / "bronze" / "orders").exists():  # (a run of some tables only)
        both = per_id(clean).withColumnRenamed("count", "want").join(
            per_id(chaos).withColumnRenamed("count", "have"), "order_id", "full_outer"
        ).fillna(0, ["want", "have"])
        totals = both.agg(
            F.sum(F.greatest(F.col("want") - F.col("have"), F.lit(0))).alias("lost"),
            F.sum(F.greatest(F.col("have") - F.col("want"), F.lit(0))).alias("dup")
        ).first().asDict()
    for folder in ("landing", "archive", "_quarantine"):
        want, have = files_under(clean / folder, names), files_under(chaos / folder, names)
        if want != have:
            print(f"  mismatch in {folder}/: {sorted(set(have) ^ set(want))[:10]}", flush=True)
            mismatched.append(folder)
    return mismatched, int(totals.get("lost") or 0), int(totals.get("dup") or 0)


def batch_membership(spark: Any, root: Path) -> list[str]:
    """Where a bronze feed's rows and its ledger disagree on the batches of the lake at
    ``root``: the rows of a file (good and quarantined) must carry one batch id, the one the
    file's ledger row gives, and every batch id in the ledger must be one some rows carry or a
    file without rows."""
    from pyspark.sql import functions as F

    wrong = []
    bronze = root / "tables" / "bronze"
    for ledger_folder in sorted(bronze.glob("*_files")):
        feed = ledger_folder.name.removesuffix("_files")
        pairs = None
        for name in (feed, f"{feed}_quarantine"):
            if not (bronze / name / "_delta_log").exists():
                continue
            rows = spark.read.format("delta").load(str(bronze / name))
            if {"_source_file", "_batch_id"} <= set(rows.columns):
                these = rows.select(F.col("_source_file").alias("path"),
                                    F.col("_batch_id").alias("batch_id"))
                pairs = these if pairs is None else pairs.unionByName(these)
        if pairs is None:
            continue
        pairs = pairs.distinct()
        ledger = spark.read.format("delta").load(str(ledger_folder)) \
            .where(F.col("batch_id").isNotNull()).select("path", "batch_id", "rows").distinct()
        split = pairs.groupBy("path").count().where("count > 1").count()
        unknown = pairs.join(ledger, ["path", "batch_id"], "left_anti").count()
        unread = ledger.where(F.col("rows") > 0).join(pairs, ["path", "batch_id"], "left_anti") \
            .count()
        for count, what in ((split, "files whose rows carry more than one batch id"),
                            (unknown, "files whose rows' batch id is not their ledger row's"),
                            (unread, "ledger rows with rows whose batch holds none of them")):
            if count:
                wrong.append(f"bronze/{feed}: {count} {what}")
    for line in wrong:
        print(f"  batches: {line}", flush=True)
    return wrong


def history_mismatches(spark: Any, root: Path) -> tuple[list[str], dict[str, int]]:
    """Where the run history of the lake at ``root`` does not hold exactly one row per
    committed batch of each query; and its rows per status."""
    from pyspark.sql import functions as F

    from framework.checkpoint import committed_batches, query_id

    runs = spark.read.format("delta").load(str(root / "tables" / "ops" / "runs"))
    statuses = {r["status"]: int(r["count"]) for r in runs.groupBy("status").count().collect()}
    kept = runs.where((F.col("status") != "failed") & F.col("batch_id").isNotNull())
    rows: dict[tuple[str, int], int] = {
        (r["query_id"], int(r["batch_id"])): int(r["count"])
        for r in kept.groupBy("query_id", "batch_id").count().collect()}
    wrong = [f"query {q} batch {b}: {n} rows" for (q, b), n in sorted(rows.items()) if n > 1]
    for commits in sorted((root / "_checkpoints").rglob("commits")):
        checkpoint = str(commits.parent)
        query = query_id(checkpoint)
        for batch in sorted(committed_batches(checkpoint)):
            if (query, batch) not in rows:
                wrong.append(f"{commits.parent.relative_to(root)} batch {batch}: no row")
    for line in wrong:
        print(f"  history: {line}", flush=True)
    return wrong, statuses


def summary_mismatches(spark: Any, clean: Lake, chaos: Lake) -> list[str]:
    """Where the summaries' counts do not add up (see the module's text)."""
    wrong = []
    rows_in: dict[str, int] = {}
    for lake in (clean, chaos):
        for run in lake.summaries:
            for t in run["tables"]:
                counts = t.get("counts") or {}
                if t["layer"] != "silver" or "rows_in" not in counts:
                    continue  # not silver, or it did not finish
                parts = sum(counts.get(k, 0) for k in (
                    "rows_out", "duplicates_dropped", "late_rows_dropped", "dropped_rows",
                    "quarantined_rows", "held_rows"))
                if counts["rows_in"] != parts:
                    wrong.append(f"{lake.name} run {run['run_id']}: {t['table']} rows in "
                                 f"{counts['rows_in']} != {parts}")
                if lake is clean:
                    name = t["table"].rsplit(".", 1)[-1]
                    rows_in[name] = rows_in.get(name, 0) + counts["rows_in"]
    for name, n in sorted(rows_in.items()):
        bronze = spark.read.format("delta").load(str(clean.root / "tables" / "bronze" / name))
        if bronze.count() != n:
            wrong.append(f"clean: silver {name} read {n} rows, bronze holds {bronze.count()}")
    for line in wrong:
        print(f"  summary: {line}", flush=True)
    return wrong


# ---------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Runs the harness (``argv`` as on the command line); the result printed last."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--terms", type=int, default=2, help="SIGTERMs besides the kills")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--orders", type=int, default=3000)
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--deliveries", type=int, default=3)
    parser.add_argument("--faults", type=float, default=0.0,
                        help="fraction of landing files' renames and deletes refused")
    parser.add_argument("--phases", help="kill in these phases, in this order, instead "
                        "(comma-separated; to replay a finding)")
    parser.add_argument("--tables", help="only these tables (names, comma-separated)")
    parser.add_argument("--refresh", metavar="TABLE",
                        help="after the deliveries, change silver.orders' amount expression "
                        "and refresh TABLE (and downstream): the clean root once, the chaos "
                        "root killed --kills times in the refresh's phases, each restart a "
                        "refresh or a run in turn")
    parser.add_argument("--since-half", action="store_true",
                        help="with --refresh bronze.<table>: refresh only the files delivered "
                        "in the later half of the feed's times (--since)")
    parser.add_argument("--backfill", action="store_true",
                        help="after the deliveries, backfill a historical folder of orders "
                        "into bronze.orders: the clean root once, the chaos root killed "
                        "--kills times in the backfill and in the runs that settle landing "
                        "copies of its files")
    parser.add_argument("--replay", action="store_true",
                        help="after the deliveries, rounds of: correct silver.orders' rule "
                        "positive_quantity and replay the rows it quarantined (the clean root "
                        "once, the chaos root interrupted in the replay's steps until nothing is "
                        "left), then land orders the strict rule quarantines again")
    parser.add_argument("--hold", action="store_true",
                        help="after the deliveries, rounds of: orders of two stores silver."
                        "stores lacks held, one store landed, the release (the clean root once, "
                        "the chaos root interrupted in it until nothing is left to release)")
    parser.add_argument("--no-later", action="store_true",
                        help="leave out the demo's later delivery (the offline till's file, "
                        "the new store's row): silver.orders keeps holding that store's orders")
    parser.add_argument("--no-reserve", action="store_true",
                        help="no reserve slice (every phase planned will open)")
    parser.add_argument("--work", help="work folder (default: a new temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    if "SPARK_SUBMIT_OPTS" not in os.environ:  # (see the module's text)
        from tests.jvm_classes import JAVA_FOR_TESTS, sharing_options

        os.environ["SPARK_SUBMIT_OPTS"] = sharing_options(JAVA_FOR_TESTS)
    rng = random.Random(args.seed)
    began = time.perf_counter()

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix=f"chaos-{args.seed}-"))
    work.mkdir(parents=True, exist_ok=True)
    clean, chaos = Lake("clean", work / "clean"), Lake("chaos", work / "chaos")
    feed = work / "feed"
    write_tables(work, set(args.tables.split(",")) if args.tables else None)
    for lake in (clean, chaos, Lake("feed", feed)):
        write_env(work, lake)
    from examples.retail.demo import LATER
    from framework.cli import main as medallion

    if medallion(["demo", "--generate-only", "--orders", str(args.orders), "--files",
                  str(args.files), "--conf", str(work / "conf"), "--env", "feed",
                  "--log-level", "error"]) != 0:
        sys.exit("the feed could not be generated")
    # RESERVE slices more than asked, for the interruptions a delivery could not take (a
    # phase that opens once per delivery, or a run that ended before its phase); delivered
    # together, with no interruption, once every interruption has happened
    reserve = 0 if args.no_reserve else RESERVE
    slices = deliveries(feed / "landing", args.deliveries + reserve)
    for folder in (p for p in (feed / "landing").rglob("*") if p.is_dir()):
        for root in (clean.root, chaos.root):  # as 'medallion init' makes them
            (root / folder.relative_to(feed)).mkdir(parents=True, exist_ok=True)
    plan = make_plan(rng, args.kills, args.terms,
                     set(args.tables.split(",")) if args.tables else None, bool(args.faults))
    refresh_plan: list[Interruption] = []
    if args.refresh or args.backfill or args.replay or args.hold:  # the deliveries in first
        op = "backfill" if args.backfill else "replay" if args.replay else \
            "hold" if args.hold else \
            "refresh-bronze" if args.refresh.startswith("bronze.") else "refresh"
        refresh_plan = op_interruptions(rng, op, args.kills, args.terms, args.phases,
                                        set(args.tables.split(",")) if args.tables else None)
        plan = []
    elif args.phases:
        plan = [Interruption(name, "KILL", rng.uniform(0.0, BY_NAME[name].within or 1.0))
                for name in args.phases.split(",")]
    fault_seed = args.seed * 1000
    pending: list[Interruption] = []
    done: list[Interruption] = []
    # The demo's later delivery (the offline till's file, the new store's row), last and on
    # its own: silver.orders releases then the orders it held for the store.
    final = [] if args.no_later else \
        sorted(p for p in (feed / LATER).rglob("*") if p.is_file())
    names = {p.name for p in (feed / "landing").rglob("*") if p.is_file()} | \
        {p.name for p in final}
    delivered: list[list[Path]] = []
    restarts = d = 0
    while slices or final:
        if not slices:
            files, final = final, []
            deliver(files, feed / LATER, [clean.root / "landing", chaos.root / "landing"])
        else:
            if pending or plan:
                files, slices = slices[0], slices[1:]
            else:  # nothing left to interrupt: the rest in one delivery
                files, slices = [f for part in slices for f in part], []
            deliver(files, feed, [clean.root, chaos.root])
        if d > 0:  # files sent again under names already ingested; dimensions changed
            deliver(sent_again([*delivered, files], feed, work / "again", d),
                    work / "again" / f"{d}", [clean.root, chaos.root])
            changes = dimension_changes(work, d)
            names |= {f.name for f in changes}
            deliver(changes, work / "dims" / f"{d}", [clean.root, chaos.root])
        extract = snapshot_changes(work, d)
        names |= {f.name for f in extract}
        deliver(extract, work / "dims" / f"{d}", [clean.root, chaos.root])
        delivered.append(files)
        duration = run_through(work, clean)
        left = max(args.deliveries - d, 1)  # in the reserve: all that is left
        share = math.ceil((len(plan) + len(pending)) / left)
        count = max(share - len(pending), 0)
        pending, plan = pending + plan[:count], plan[count:]
        now, later = schedule(pending, d + 1,
                              opened(clean.last_log) if clean.last_log else None, duration)
        print(f"delivery {d + 1}: {len(files)} files, clean run {duration:.1f} s, "
              f"{len(now)} interruptions planned ({len(later) + len(plan)} for later)",
              flush=True)
        while now:
            if args.faults:
                fault_seed += 1
                write_env(work, chaos, {"rate": str(args.faults), "seed": str(fault_seed)})
            step = interrupt(work, chaos, now[0], duration)
            step.delivery = d + 1
            restarts += 1
            if step.outcome == "missed":
                print(f"  {step.phase}: the run ended before the phase", flush=True)
                break  # the delivery is in; the phase waits for the next one
            now.pop(0)
            done.append(step)
            print(f"  {step.signal} in {step.phase} at {step.at_s} s, after "
                  f"{step.after or '(no event yet)'}: {step.outcome}", flush=True)
        pending = now + later
        if args.faults:  # the store repaired: the run must settle what was left
            write_env(work, chaos, {"rate": "0"})
        run_through(work, chaos)
        restarts += 1
        d += 1
    journal: list[str] = []
    if args.refresh:
        since = None
        if args.since_half:  # (the roots' files keep the feed's times)
            folder = feed / "landing" / args.refresh.partition(".")[2]
            times = sorted(p.stat().st_mtime for p in folder.iterdir() if p.is_file())
            since = datetime.fromtimestamp(times[len(times) // 2], UTC).isoformat()
        restarts += refresh_under_kills(work, clean, chaos, args.refresh, refresh_plan, done,
                                        since)
        journal = journal_mismatches(chaos.root)
    elif args.backfill:
        more, journal = backfill_under_kills(work, clean, chaos, feed, refresh_plan, done)
        restarts += more
    elif args.replay:
        restarts += replay_under_kills(work, feed, clean, chaos, refresh_plan, done)
    elif args.hold:
        restarts += hold_under_kills(work, feed, clean, chaos, refresh_plan, done)
    missed = pending + plan + [s for s in refresh_plan if s.outcome == "missed"]
    for step in missed:
        step.outcome = "missed"

    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()  # a caller's (the tests'), or one of its own
    if spark is None:
        from framework.config.model import Environment, Runtime
        from framework.session import get_spark

        spark = get_spark(Environment(name="compare", runtime=Runtime.LOCAL,
                                      root=str(work / "cmp"), master="local[2]",
                                      shuffle_partitions=2),
                          "chaos-compare", {"spark.ui.enabled": "false"})
        spark.sparkContext.setLogLevel("ERROR")
    mismatched, lost, duplicated = compare(spark, clean.root, chaos.root, names)
    mismatched += batch_membership(spark, chaos.root)
    summaries = summary_mismatches(spark, clean, chaos)
    history, statuses = history_mismatches(spark, chaos.root)
    refused = sorted({m for log in work.glob("chaos-*.log")
                      for m in FAULT.findall(log.read_text(errors="replace"))})
    # an interruption counts once sent; a kill never sent counts against the ratio
    kills = [s for s in done if s.signal == "KILL" and s.at_s is not None]
    terms = [s for s in done if s.signal == "TERM" and s.at_s is not None]
    unsent = len({id(s) for s in [*done, *missed] if s.signal == "KILL" and s.at_s is None})
    failed = [s for s in done if s.outcome == "failed"]
    ok = not (mismatched or lost or duplicated or summaries or failed or history or journal)
    if not ok:
        print(f"FAILED with seed {args.seed} (--faults {args.faults}); interruptions: "
              f"{[(s.phase, s.signal, s.at_s) for s in done]}; work folder {work}", flush=True)
    elif not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "seed": args.seed, "faults": args.faults, "kills": len(kills), "terms": len(terms),
        "terms_stopped_cleanly": sum(s.outcome == "stopped" for s in terms),
        "restarts": restarts, "operations_refused": len(refused), "lost": lost,
        "duplicated": duplicated,
        "mismatched_tables": mismatched, "summary_mismatches": summaries,
        "history_mismatches": history, "history_rows": statuses,
        "journal_mismatches": journal,
        "phases_hit": sorted({s.phase for s in done}, key=lambda name: ORDER[name]),
        "missed": [s.phase for s in missed], "interruptions": [s.brief() for s in done],
        "seconds": round(time.perf_counter() - began, 1),
        "kills_unsent": unsent,
        "ratio": (len(kills) if ok else 0) / (len(kills) + unsent) if kills else 0.0}
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
