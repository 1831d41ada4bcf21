"""The cost of the table-level checks judged per micro-batch, ``unique`` and ``references``:
the framework's silver job with each check against a hand-written query doing the same work,
and against the same job without a check.

A silver table (append mode) holds ``--table-rows`` orders before the run (order ids growing
with time, ``o0000000000``...; written by ``spark.range`` in commits of one file each, a
million rows at most and ten commits at least, sorted by the key, so Delta's file statistics
tell which files can hold a batch's keys). A dimension, ``silver.customers``, holds
``--dim-rows`` customer ids (``c00000000``...; a tenth of ``--table-rows`` by default: a
million at full size). An upstream (bronze-like) Delta table gets ``--batches`` commits of
``--batch-rows`` rows each (one file per commit: one micro-batch per commit with
``max_files_per_trigger: 1``): new order ids following the table's, about 1% of ids already in
the table (re-sent from the batch before, or from the table's newest rows for the first batch)
and about 0.5% of ids twice in the batch (the copy an hour later in event time). Each order's
customer id is a key of the dimension spread over all of it, but for 3% of the orders (the
ids ending in 00, 01 or 02 of each hundred), whose customer id (``n...``) the dimension lacks.
Five sides, each on its own copy of the pre-filled table (the folder copied), read the same
upstream commits:

- ``framework unique``: :class:`~silver.job.SilverJob`, ``checks: [{unique: [order_id]}]``
  (quarantine): each batch reads the table at its current Delta version within the batch's
  range of keys, quarantines the rows whose key is there already or earlier in the batch
  (``<table>_quarantine``), appends the rest, and records one row in ``<ops>.quality``;
- ``hand unique``: a streaming query with ``foreachBatch`` doing the same by hand, no framework
  code in the batch: the table read at its current version within the batch's key range, a left
  join on the key and a ``row_number`` within the batch (by event time, then the row's JSON)
  mark the duplicates; the good rows, the quarantined ones (as JSON) and the batch's result
  of the check (one row in a table of results, as the framework's ``<ops>.quality``) appended
  exactly once (Delta's ``txnAppId``/``txnVersion``);
- ``framework no check``: the same job and spec without ``checks`` (Delta's streaming sink);
- ``framework references``: the same job with ``checks: [{references: {column: customer_id,
  table: customers}, action: quarantine}]``: each batch reads the dimension at its current
  version (noted in the batch's commit), marks the rows whose customer id it lacks by a left
  join on its distinct keys, quarantines them, appends the rest, and records one row in
  ``<ops>.quality``;
- ``hand references``: the same by hand in ``foreachBatch``: the dimension's distinct keys at
  its current version, a left join marking the rows without a match, the marked batch cached,
  the good rows, the missing ones (as JSON) and the batch's result of the check appended
  exactly once.

Each side first runs a warm-up (two batches of 1,000 rows over a table of 20,000 and a
dimension of 2,000) on tables of its own. Then ``--rounds`` measured rounds (2 by default), each
on fresh copies of the pre-filled table and tables of its own, over the same upstream commits:
in an even round each check's framework side runs before its hand-written one, in an odd round
after it (the second side of a pair finds the caches the first warmed). Seconds per batch are
measured the same way for all sides: the median gap, over every round, between the starts of
consecutive micro-batches (Spark's progress
reports for the hand-written queries, the run history ``ops.runs`` for the framework's, as in
``bench/batch_overhead.py``), so each gap holds everything one batch costs. Both sides of a
check must end with the same row count and the same quarantined rows (order id and quantity),
all of them the ones the data was built with.

    python bench/quality.py [--table-rows 10000000] [--batch-rows 100000] [--batches 5]
                            [--dim-rows 1000000] [--rounds 2]

It prints the framework's per-step medians (milliseconds per batch, from ``ops.runs``'s
``durations_ms``). The last line is one JSON object: seconds per batch of each side
(``framework_unique_s``, ``hand_unique_s``, ``framework_no_check_s``,
``framework_references_s``, ``hand_references_s``), each check's cost per batch over the job
without it (``check_cost_s``: unique, ``references_cost_s``), ``ratio`` = hand-written /
framework seconds per batch with the unique check (as before the references sides came: its
figures stay comparable), ``ratio_references`` the same for the references check, and
``ratio_min`` the lower of the two (1 or more: the framework costs nothing over the
hand-written query), the rows each side quarantined.
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
DIM_SCHEMA = "customer_id STRING, segment STRING"
CHECK = "unique_order_id"
REF_CHECK = "customer_id_in_customers"
FILE_ROWS = 1_000_000  # the most rows of one pre-fill commit (one file)
MIN_FILES = 10  # the fewest pre-fill commits, whatever the table's size
AGAIN_SHARE = 0.01  # ids of a batch already in the table
TWICE_SHARE = 0.005  # ids twice in a batch
MISSING_OF_100 = 3  # ids (of each hundred) whose customer the dimension lacks
SPREAD = 7919  # a prime: consecutive orders' customers spread over the whole dimension
WARM_TABLE, WARM_ROWS, WARM_BATCHES, WARM_DIM = 20_000, 1_000, 2, 2_000


def struct(ddl: str) -> StructType:
    schema = StructType.fromDDL(ddl)
    assert isinstance(schema, StructType)
    return schema


def missing(ident: int) -> bool:
    """Whether the order ``ident``'s customer is one the dimension lacks."""
    return ident % 100 < MISSING_OF_100


