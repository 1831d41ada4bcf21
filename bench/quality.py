"""The cost of a ``unique`` check per micro-batch: the framework's silver job with
``checks: [{unique: [order_id]}]`` against a hand-written query doing the same work, and
against the same job without the check.

A silver table (append mode) holds ``--table-rows`` orders before the run (order ids growing
with time, ``o0000000000``...; written by ``spark.range`` in commits of one file each, a
million rows at most and ten commits at least, sorted by the key, so Delta's file statistics
tell which files can hold a batch's keys). An upstream (bronze-like) Delta table gets
``--batches`` commits of ``--batch-rows`` rows each (one file per commit: one micro-batch per
commit with ``max_files_per_trigger: 1``): new order ids following the table's, about 1% of
ids already in the table (re-sent from the batch before, or from the table's newest rows for
the first batch) and about 0.5% of ids twice in the batch (the copy an hour later in event
time). Three sides, each on its own copy of the pre-filled table (the folder copied), read the
same upstream commits:

- ``framework unique``: :class:`~silver.job.SilverJob`, ``checks: [{unique: [order_id]}]``
  (quarantine): each batch reads the table at its current Delta version within the batch's
  range of keys, quarantines the rows whose key is there already or earlier in the batch
  (``<table>_quarantine``), appends the rest, and records one row in ``<ops>.quality``;
- ``hand unique``: a streaming query with ``foreachBatch`` doing the same by hand, no framework
  code in the batch: the table read at its current version within the batch's key range, a left
  join on the key and a ``row_number`` within the batch (by event time, then the row's JSON)
  mark the duplicates; the good rows and the quarantined ones (as JSON) appended exactly once
  (Delta's ``txnAppId``/``txnVersion``);
- ``framework no check``: the same job and spec without ``checks`` (Delta's streaming sink).

Each side first runs a warm-up (two batches of 1,000 rows over a table of 20,000) on tables of
its own. Seconds per batch are measured the same way for all sides: the median gap between the
starts of consecutive micro-batches (Spark's progress reports for the hand-written query, the
run history ``ops.runs`` for the framework's, as in ``bench/batch_overhead.py``), so each gap
holds everything one batch costs. Both unique sides must end with the same row count and the
same quarantined rows (order id and quantity), all of them the ones the data was built with.

    python bench/quality.py [--table-rows 10000000] [--batch-rows 100000] [--batches 5]

It prints the framework's per-step medians (milliseconds per batch, from ``ops.runs``'s
``durations_ms``). The last line is one JSON object: ``framework_unique_s``, ``hand_unique_s``,
``framework_no_check_s`` (seconds per batch), ``check_cost_s`` = framework unique - no check,
``ratio`` = hand-written / framework seconds per batch with the check (1 or more: the
framework costs nothing over the hand-written query), the rows each side quarantined.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from bench.batch_overhead import HandSide, framework_side
from bench.common import BenchLakehouse
from framework.config.model import Layer
from silver.job import SilverJob

SCHEMA = "order_id STRING, customer_id STRING, quantity INT, event_time TIMESTAMP"
COLUMNS = ["order_id", "customer_id", "quantity", "event_time"]
CHECK = "unique_order_id"
FILE_ROWS = 1_000_000  # the most rows of one pre-fill commit (one file)
MIN_FILES = 10  # the fewest pre-fill commits, whatever the table's size
AGAIN_SHARE = 0.01  # ids of a batch already in the table
TWICE_SHARE = 0.005  # ids twice in a batch
WARM_TABLE, WARM_ROWS, WARM_BATCHES = 20_000, 1_000, 2


def struct(ddl: str) -> StructType:
    schema = StructType.fromDDL(ddl)
    assert isinstance(schema, StructType)
    return schema


def orders(ids: DataFrame, *, seconds: Column | None = None, quantity: Column | None = None
           ) -> DataFrame:
    """Order rows for the ids of ``ids`` (its column ``id``): the event time ``seconds`` (the
    id's own by default) after 2026-11-01."""
    ident = F.col("id")
    seconds = ident if seconds is None else seconds
    return ids.select(
        F.format_string("o%010d", ident).alias("order_id"),
        F.format_string("c%05d", ident % 997).alias("customer_id"),
        ((ident % 9) + 1).cast("int").alias("quantity") if quantity is None
        else quantity.cast("int").alias("quantity"),
        F.timestamp_seconds(F.lit(1793491200) + seconds).alias("event_time"))


def prefill(spark: SparkSession, location: str, rows: int) -> int:
    """The table at ``location``: ``rows`` orders in commits of one file each, sorted by key;
    returns the number of commits."""
    DeltaTable.createIfNotExists(spark).location(location) \
        .addColumns(struct(SCHEMA)).execute()
    step = min(FILE_ROWS, -(-rows // MIN_FILES))
    for start in range(0, rows, step):
        orders(spark.range(start, min(rows, start + step), numPartitions=1)) \
            .write.format("delta").mode("append").save(location)
    return len(range(0, rows, step))


def batch_sizes(rows: int) -> tuple[int, int, int]:
    """A batch's new ids, ids already in the table, and ids twice in it."""
    again, twice = int(rows * AGAIN_SHARE), int(rows * TWICE_SHARE)
    return rows - again - twice, again, twice


def build_upstream(spark: SparkSession, location: str, table_rows: int, batch_rows: int,
                   batches: int) -> list[tuple[str, int]]:
    """One commit (one file) per batch; returns the rows each side should quarantine, as
    (order id, quantity)."""
    new, again, twice = batch_sizes(batch_rows)
    if 3 * again > new or 2 * twice > new or batch_rows > table_rows:
        raise SystemExit(f"expected --batch-rows ({batch_rows}) at most --table-rows "
                         f"({table_rows}) and at least 100")
    expected: list[tuple[str, int]] = []
    for b in range(batches):
        start = table_rows + b * batch_rows  # the batch's first new id
        now = F.lit(start + new)  # the batch's newest event time (seconds)
        fresh = orders(spark.range(start, start + new, numPartitions=1))
        # ids of the batch before (of the pre-filled table's newest, for the first), sent again
        resent = orders(spark.range(again, numPartitions=1)
                        .select((F.lit(start - batch_rows) + F.col("id") * 3).alias("id")),
                        seconds=now, quantity=F.lit(20))
        # ids of this batch, the copy an hour later: the first is kept
        copies = orders(spark.range(twice, numPartitions=1)
                        .select((F.lit(start) + F.col("id") * 2).alias("id")),
                        seconds=F.col("id") + 3600, quantity=F.lit(10))
        fresh.unionByName(resent).unionByName(copies).coalesce(1) \
            .write.format("delta").mode("append").save(location)
        expected += [(f"o{start - batch_rows + 3 * i:010d}", 20) for i in range(again)]
        expected += [(f"o{start + 2 * i:010d}", 10) for i in range(twice)]
    return sorted(expected)


def current_version(spark: SparkSession, location: str) -> int:
    row = DeltaTable.forPath(spark, location).history(1).select("version").first()
    assert row is not None
    return int(row["version"])


def hand_unique(spark: SparkSession, side: HandSide, upstream: str
                ) -> tuple[float, list[float]]:
    """The check by hand: the table's keys in the batch's range at its current version, a left
    join and a row number within the batch; good and quarantined rows appended exactly once."""
    quarantine = str(side.out / "quarantine")
    DeltaTable.createIfNotExists(spark).location(quarantine).addColumns(struct(
        "_row STRING, _failed_rules ARRAY<STRING>, _batch_id BIGINT, _quarantined_at TIMESTAMP"
    )).execute()
    stream = spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(upstream) \
        .select(*COLUMNS)

    def append(batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            low, high = batch.agg(F.min("order_id"), F.max("order_id")).first() or (None, None)
            version = current_version(spark, side.table)
            existing = (spark.read.format("delta").option("versionAsOf", version)
                        .load(side.table)
                        .where(F.col("order_id").between(F.lit(low), F.lit(high)))
                        .select("order_id").distinct().withColumn("_seen", F.lit(True)))
            first = Window.partitionBy("order_id").orderBy(
                F.col("event_time").asc_nulls_last(), F.to_json(F.struct(*COLUMNS)))
            marked = (batch.withColumn("_rank", F.row_number().over(first))
                      .join(existing, on="order_id", how="left")
                      .withColumn("_dup", F.col("order_id").isNotNull()
                                  & ((F.col("_rank") > 1) | F.col("_seen").isNotNull()))
                      .select(*COLUMNS, "_dup").persist())
            try:
                duplicates = marked.where("_dup").count()
                (marked.where(~F.col("_dup")).select(*COLUMNS).write.format("delta")
                 .mode("append").option("txnAppId", "hand-unique")
                 .option("txnVersion", batch_id).save(side.table))
                if duplicates:
                    (marked.where("_dup").select(
                        F.to_json(F.struct(*COLUMNS)).alias("_row"),
                        F.array(F.lit(CHECK)).alias("_failed_rules"),
                        F.lit(batch_id).cast("long").alias("_batch_id"),
                        F.current_timestamp().alias("_quarantined_at"))
                     .write.format("delta").mode("append")
                     .option("txnAppId", "hand-unique-quarantine")
                     .option("txnVersion", batch_id).save(quarantine))
            finally:
                marked.unpersist()
        finally:
            batch.unpersist()

    return side.run(stream, append)


def quarantined(spark: SparkSession, location: str) -> list[tuple[str, int]]:
    rows = spark.read.format("delta").load(location).select(
        F.get_json_object("_row", "$.order_id"),
        F.get_json_object("_row", "$.quantity").cast("int"), "_failed_rules").collect()
    if any(list(r[2]) != [CHECK] for r in rows):
        raise SystemExit(f"expected every quarantined row to name {CHECK}, found "
                         f"{sorted({tuple(r[2]) for r in rows})}")
    return sorted((r[0], r[1]) for r in rows)


def local(location: str) -> str:
    return location.removeprefix("file:")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table-rows", type=int, default=10_000_000)
    parser.add_argument("--batch-rows", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=5)
    args = parser.parse_args()
    if args.batches < 2:
        raise SystemExit(f"expected --batches of 2 or more (a gap between batches' starts), "
                         f"found {args.batches}")

    lake = BenchLakehouse("quality", shuffle_partitions=2)
    spark = lake.spark
    for name in ("orders", "warm"):  # the upstream tables, registered as bronze feeds
        lake.write(f"tables/bronze/{name}.yaml", {"source": {
            "path": f"landing/{name}", "format": "json", "schema": SCHEMA}})
    for tag, source in (("", "orders"), ("_warm", "warm")):
        base = {"source": {"table": source, "max_files_per_trigger": 1},
                "event_time": "event_time"}
        lake.write(f"tables/silver/unique{tag}.yaml",
                   {**base, "checks": [{"unique": ["order_id"], "action": "quarantine"}]})
        lake.write(f"tables/silver/plain{tag}.yaml", base)
    project = lake.project()

    runs: dict[str, dict[str, Any]] = {}
    quarantine_counts: dict[str, int] = {}
    table_counts: dict[str, int] = {}
    for tag, source, table_rows, batch_rows, batches in (
            ("_warm", "warm", WARM_TABLE, WARM_ROWS, WARM_BATCHES),
            ("", "orders", args.table_rows, args.batch_rows, args.batches)):
        seed = str(lake.work / f"seed{tag}")
        started = time.perf_counter()
        commits = prefill(spark, seed, table_rows)
        upstream = project.table(source, Layer.BRONZE).location
        expected = build_upstream(spark, upstream, table_rows, batch_rows, batches)
        if not tag:
            print(f"pre-filled {table_rows:,} rows in {commits} commits, {batches} upstream "
                  f"commits of {batch_rows:,} rows ({time.perf_counter() - started:.1f}s)",
                  flush=True)
        hand = HandSide(lake.work, f"hand{tag}")
        for location in (project.table(f"unique{tag}", Layer.SILVER).location,
                         project.table(f"plain{tag}", Layer.SILVER).location, hand.table):
            shutil.copytree(seed, local(location))
        sides = {"framework unique": f"unique{tag}", "hand unique": None,
                 "framework no check": f"plain{tag}"}
        line = []
        for name, silver in sides.items():
            steps: dict[str, list[int]] = {}
            if silver is None:
                elapsed, between = hand_unique(spark, hand, upstream)
            else:
                elapsed, between, steps, _ = framework_side(spark, lake, Layer.SILVER, silver,
                                                            SilverJob)
            if len(between) != batches - 1:
                raise SystemExit(f"expected {batches} batches of {name}, found "
                                 f"{len(between) + 1}")
            line.append(f"{name} {elapsed:.1f}s ({statistics.median(between):.2f}s/batch)")
            if not tag:
                runs[name] = {"elapsed": elapsed, "gaps": between, "steps": {
                    step: statistics.median(ms) for step, ms in sorted(steps.items())}}
        print(("warm-up: " if tag else "run: ") + ", ".join(line), flush=True)

        unique = project.table(f"unique{tag}", Layer.SILVER)
        rows = {"framework unique": spark.read.format("delta").load(unique.location).count(),
                "hand unique": spark.read.format("delta").load(hand.table).count(),
                "framework no check": spark.read.format("delta").load(
                    project.table(f"plain{tag}", Layer.SILVER).location).count()}
        kept = {"framework unique": quarantined(spark, unique.companion_location("quarantine")),
                "hand unique": quarantined(spark, str(hand.out / "quarantine"))}
        want = {"framework unique": table_rows + batches * batch_rows - len(expected),
                "hand unique": table_rows + batches * batch_rows - len(expected),
                "framework no check": table_rows + batches * batch_rows}
        print(f"  rows: {rows}; quarantined: framework {len(kept['framework unique'])}, "
              f"hand-written {len(kept['hand unique'])} (expected {len(expected)}), the first: "
              f"{kept['framework unique'][:3]}", flush=True)
        if rows != want:
            raise SystemExit(f"expected the rows {want}, found {rows}")
        for name, keys in kept.items():
            if keys != expected:
                missing = sorted(set(expected) - set(keys))[:5]
                extra = sorted(set(keys) - set(expected))[:5]
                raise SystemExit(f"expected {name} to quarantine {len(expected)} rows, found "
                                 f"{len(keys)} (missing {missing}, not expected {extra})")
        if not tag:
            quarantine_counts = {name: len(keys) for name, keys in kept.items()}
            table_counts = rows

    median = {name: round(statistics.median(r["gaps"]), 3) for name, r in runs.items()}
    for name, seconds in median.items():
        print(f"{name:20s} {seconds:.3f} s per batch")
    for name, r in runs.items():
        if r["steps"]:  # (the framework's, from ops.runs)
            print(f"{name} steps (median ms per batch): "
                  + ", ".join(f"{k} {v:.0f}" for k, v in r["steps"].items()))
    spark.stop()
    shutil.rmtree(lake.work, ignore_errors=True)
    print(json.dumps({
        "benchmark": "quality", "table_rows": args.table_rows, "batch_rows": args.batch_rows,
        "batches": args.batches, "measure": "median gap between batch starts",
        "framework_unique_s": median["framework unique"],
        "hand_unique_s": median["hand unique"],
        "framework_no_check_s": median["framework no check"],
        "check_cost_s": round(median["framework unique"] - median["framework no check"], 3),
        "ratio": round(median["hand unique"] / median["framework unique"], 3),
        "quarantined": quarantine_counts, "table_rows_after": table_counts,
        "seconds": {name: round(r["elapsed"], 1) for name, r in runs.items()},
        "framework_steps_ms": {name: r["steps"] for name, r in runs.items() if r["steps"]},
        "cores": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
