"""Dynamic partition pruning through a gold mart: a fact joined to a filtered dimension, with
pruning on and off, in one run.

The fact (``--rows`` order lines, partitioned by ``store_id`` into ``--stores`` partitions) is a
gold Delta table, written directly in the layout its spec declares (what is measured is the
query, not building the fact); the stores dimension is a silver table in which one store in
ten is in region 'north'; the mart is the framework's view joining them (``kind: mart``). The
query filters the dimension (``WHERE region = 'north'``) and aggregates a month of the fact per
city and channel (counts, sums, an average, the last hour):

    python bench/gold_dpp.py [--rows 50000000] [--stores 100] [--repeat 3] [--files-per-partition 1]

Both settings run alternately after a warm-up of each, with a third run for reference: the
same query with the region's stores listed in its filter, pruned while Spark plans it (static
pruning, the least any pruning can read). Then the pruned query runs through the JDBC endpoint
(``medallion serve``'s Thrift server in this session's driver, Spark's beeline as the client,
one connection, the first answer a warm-up). Times are medians. The files read come from the
scan's SQL metrics (``framework.pruning.explain_pruning``). The last line is one JSON object
with the figures and the ratios: ``ratio`` = dynamically pruned / statically pruned time,
``files_ratio`` (files read of the fact's), ``time_ratio_unpruned`` (pruned / unpruned) and
``jdbc_ratio`` (through JDBC / in process).
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
from framework.pruning import explain_pruning
from framework.serve import driver_class_path
from framework.serve import start as start_server
from gold.mart import MartJob
from tests.kafka_broker import free_port

DPP = "spark.sql.optimizer.dynamicPartitionPruning.enabled"


def timed(spark: SparkSession, query: str, pruning: bool) -> float:
    spark.conf.set(DPP, str(pruning).lower())
    started = time.perf_counter()
    spark.sql(query).collect()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000_000)
    parser.add_argument("--stores", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--files-per-partition", type=int, default=1,
                        help="files in each partition (a fact built by micro-batches has many)")
    args = parser.parse_args()

    # The JDBC side: the Thrift server in this session's driver, whose JVM takes the
    # server's address from the environment and Delta's jars on its class path.
    port = free_port()
    os.environ["HIVE_SERVER2_THRIFT_PORT"] = str(port)
    os.environ["HIVE_SERVER2_THRIFT_BIND_HOST"] = "localhost"
    lake = BenchLakehouse("gold-dpp", shuffle_partitions=4, **driver_class_path())
    spark = lake.spark
    lake.write("tables/bronze/orders.yaml", {"source": {"path": "landing/orders",
                                                        "format": "json"}})
    lake.write("tables/bronze/stores.yaml", {"source": {"path": "landing/stores",
                                                        "format": "json"}})
    lake.write("tables/silver/orders.yaml", {"source": "orders"})
    lake.write("tables/silver/stores.yaml", {"source": "stores"})
    lake.write("tables/gold/store_orders.yaml", {
        "description": "Order lines per store and hour", "source": "orders",
        "event_time": "event_time", "watermark": "1 hour",
        "window": {"type": "tumbling", "duration": "1 hour"},
        "group_by": ["store_id", "order_id", "customer_id", "product_id", "channel", "status"],
        "aggregates": [{"name": "quantity", "expr": "sum(quantity)"},
                       {"name": "unit_price", "expr": "max(unit_price)"},
                       {"name": "discount", "expr": "sum(discount)"},
                       {"name": "amount", "expr": "sum(amount)"}],
        "output_mode": "update", "partition_by": ["store_id"]})
    lake.write("tables/gold/regional_orders.yaml", {
        "kind": "mart", "fact": "store_orders",
        "dimensions": [{"table": "stores", "on": "store_id", "columns": ["region", "city"]}]})
    project = lake.project()
    fact = project.table("store_orders", Layer.GOLD)
    stores = project.table("stores", Layer.SILVER)
    for schema in (fact.schema, stores.schema):
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")

    print(f"writing the fact: {args.rows:,} rows in {args.stores} partitions", flush=True)
    start = F.lit("2026-11-01 00:00:00").cast("timestamp")
    hour = F.make_interval(hours=(F.col("id") % 720).cast("int"))
    (spark.range(args.rows)
     .select(
         (start + hour).alias("window_start"),
         (start + hour + F.expr("INTERVAL 1 HOUR")).alias("window_end"),
         F.to_date(start + hour).alias("window_date"),
         F.format_string("s%03d", (F.col("id") % args.stores).cast("int")).alias("store_id"),
         F.concat(F.lit("o"), F.col("id").cast("string")).alias("order_id"),
         F.format_string("c%06d", ((F.col("id") * 31) % 50_000).cast("int")).alias("customer_id"),
         F.format_string("p%05d", ((F.col("id") * 17) % 5_000).cast("int")).alias("product_id"),
         F.element_at(F.array(F.lit("web"), F.lit("store"), F.lit("app")),
                      (F.col("id") % 3 + 1).cast("int")).alias("channel"),
         F.element_at(F.array(F.lit("paid"), F.lit("shipped"), F.lit("cancelled")),
                      (F.col("id") % 3 + 1).cast("int")).alias("status"),
         ((F.col("id") % 9) + 1).alias("quantity"),
         ((F.col("id") * 7919) % 10_000 / 100).cast("decimal(12,2)").alias("unit_price"),
         ((F.col("id") * 13) % 500 / 100).cast("decimal(12,2)").alias("discount"),
         (((F.col("id") % 9) + 1) * ((F.col("id") * 7919) % 10_000) / 100)
         .cast("decimal(14,2)").alias("amount"))
     .repartition(args.stores * args.files_per_partition, "store_id",
                  F.abs(F.hash("order_id")) % args.files_per_partition)
     .write.format("delta").partitionBy("store_id").option("path", fact.location)
     .saveAsTable(fact.full_name))
    (spark.range(args.stores)
     .select(F.format_string("s%03d", F.col("id").cast("int")).alias("store_id"),
             F.when(F.col("id") % 10 == 0, "north").otherwise("south").alias("region"),
             F.concat(F.lit("city"), (F.col("id") % 7).cast("string")).alias("city"))
     .coalesce(1).write.format("delta").option("path", stores.location)
     .saveAsTable(stores.full_name))
    mart = project.table("regional_orders", Layer.GOLD)
    result = MartJob(spark, mart, RunContext()).run()
    if result.status is not RunStatus.SUCCEEDED:
        raise SystemExit(f"the mart failed: {result.error}")

    # A month of order lines for the stores of one region, per city and channel: what an
    # analyst's dashboard asks. (Distinct counts would add a cost bound by the number of
    # distinct keys, pruned or not; this query's cost is the scan, which pruning cuts.)
    query = (f"SELECT city, channel, count(*) AS lines, sum(quantity) AS items, "
             f"sum(amount) AS revenue, sum(discount) AS discounts, "
             f"avg(unit_price) AS avg_price, count_if(status = 'shipped') AS shipped, "
             f"max(window_start) AS last_hour FROM {mart.full_name} "
             "WHERE region = 'north' AND status <> 'cancelled' GROUP BY city, channel")
    # The reference: the same query with the region's stores written out, which Spark prunes
    # while planning (static pruning). No pruning can read less; what the pruned query costs
    # beyond reading its partitions (planning, the join, aggregating the rows kept) it costs
    # too, and so bounds the time ratio whatever the pruning does.
    north = [r["store_id"] for r in spark.table(stores.full_name)
             .where("region = 'north'").select("store_id").collect()]
    static = query.replace("region = 'north'",
                           f"store_id IN ({', '.join(repr(s) for s in sorted(north))})")
    runs = {"pruned": (query, True), "unpruned": (query, False), "static": (static, False)}
    answers = {}
    for name, (q, pruning) in runs.items():  # warm-up, and the answers must agree
        spark.conf.set(DPP, str(pruning).lower())
        answers[name] = sorted(tuple(r) for r in spark.sql(q).collect())
    if any(a != answers["pruned"] for a in answers.values()):
        raise SystemExit("the pruned, unpruned and statically pruned answers differ")
    times: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(args.repeat):
        for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            times[name].append(timed(spark, runs[name][0], runs[name][1]))
        print(f"round {r}: " + ", ".join(f"{n} {t[-1]:.2f}s" for n, t in times.items()),
              flush=True)
    server = start_server(spark, "localhost", port, "NONE")
    jdbc = jdbc_seconds(server.url, query, args.repeat + 1)[1:]  # the first one warms up
    server.stop()
    print(f"through JDBC (warm): {', '.join(f'{t:.2f}s' for t in jdbc)}", flush=True)
    evidence = {}
    for name, (q, pruning) in runs.items():
        spark.conf.set(DPP, str(pruning).lower())
        evidence[name] = explain_pruning(spark, q)
        print(f"{name}:\n{evidence[name].render()}", flush=True)
    on, off, fixed = (evidence[n].scan("store_orders") for n in ("pruned", "unpruned", "static"))
    t_on, t_off = statistics.median(times["pruned"]), statistics.median(times["unpruned"])
    t_static = statistics.median(times["static"])
    t_jdbc = statistics.median(jdbc)
    spark.stop()
    shutil.rmtree(lake.work, ignore_errors=True)
    print(json.dumps({
        "benchmark": "gold_dpp",
        "rows": args.rows,
        "partitions": on.partitions_total,
        "files_total": on.files_total,
        "cores": os.cpu_count(),
        "dynamic_pruning_in_plan": evidence["pruned"].dynamic_pruning,
        "pruned": {"seconds": round(t_on, 3), "files_read": on.files_read,
                   "partitions_read": on.partitions_read},
        "unpruned": {"seconds": round(t_off, 3), "files_read": off.files_read,
                     "partitions_read": off.partitions_read},
        "static": {"seconds": round(t_static, 3), "files_read": fixed.files_read,
                   "partitions_read": fixed.partitions_read},
        "seconds_pruned": [round(t, 3) for t in times["pruned"]],
        "seconds_unpruned": [round(t, 3) for t in times["unpruned"]],
        "seconds_static": [round(t, 3) for t in times["static"]],
        "seconds_jdbc": [round(t, 3) for t in jdbc],
        "files_ratio": round(on.files_read / on.files_total, 3),
        "time_ratio_unpruned": round(t_on / t_off, 3),
        # The least time ratio pruning could reach on this query: static pruning's.
        "time_ratio_static": round(t_static / t_off, 3),
        "jdbc_ratio": round(t_jdbc / t_on, 3),
        # Dynamic pruning against static pruning, the floor of any pruning's time.
        "ratio": round(t_on / t_static, 3),
    }))


def jdbc_seconds(url: str, query: str, times: int) -> list[float]:
    """The query's seconds through the JDBC endpoint, run ``times`` times in one beeline
    session (one connection, as a BI tool keeps), as beeline reports them."""
    import re
    import subprocess

    import pyspark

    jars = str(Path(pyspark.__file__).parent / "jars" / "*")
    statements = f"SET {DPP}=true;\n" + f"{query};\n" * times
    done = subprocess.run(["java", "-cp", jars, "org.apache.hive.beeline.BeeLine", "-u", url,
                           "-n", "bench", "--outputformat=csv2", "-e", statements],
                          capture_output=True, text=True, timeout=3600)
    # beeline's "N rows selected (T seconds)", after the one of the SET
    found = [float(s) for s in re.findall(r"rows? selected \(([\d.]+) seconds\)",
                                           done.stderr)][1:]
    if done.returncode != 0 or len(found) != times:
        raise SystemExit(f"expected {times} timed answers through JDBC, found {found}: "
                         f"{done.stderr[-2000:]}")
    return found


if __name__ == "__main__":
    main()