def orders(ids: DataFrame, customers: int, *, seconds: Column | None = None,
           quantity: Column | None = None) -> DataFrame:
    """Order rows for the ids of ``ids`` (its column ``id``): the event time ``seconds`` (the
    id's own by default) after 2026-11-01; the customer one of the dimension's ``customers``
    keys, or (:func:`missing`) one it lacks."""
    ident = F.col("id")
    seconds = ident if seconds is None else seconds
    customer = F.when(F.pmod(ident, F.lit(100)) < MISSING_OF_100,
                      F.format_string("n%010d", ident)) \
        .otherwise(F.format_string("c%08d", F.pmod(ident * SPREAD, F.lit(customers))))
    return ids.select(
        F.format_string("o%010d", ident).alias("order_id"),
        customer.alias("customer_id"),
        ((ident % 9) + 1).cast("int").alias("quantity") if quantity is None
        else quantity.cast("int").alias("quantity"),
        F.timestamp_seconds(F.lit(1793491200) + seconds).alias("event_time"))


def prefill(spark: SparkSession, location: str, rows: int, customers: int) -> int:
    """The table at ``location``: ``rows`` orders in commits of one file each, sorted by key;
    returns the number of commits."""
    DeltaTable.createIfNotExists(spark).location(location) \
        .addColumns(struct(SCHEMA)).execute()
    step = min(FILE_ROWS, -(-rows // MIN_FILES))
    for start in range(0, rows, step):
        orders(spark.range(start, min(rows, start + step), numPartitions=1), customers) \
            .write.format("delta").mode("append").save(location)
    return len(range(0, rows, step))


def dimension(spark: SparkSession, location: str, rows: int) -> None:
    """The dimension at ``location``: ``rows`` customers, one commit, a file per million."""
    spark.range(rows, numPartitions=max(1, -(-rows // FILE_ROWS))).select(
        F.format_string("c%08d", F.col("id")).alias("customer_id"),
        F.format_string("s%d", F.col("id") % 7).alias("segment"),
    ).write.format("delta").mode("overwrite").save(location)


def batch_sizes(rows: int) -> tuple[int, int, int]:
    """A batch's new ids, ids already in the table, and ids twice in it."""
    again, twice = int(rows * AGAIN_SHARE), int(rows * TWICE_SHARE)
    return rows - again - twice, again, twice


def build_upstream(spark: SparkSession, location: str, table_rows: int, batch_rows: int,
                   batches: int, customers: int
                   ) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """One commit (one file) per batch; returns the rows each side should quarantine, as
    (order id, quantity): for the unique check, and for the references check."""
    new, again, twice = batch_sizes(batch_rows)
    if 3 * again > new or 2 * twice > new or batch_rows > table_rows:
        raise SystemExit(f"expected --batch-rows ({batch_rows}) at most --table-rows "
                         f"({table_rows}) and at least 100")
    expected: list[tuple[str, int]] = []
    unknown: list[tuple[str, int]] = []
    for b in range(batches):
        start = table_rows + b * batch_rows  # the batch's first new id
        now = F.lit(start + new)  # the batch's newest event time (seconds)
        fresh = orders(spark.range(start, start + new, numPartitions=1), customers)
        # ids of the batch before (of the pre-filled table's newest, for the first), sent again
        resent = orders(spark.range(again, numPartitions=1)
                        .select((F.lit(start - batch_rows) + F.col("id") * 3).alias("id")),
                        customers, seconds=now, quantity=F.lit(20))
        # ids of this batch, the copy an hour later: the first is kept
        copies = orders(spark.range(twice, numPartitions=1)
                        .select((F.lit(start) + F.col("id") * 2).alias("id")),
                        customers, seconds=F.col("id") + 3600, quantity=F.lit(10))
        fresh.unionByName(resent).unionByName(copies).coalesce(1) \
            .write.format("delta").mode("append").save(location)
        resent_ids = [start - batch_rows + 3 * i for i in range(again)]
        copy_ids = [start + 2 * i for i in range(twice)]
        expected += [(f"o{i:010d}", 20) for i in resent_ids]
        expected += [(f"o{i:010d}", 10) for i in copy_ids]
        unknown += [(f"o{i:010d}", i % 9 + 1) for i in range(start, start + new) if missing(i)]
        unknown += [(f"o{i:010d}", 20) for i in resent_ids if missing(i)]
        unknown += [(f"o{i:010d}", 10) for i in copy_ids if missing(i)]
    return sorted(expected), sorted(unknown)


def current_version(spark: SparkSession, location: str) -> int:
    row = DeltaTable.forPath(spark, location).history(1).select("version").first()
    assert row is not None
    return int(row["version"])


def quarantine_table(spark: SparkSession, side: HandSide) -> str:
    quarantine = str(side.out / "quarantine")
    DeltaTable.createIfNotExists(spark).location(quarantine).addColumns(struct(
        "_row STRING, _failed_rules ARRAY<STRING>, _batch_id BIGINT, _quarantined_at TIMESTAMP"
    )).execute()
    return quarantine


def write_marked(marked: DataFrame, flag: str, check: str, side: HandSide, quarantine: str,
                 batch_id: int) -> None:
    """The rows of the cached ``marked`` batch: those without ``flag`` appended to the table,
    those with it to the quarantine (as JSON, naming ``check``), and the batch's result of the
    check (a row of its own table), each exactly once."""
    broken = marked.where(flag).count()
    (marked.where(~F.col(flag)).select(*COLUMNS).write.format("delta")
     .mode("append").option("txnAppId", f"hand-{check}")
     .option("txnVersion", batch_id).save(side.table))
    if broken:
        (marked.where(flag).select(
            F.to_json(F.struct(*COLUMNS)).alias("_row"),
            F.array(F.lit(check)).alias("_failed_rules"),
            F.lit(batch_id).cast("long").alias("_batch_id"),
            F.current_timestamp().alias("_quarantined_at"))
         .write.format("delta").mode("append")
         .option("txnAppId", f"hand-{check}-quarantine")
         .option("txnVersion", batch_id).save(quarantine))
    # the batch's result of the check, one row, as the framework records it in <ops>.quality
    # (literals over one generated row: no Python rows handed to the JVM)
    (marked.sparkSession.range(1, numPartitions=1).select(
        F.lit(side.table).alias("table"), F.lit(check).alias("check"),
        F.lit(batch_id).cast("long").alias("batch_id"), F.lit(broken == 0).alias("passed"),
        F.lit(broken).cast("long").alias("rows_affected"),
        F.current_timestamp().alias("recorded_at"))
     .write.format("delta").mode("append").option("txnAppId", f"hand-{check}-results")
     .option("txnVersion", batch_id).save(str(side.out / "quality")))


def upstream_stream(spark: SparkSession, upstream: str) -> DataFrame:
    return spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(upstream) \
        .select(*COLUMNS)


def hand_unique(spark: SparkSession, side: HandSide, upstream: str
                ) -> tuple[float, list[float]]:
    """The check by hand: the table's keys in the batch's range at its current version, a left
    join and a row number within the batch; good and quarantined rows appended exactly once."""
    quarantine = quarantine_table(spark, side)

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
                write_marked(marked, "_dup", CHECK, side, quarantine, batch_id)
            finally:
                marked.unpersist()
        finally:
            batch.unpersist()

    return side.run(upstream_stream(spark, upstream), append)


def hand_references(spark: SparkSession, side: HandSide, upstream: str, customers: str
                    ) -> tuple[float, list[float]]:
    """The check by hand: the dimension's distinct keys at its current version, a left join
    marking the rows whose customer has no match; good and missing rows appended exactly
    once."""
    quarantine = quarantine_table(spark, side)

    def append(batch: DataFrame, batch_id: int) -> None:
        version = current_version(spark, customers)
        known = (spark.read.format("delta").option("versionAsOf", version).load(customers)
                 .select("customer_id").distinct().withColumn("_known", F.lit(True)))
        marked = (batch.join(known, on="customer_id", how="left")
                  .withColumn("_missing", F.col("customer_id").isNotNull()
                              & F.col("_known").isNull())
                  .select(*COLUMNS, "_missing").persist())
        try:
            write_marked(marked, "_missing", REF_CHECK, side, quarantine, batch_id)
        finally:
            marked.unpersist()

    return side.run(upstream_stream(spark, upstream), append)


def quarantined(spark: SparkSession, location: str, check: str) -> list[tuple[str, int]]:
    rows = spark.read.format("delta").load(location).select(
        F.get_json_object("_row", "$.order_id"),
        F.get_json_object("_row", "$.quantity").cast("int"), "_failed_rules").collect()
    if any(list(r[2]) != [check] for r in rows):
        raise SystemExit(f"expected every quarantined row to name {check}, found "
                         f"{sorted({tuple(r[2]) for r in rows})}")
    return sorted((r[0], r[1]) for r in rows)


def local(location: str) -> str:
    return location.removeprefix("file:")


# The sides, in the order they run: (name, the check, the silver table of a framework side).
SIDES: tuple[tuple[str, str | None, str | None], ...] = (
    ("framework unique", CHECK, "unique"), ("hand unique", CHECK, None),
    ("framework no check", None, "plain"),
    ("framework references", REF_CHECK, "refs"), ("hand references", REF_CHECK, None))


def in_order(measured: int) -> tuple[tuple[str, str | None, str | None], ...]:
    """The sides in the order a round runs them: as :data:`SIDES` in an even round, each
    check's hand-written side before the framework's in an odd one (the side that runs second
    of a pair finds caches the first warmed)."""
    if measured % 2 == 0:
        return SIDES
    return (SIDES[1], SIDES[0], SIDES[2], SIDES[4], SIDES[3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table-rows", type=int, default=10_000_000)
    parser.add_argument("--batch-rows", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--dim-rows", type=int, default=None,
                        help="the dimension's keys (default: a tenth of --table-rows)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="measured rounds, each on tables of its own; a check's two sides "
                             "swap their order from one round to the next (default 2)")
    args = parser.parse_args()
    if args.rounds < 1:
        raise SystemExit(f"expected --rounds of 1 or more, found {args.rounds}")
    if args.batches < 2:
        raise SystemExit(f"expected --batches of 2 or more (a gap between batches' starts), "
                         f"found {args.batches}")
    dim_rows = args.dim_rows if args.dim_rows is not None else max(1, args.table_rows // 10)
    if dim_rows < 1:
        raise SystemExit(f"expected --dim-rows of 1 or more, found {dim_rows}")

    lake = BenchLakehouse("quality", shuffle_partitions=2)
    spark = lake.spark
    for name in ("orders", "warm"):  # the upstream tables, registered as bronze feeds
        lake.write(f"tables/bronze/{name}.yaml", {"source": {
            "path": f"landing/{name}", "format": "json", "schema": SCHEMA}})
    lake.write("tables/bronze/customers.yaml", {"source": {
        "path": "landing/customers", "format": "json", "schema": DIM_SCHEMA}})
    # (tag, upstream, the tag of its data and dimension, sizes, round): the warm-up, then the
    # measured rounds, each on tables of its own over the same upstream commits
    sizes = {"_warm": (WARM_TABLE, WARM_ROWS, WARM_BATCHES, WARM_DIM),
             "": (args.table_rows, args.batch_rows, args.batches, dim_rows)}
    plan = [("_warm", "warm", "_warm", None)] + [
        (f"_r{r}" if r else "", "orders", "", r) for r in range(args.rounds)]
    for tag, source, data, _ in plan:
        base = {"source": {"table": source, "max_files_per_trigger": 1},
                "event_time": "event_time"}
        if tag == data:
            lake.write(f"tables/silver/customers{tag}.yaml", {"source": {"table": "customers"}})
        lake.write(f"tables/silver/unique{tag}.yaml",
                   {**base, "checks": [{"unique": ["order_id"], "action": "quarantine"}]})
        lake.write(f"tables/silver/refs{tag}.yaml", {**base, "checks": [{
            "references": {"column": "customer_id", "table": f"customers{data}"},
            "action": "quarantine", "name": REF_CHECK}]})
        lake.write(f"tables/silver/plain{tag}.yaml", base)
    project = lake.project()

    runs: dict[str, dict[str, Any]] = {}
    quarantine_counts: dict[str, int] = {}
    table_counts: dict[str, int] = {}
    expected: dict[str, list[tuple[str, int]]] = {}
    for tag, source, data, measured in plan:
        table_rows, batch_rows, batches, customers = sizes[data]
        seed = str(lake.work / f"seed{data}")
        dim = project.table(f"customers{data}", Layer.SILVER).location
        if tag == data:  # the first round over this data: the table, dimension and upstream
            started = time.perf_counter()
            commits = prefill(spark, seed, table_rows, customers)
            dimension(spark, dim, customers)
            upstream = project.table(source, Layer.BRONZE).location
            expected = dict(zip((CHECK, REF_CHECK), build_upstream(
                spark, upstream, table_rows, batch_rows, batches, customers), strict=True))
            if measured is not None:
                print(f"pre-filled {table_rows:,} rows in {commits} commits, a dimension of "
                      f"{customers:,} keys, {batches} upstream commits of {batch_rows:,} rows "
                      f"({time.perf_counter() - started:.1f}s)", flush=True)
        upstream = project.table(source, Layer.BRONZE).location
        hands = {name: HandSide(lake.work, name.replace(" ", "_") + tag)
                 for name, _, silver in SIDES if silver is None}
        tables = {name: project.table(f"{silver}{tag}", Layer.SILVER).location
                  if silver is not None else hands[name].table for name, _, silver in SIDES}
        quarantines = {name: project.table(f"{silver}{tag}", Layer.SILVER)
                       .companion_location("quarantine")
                       if silver is not None else str(hands[name].out / "quarantine")
                       for name, check, silver in SIDES if check is not None}
        for location in tables.values():
            shutil.copytree(seed, local(location))
        line = []
        for name, check, silver in in_order(measured or 0):
            steps: dict[str, list[int]] = {}
            if silver is not None:
                elapsed, between, steps, _ = framework_side(spark, lake, Layer.SILVER,
                                                            f"{silver}{tag}", SilverJob)
            elif check == CHECK:
                elapsed, between = hand_unique(spark, hands[name], upstream)
            else:
                elapsed, between = hand_references(spark, hands[name], upstream, dim)
            if len(between) != batches - 1:
                raise SystemExit(f"expected {batches} batches of {name}, found "
                                 f"{len(between) + 1}")
            line.append(f"{name} {elapsed:.1f}s ({statistics.median(between):.2f}s/batch)")
            if measured is not None:
                run = runs.setdefault(name, {"elapsed": [], "gaps": [], "round_medians": [],
                                             "steps": {}})
                run["elapsed"].append(elapsed)
                run["gaps"] += between
                run["round_medians"].append(round(statistics.median(between), 3))
                for step, ms in steps.items():
                    run["steps"].setdefault(step, []).extend(ms)
        print(("warm-up: " if measured is None else f"round {measured}: ") + ", ".join(line),
              flush=True)

        rows = {name: spark.read.format("delta").load(location).count()
                for name, location in tables.items()}
        kept = {name: quarantined(spark, quarantines[name], check)
                for name, check, _ in SIDES if check is not None}
        total = table_rows + batches * batch_rows
        want = {name: total - (len(expected[check]) if check is not None else 0)
                for name, check, _ in SIDES}
        print(f"  rows: {rows}; quarantined: "
              + ", ".join(f"{name} {len(keys)}" for name, keys in kept.items())
              + f" (expected unique {len(expected[CHECK])}, references "
              f"{len(expected[REF_CHECK])}); the first: "
              f"{kept['framework unique'][:2]}, {kept['framework references'][:2]}", flush=True)
        if rows != want:
            raise SystemExit(f"expected the rows {want}, found {rows}")
        for name, check, _ in SIDES:
            if check is None:
                continue
            keys, wanted = kept[name], expected[check]
            if keys != wanted:
                absent = sorted(set(wanted) - set(keys))[:5]
                extra = sorted(set(keys) - set(wanted))[:5]
                raise SystemExit(f"expected {name} to quarantine {len(wanted)} rows, found "
                                 f"{len(keys)} (missing {absent}, not expected {extra})")
        if measured == 0:
            quarantine_counts = {name: len(keys) for name, keys in kept.items()}
            table_counts = rows

    median = {name: round(statistics.median(r["gaps"]), 3) for name, r in runs.items()}
    for name, seconds in median.items():
        print(f"{name:22s} {seconds:.3f} s per batch (each round's: "
              f"{', '.join(f'{m:.3f}' for m in runs[name]['round_medians'])})")
    steps_ms = {name: {step: statistics.median(ms) for step, ms in sorted(r["steps"].items())}
                for name, r in runs.items() if r["steps"]}  # (the framework's, from ops.runs)
    for name, steps in steps_ms.items():
        print(f"{name} steps (median ms per batch): "
              + ", ".join(f"{k} {v:.0f}" for k, v in steps.items()))
    spark.stop()
    shutil.rmtree(lake.work, ignore_errors=True)
    ratio = round(median["hand unique"] / median["framework unique"], 3)
    ratio_references = round(median["hand references"] / median["framework references"], 3)
    print(json.dumps({
        "benchmark": "quality", "table_rows": args.table_rows, "batch_rows": args.batch_rows,
        "batches": args.batches, "dim_rows": dim_rows, "rounds": args.rounds,
        "measure": "median gap between batch starts, over every round",
        "framework_unique_s": median["framework unique"],
        "hand_unique_s": median["hand unique"],
        "framework_no_check_s": median["framework no check"],
        "framework_references_s": median["framework references"],
        "hand_references_s": median["hand references"],
        "check_cost_s": round(median["framework unique"] - median["framework no check"], 3),
        "references_cost_s": round(median["framework references"]
                                   - median["framework no check"], 3),
        "ratio": ratio, "ratio_references": ratio_references,
        "ratio_min": min(ratio, ratio_references),
        "quarantined": quarantine_counts, "table_rows_after": table_counts,
        "round_medians_s": {name: r["round_medians"] for name, r in runs.items()},
        "seconds": {name: [round(e, 1) for e in r["elapsed"]] for name, r in runs.items()},
        "framework_steps_ms": steps_ms,
        "cores": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
