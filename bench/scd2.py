"""SCD type 2: the framework's silver ``mode: scd2`` against a hand-written MERGE doing the same
work, side by side in one Spark session.

An upstream Delta table gets ``--changes`` change events over ``--keys`` customers in
``--batches`` commits (one file each, so a reader with maxFilesPerTrigger=1 sees one
micro-batch per commit), in the order of their sequence: inserts, changes of the tracked
columns (``name``, ``segment``), changes of the untracked ``note`` alone, and deletes (``op =
'd'``). Both sides read it as a stream, one micro-batch per commit:

* the framework: a silver table with ``mode: scd2`` (keys ``id``, ``sequence_by: seq``,
  ``track_history_except: [note]``, ``deletes: "op = 'd'"``);
* hand-written: ``foreachBatch`` with one MERGE per batch, the textbook way for a stream in
  order: the batch's events of each key folded onto the key's last version in the table (a
  change of a tracked column opens a version, of the note alone updates it in place, a delete
  closes it), then ``MERGE ... ON id AND __start_at`` updates the versions that changed and
  inserts the new ones. It assumes events arrive in the order of their sequence: a late event
  would be folded at the wrong place. The framework keeps a change log and recomputes the keys
  a batch names, so that it does not.

The two tables must be equal (every version of every key). The rounds alternate which side
runs first. The last line is one JSON object with "ratio" = hand-written seconds / framework
seconds (median of the rounds).

    python bench/scd2.py [--changes 1000000] [--keys 100000] [--batches 10] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from bench.common import BenchLakehouse
from framework.config.model import Layer
from framework.job import RunContext, RunStatus
from silver.job import SilverJob

SCHEMA = "id BIGINT, name STRING, segment STRING, note STRING, seq BIGINT, op STRING"
COLUMNS = ["id", "name", "segment", "note", "seq", "__start_at", "__end_at", "__is_current",
           "__deleted"]


def build_upstream(spark: SparkSession, location: str, changes: int, keys: int,
                   batches: int) -> None:
    """``batches`` commits of the change stream, in sequence order."""
    per = changes // batches
    for b in range(batches):
        seq = F.col("id") + F.lit(b * per + 1)
        roll = F.abs(F.hash(seq, F.lit("roll"))) % 100
        df = spark.range(per).select(
            (F.abs(F.hash(seq)) % keys).cast("long").alias("id"),
            F.concat(F.lit("name"), (F.abs(F.hash(seq, F.lit("n"))) % 3).cast("string"))
            .alias("name"),
            F.element_at(F.array(*map(F.lit, ("retail", "smb", "enterprise"))),
                         (F.abs(F.hash(seq, F.lit("s"))) % 3 + 1).cast("int")).alias("segment"),
            F.concat(F.lit("n"), seq.cast("string")).alias("note"),
            seq.cast("long").alias("seq"),
            F.when(roll < 5, F.lit("d")).otherwise(F.lit("u")).alias("op"),
        )
        df.coalesce(1).write.format("delta").mode("append").save(location)


def hand_written_batch(target: str) -> Callable[[DataFrame, int], None]:
    """The hand-written SCD2 MERGE of one micro-batch (events in sequence order)."""

    def apply(batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        events = batch.dropDuplicates(["id", "seq"]).select(
            "id", "name", "segment", "note", "seq", (F.col("op") == "d").alias("_removal"),
            F.col("seq").alias("_start"))
        keys = events.select("id").distinct()
        table = spark.read.format("delta").load(target)
        # each key's last version, as the step it starts from (a deleted one: a removal)
        last = table.join(keys, "id", "left_semi").where(
            F.col("__is_current") | F.col("__deleted")).withColumn(
            "_rank", F.row_number().over(Window.partitionBy("id").orderBy(
                F.col("__start_at").desc()))).where("_rank = 1")
        open_steps = last.select("id", "name", "segment", "note", "seq",
                                 F.lit(False).alias("_removal"), F.col("__start_at")
                                 .alias("_start"))
        closed = last.where("__deleted").select(
            "id", *[F.lit(None).cast("string").alias(c) for c in ("name", "segment", "note")],
            F.col("__end_at").alias("seq"), F.lit(True).alias("_removal"),
            F.col("__end_at").alias("_start"))
        steps = events.unionByName(open_steps).unionByName(closed)
        order = Window.partitionBy("id").orderBy("seq")
        tracked = F.struct("name", "segment")
        previous = F.lag("_removal").over(order)
        opens = ~F.col("_removal") & (previous.isNull() | previous
                                      | ~F.lag(tracked).over(order).eqNullSafe(tracked))
        steps = steps.select(
            "*", F.sum(opens.cast("int")).over(order.rowsBetween(
                Window.unboundedPreceding, Window.currentRow)).alias("_version"),
            F.lead("seq").over(order).alias("_next"),
            F.lead("_removal").over(order).alias("_next_removal")).where(~F.col("_removal"))
        versions = steps.groupBy("id", "_version").agg(
            F.min("_start").alias("__start_at"),
            F.max_by(F.struct("name", "segment", "note", "seq", "_next", "_next_removal"),
                     F.col("seq")).alias("v"))
        source = versions.select(
            "id", "v.name", "v.segment", "v.note", "v.seq", "__start_at",
            F.col("v._next").alias("__end_at"), F.col("v._next").isNull().alias("__is_current"),
            F.coalesce("v._next_removal", F.lit(False)).alias("__deleted"))
        source.createOrReplaceTempView("_scd2_batch")
        spark.sql(f"MERGE INTO delta.`{target}` t USING _scd2_batch s "
                  "ON t.id = s.id AND t.__start_at = s.__start_at "
                  "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")

    return apply


def run_handwritten(spark: SparkSession, source: str, out: Path) -> float:
    target = str(out / "table")
    spark.sql(f"CREATE TABLE delta.`{target}` (id BIGINT, name STRING, segment STRING, "
              "note STRING, seq BIGINT, __start_at BIGINT, __end_at BIGINT, "
              "__is_current BOOLEAN, __deleted BOOLEAN) USING delta")
    started = time.perf_counter()
    query = (spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)
             .writeStream.foreachBatch(hand_written_batch(target))
             .option("checkpointLocation", str(out / "_checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()

    lake = BenchLakehouse("scd2", shuffle_partitions=4)
    spark = lake.spark
    lake.write("tables/bronze/customers.yaml", {"source": {
        "path": "landing/customers", "format": "json", "schema": SCHEMA}})
    upstream = lake.project().table("customers", Layer.BRONZE).location
    print(f"building the upstream table: {args.changes:,} changes over {args.keys:,} keys in "
          f"{args.batches} commits", flush=True)
    build_upstream(spark, upstream, args.changes, args.keys, args.batches)

    def framework_round(tag: str) -> tuple[float, str]:
        lake.write(f"tables/silver/customers_{tag}.yaml", {
            "source": {"table": "customers", "max_files_per_trigger": 1}, "mode": "scd2",
            "scd2": {"keys": ["id"], "sequence_by": "seq", "track_history_except": ["note"],
                     "deletes": "op = 'd'", "except_columns": ["op"]}})
        table = lake.project().table(f"customers_{tag}", Layer.SILVER)
        started = time.perf_counter()
        summary = SilverJob(spark, table, RunContext()).run()
        elapsed = time.perf_counter() - started
        if summary.status is not RunStatus.SUCCEEDED:
            raise SystemExit(f"framework run failed: {summary.error}")
        (lake.conf / "tables" / "silver" / f"customers_{tag}.yaml").unlink()
        return elapsed, table.location

    fw_times: list[float] = []
    hw_times: list[float] = []
    versions = 0
    for r in range(args.rounds):
        order = ("fw", "hw") if r % 2 == 0 else ("hw", "fw")
        for who in order:
            if who == "fw":
                elapsed, fw_location = framework_round(f"r{r}")
                fw_times.append(elapsed)
            else:
                out = lake.work / f"hand-r{r}"
                hw_times.append(run_handwritten(spark, upstream, out))
        fw = spark.read.format("delta").load(fw_location).select(*COLUMNS)
        hw = spark.read.format("delta").load(str(lake.work / f"hand-r{r}" / "table")) \
            .select(*COLUMNS)
        versions = fw.count()
        only_fw, only_hw = fw.exceptAll(hw).count(), hw.exceptAll(fw).count()
        if only_fw or only_hw or versions != hw.count():
            raise SystemExit(f"expected the same versions from both, found {only_fw} only in "
                             f"the framework's table and {only_hw} only in the hand-written")
        print(f"round {r} ({' then '.join(order)}): framework {fw_times[-1]:.1f}s, "
              f"hand-written {hw_times[-1]:.1f}s, {versions:,} versions", flush=True)
    fw_s, hw_s = statistics.median(fw_times), statistics.median(hw_times)
    spark.stop()
    shutil.rmtree(lake.work, ignore_errors=True)
    print(json.dumps({
        "benchmark": "scd2",
        "changes": args.changes,
        "keys": args.keys,
        "batches": args.batches,
        "versions": versions,
        "cores": os.cpu_count(),
        "framework_seconds": [round(t, 2) for t in fw_times],
        "handwritten_seconds": [round(t, 2) for t in hw_times],
        "ratio": round(hw_s / fw_s, 3),
    }))


if __name__ == "__main__":
    main()
