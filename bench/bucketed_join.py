"""Bucketed against non-bucketed tables: a join and an aggregation on the bucket key.

Two upstream tables of ``--rows`` rows each (default 5,000,000) are refined by the framework's
silver job into Hive-bucketed parquet tables (``bucket_by: [key]``, ``--buckets`` buckets). The
same rows as plain Delta tables are the non-bucketed side. Both sides run the same join (on the
key) and the same aggregation (group by the key), executed into Spark's no-op sink, alternated,
``--rounds`` times after a warm-up. Broadcast joins are off so the plain join is the sort-merge
join a large table would get.

    python bench/bucketed_join.py [--rows 5000000] [--buckets 16] [--rounds 3]

Prints times and the number of Exchange (shuffle) operators in each physical plan; the last
line is one JSON object with the figures and "ratio" (bucketed / non-bucketed time of the join).
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

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.common import BenchLakehouse
from framework.config.model import Layer
from framework.job import RunContext, RunStatus
from silver.job import SilverJob

SCHEMA = "key STRING, customer_id STRING, amount DOUBLE, event_time TIMESTAMP"


def upstream(spark: SparkSession, location: str, rows: int, salt: int) -> None:
    (spark.range(rows).select(
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
        (F.col("id") % 10_000).cast("string").alias("customer_id"),
        ((F.col("id") * salt) % 1000 / 10).alias("amount"),
        F.lit("2026-11-01 00:00:00").cast("timestamp").alias("event_time"),
    ).write.format("delta").mode("overwrite").save(location))


def exchanges(df: DataFrame) -> int:
    plan: str = df._jdf.queryExecution().executedPlan().toString()
    return plan.count("Exchange ")


def timed(df: DataFrame) -> float:
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--buckets", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    lake = BenchLakehouse("bucketed", shuffle_partitions=args.buckets)
    spark = lake.spark
    for name in ("left", "right"):
        lake.write(f"tables/bronze/{name}.yaml", {"source": {
            "path": f"landing/{name}", "format": "json", "schema": SCHEMA}})
        lake.write(f"tables/silver/{name}.yaml", {
            "description": f"{name} side, bucketed by key", "source": name,
            "format": "parquet", "bucket_by": ["key"], "buckets": args.buckets,
            "sort_by": ["key"]})
    project = lake.project()
    print(f"writing {args.rows:,} rows per side and refining them into bucketed tables",
          flush=True)
    for salt, name in enumerate(("left", "right"), start=3):
        upstream(spark, project.table(name, Layer.BRONZE).location, args.rows, salt)
        summary = SilverJob(spark, project.table(name, Layer.SILVER), RunContext()).run()
        if summary.status is not RunStatus.SUCCEEDED or summary.rows_out != args.rows:
            raise SystemExit(f"silver {name} failed: {summary.error or summary.rows_out}")

    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    bucketed = {n: spark.table(project.table(n, Layer.SILVER).full_name).drop("_batch_id")
                for n in ("left", "right")}
    plain = {n: spark.read.format("delta").load(project.table(n, Layer.BRONZE).location)
             for n in ("left", "right")}

    def join(t: dict[str, DataFrame]) -> DataFrame:
        return t["left"].alias("l").join(t["right"].alias("r"), "key").select(
            "key", F.col("l.amount").alias("a"), F.col("r.amount").alias("b"))

    def aggregate(t: dict[str, DataFrame]) -> DataFrame:
        return t["left"].groupBy("key").agg(F.sum("amount").alias("amount"))

    # Same answers first (checked on a digest of all rows), then the timings.
    for query in (join, aggregate):
        digest = [q.select(F.xxhash64(*q.columns).alias("h")).agg(
                      F.bit_xor("h").alias("x"), F.sum(F.col("h") % 1_000_003).alias("s"),
                      F.count("*").alias("n")).first()
                  for q in (query(bucketed), query(plain))]
        if digest[0] != digest[1]:
            raise SystemExit(f"{query.__name__}: bucketed and plain answers differ: {digest}")

    figures: dict[str, dict[str, object]] = {}
    for query in (join, aggregate):
        b_df, p_df = query(bucketed), query(plain)
        timed(b_df), timed(p_df)  # warm-up
        b_times, p_times = [], []
        for _ in range(args.rounds):
            b_times.append(timed(b_df))
            p_times.append(timed(p_df))
        figures[query.__name__] = {
            "bucketed_seconds": [round(t, 2) for t in b_times],
            "plain_seconds": [round(t, 2) for t in p_times],
            "bucketed_exchanges": exchanges(b_df),
            "plain_exchanges": exchanges(p_df),
            "ratio": round(statistics.median(b_times) / statistics.median(p_times), 3),
        }
        f = figures[query.__name__]
        print(f"{query.__name__}: bucketed {statistics.median(b_times):.2f}s "
              f"({f['bucketed_exchanges']} exchanges), non-bucketed "
              f"{statistics.median(p_times):.2f}s ({f['plain_exchanges']} exchanges)",
              flush=True)
    spark.stop()
    shutil.rmtree(lake.work, ignore_errors=True)
    print(json.dumps({
        "benchmark": "bucketed_join",
        "rows_per_side": args.rows,
        "buckets": args.buckets,
        "rounds": args.rounds,
        "cores": os.cpu_count(),
        **figures,
        "ratio": figures["join"]["ratio"],
    }))


if __name__ == "__main__":
    main()
