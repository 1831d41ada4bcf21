"""Silver dedup throughput and state size: the framework's silver job against a hand-written
query doing the same (``withWatermark`` + ``dropDuplicatesWithinWatermark``, Delta sink).

An upstream Delta table gets ``--batches`` commits of ``--rows`` rows each (one file per commit,
so a reader with maxFilesPerTrigger=1 sees one micro-batch per commit, a constant input rate).
Event time advances one minute per commit; a fixed share (``--dup-share``) of each commit
re-delivers keys of the previous commit. Both queries read it with availableNow, in one Spark
session, after a small warm-up of each, alternated: framework then hand-written in even rounds,
the other way round in odd ones (the second query of a pair is faster, whichever it is).

    python bench/silver_dedup.py [--batches 50] [--rows 20000] [--dup-share 0.1] [--rounds 2]
                                 [--rule]

With ``--rule`` the framework's table has an expectation (a warning that always holds), so each
micro-batch is written in ``foreachBatch`` (counted, appended in a tagged commit) instead of
through Delta's streaming sink: the cost a batch carries when silver checks its rows.

Prints the state rows per batch of both (they level off: keys leave the state once the
watermark passes them) and rows/s; the last line is one JSON object with "ratio" (framework /
hand-written rows per second).
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bench.common import BenchLakehouse
from framework.config.model import Layer
from framework.job import RunContext, RunStatus
from silver.job import SilverJob

DELAY = "5 minutes"


def build_upstream(spark: SparkSession, location: str, batches: int, rows: int,
                   dup_share: float) -> int:
    """``batches`` commits; returns the number of distinct keys."""
    dups = int(rows * dup_share)
    fresh = rows - dups
    for b in range(batches):
        new = spark.range(fresh).select(
            F.concat(F.lit(f"k{b}_"), F.col("id").cast("string")).alias("order_id"),
            (F.col("id") % 1000).cast("string").alias("customer_id"),
            (F.col("id") % 9 + 1).cast("int").alias("quantity"),
            (F.lit("2026-11-01 00:00:00").cast("timestamp")
             + F.make_interval(mins=F.lit(b), secs=(F.col("id") % 50).cast("decimal(18,6)")))
            .alias("event_time"),
        )
        if b and dups:
            prev = b - 1
            again = spark.range(dups).select(
                F.concat(F.lit(f"k{prev}_"), F.col("id").cast("string")).alias("order_id"),
                (F.col("id") % 1000).cast("string").alias("customer_id"),
                (F.col("id") % 9 + 1).cast("int").alias("quantity"),
                (F.lit("2026-11-01 00:00:00").cast("timestamp")
                 + F.make_interval(mins=F.lit(prev),
                                   secs=(F.col("id") % 50).cast("decimal(18,6)")))
                .alias("event_time"),
            )
            new = new.unionByName(again)
        new.coalesce(1).write.format("delta").mode("append").save(location)
    return fresh * batches


def run_handwritten(spark: SparkSession, source: str, out: Path) -> tuple[float, list[int], int]:
    started = time.perf_counter()
    query = (
        spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)
        .withWatermark("event_time", DELAY)
        .dropDuplicatesWithinWatermark(["order_id"])
        .writeStream.format("delta")
        .option("checkpointLocation", str(out / "_checkpoint"))
        .trigger(availableNow=True)
        .start(str(out / "table"))
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    states = [sum(op["numRowsTotal"] for op in p["stateOperators"])
              for p in query.recentProgress if p["numInputRows"] or p["stateOperators"]]
    rows = spark.read.format("delta").load(str(out / "table")).count()
    return elapsed, states, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--dup-share", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rule", action="store_true",
                        help="give the framework's table an expectation (foreachBatch writes)")
    args = parser.parse_args()
    rules = [{"name": "has_key", "rule": "order_id IS NOT NULL", "action": "warn"}]

    lake = BenchLakehouse("silver", shuffle_partitions=2)
    spark = lake.spark
    for name in ("orders", "warm"):  # upstream tables, registered as bronze feeds
        lake.write(f"tables/bronze/{name}.yaml", {"source": {
            "path": f"landing/{name}", "format": "json",
            "schema": "order_id STRING, customer_id STRING, quantity INT, event_time TIMESTAMP"}})
    project = lake.project()
    upstream = project.table("orders", Layer.BRONZE).location
    warm = project.table("warm", Layer.BRONZE).location
    print(f"building the upstream table: {args.batches} commits of {args.rows} rows", flush=True)
    distinct = build_upstream(spark, upstream, args.batches, args.rows, args.dup_share)
    build_upstream(spark, warm, 3, 1000, args.dup_share)
    total = spark.read.format("delta").load(upstream).count()

    def framework_round(tag: str, source_table: str) -> tuple[float, list[int], int]:
        lake.write(f"tables/silver/orders_{tag}.yaml", {
            "source": {"table": source_table, "max_files_per_trigger": 1},
            "event_time": "event_time", "dedup": {"keys": ["order_id"], "delay": DELAY},
            **({"expectations": rules} if args.rule else {})})
        table = lake.project().table(f"orders_{tag}", Layer.SILVER)
        job = SilverJob(spark, table, RunContext())
        started = time.perf_counter()
        summary = job.run()
        elapsed = time.perf_counter() - started
        if summary.status is not RunStatus.SUCCEEDED:
            raise SystemExit(f"framework run failed: {summary.error}")
        states = [job.state_rows_by_batch[b] for b in sorted(job.state_rows_by_batch)]
        (lake.conf / "tables" / "silver" / f"orders_{tag}.yaml").unlink()
        return elapsed, states, summary.rows_out

    framework_round("warmup", "warm")
    run_handwritten(spark, warm, lake.work / "hand-warmup")

    fw_times: list[float] = []
    hw_times: list[float] = []
    fw_states: list[int] = []
    hw_states: list[int] = []
    for r in range(args.rounds):
        # Alternated (framework first in even rounds, second in odd ones): the query that runs
        # second in a pair runs measurably faster, whichever it is.
        order = ("fw", "hw") if r % 2 == 0 else ("hw", "fw")
        for who in order:
            if who == "fw":
                elapsed, fw_states, fw_rows = framework_round(f"r{r}", "orders")
                fw_times.append(elapsed)
            else:
                elapsed, hw_states, hw_rows = run_handwritten(spark, upstream,
                                                              lake.work / f"hand-r{r}")
                hw_times.append(elapsed)
        if not fw_rows == hw_rows == distinct:
            raise SystemExit(f"expected {distinct} rows from both, found framework {fw_rows}, "
                             f"hand-written {hw_rows}")
        print(f"round {r} ({' then '.join(order)}): framework {total / fw_times[-1]:,.0f} rows/s "
              f"({fw_times[-1]:.1f}s), hand-written {total / hw_times[-1]:,.0f} rows/s "
              f"({hw_times[-1]:.1f}s)", flush=True)
    print("state rows per batch, framework:   ", fw_states)
    print("state rows per batch, hand-written:", hw_states)
    fw = total / statistics.median(fw_times)
    hw = total / statistics.median(hw_times)
    half = len(fw_states) // 2
    spark.stop()
    shutil.rmtree(lake.work, ignore_errors=True)
    print(json.dumps({
        "benchmark": "silver_dedup",
        "batches": args.batches,
        "rows_per_batch": args.rows,
        "dup_share": args.dup_share,
        "rule": args.rule,
        "input_rows": total,
        "distinct_rows": distinct,
        "cores": os.cpu_count(),
        "framework_rows_per_s": round(fw),
        "handwritten_rows_per_s": round(hw),
        "framework_seconds": [round(t, 2) for t in fw_times],
        "handwritten_seconds": [round(t, 2) for t in hw_times],
        "state_rows_max_first_half": max(fw_states[:half], default=0),
        "state_rows_max_second_half": max(fw_states[half:], default=0),
        "state_rows_last": fw_states[-1] if fw_states else 0,
        "ratio": round(fw / hw, 3),
    }))


if __name__ == "__main__":
    main()
