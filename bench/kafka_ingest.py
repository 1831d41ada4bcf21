"""Kafka ingest throughput: the framework's bronze job against a hand-written query, side by
side, on a real broker.

A single-node Kafka broker (deploy/kafka/broker.sh, KRaft) is started in a folder of its own and
a topic of 4 partitions receives the records once (default 1,000,000 JSON order events). Both
sides then read the whole topic from its earliest offsets with an availableNow trigger, in one
Spark session, after a warm-up of each, alternated (the order of the sides turns each round);
each round starts from a new checkpoint and a new table. The sides:

- ``framework``: the whole bronze job for ``source.format: kafka`` (values decoded and checked
  for UTF-8, parsed with a corrupt-record path, the rescued-keys column, the Kafka and
  ingestion columns, the quarantine split, an exactly-once tagged Delta append, offsets
  logged per batch);
- ``by hand``: ``readStream.format("kafka")`` → ``from_json`` with a corrupt-record column →
  the same rescued-keys expression and columns → an exactly-once Delta append in
  ``foreachBatch`` (Delta's ``txnAppId``/``txnVersion``), malformed rows left out.

    python bench/kafka_ingest.py [--records 1000000] [--partitions 4] [--rounds 3]

The last line is JSON: ``ratio`` = framework rows per second / hand-written rows per second
(medians), and both rates.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from bench.common import BenchLakehouse
from bronze.conform import Conformer
from bronze.reading import parse_json_lines
from bronze.spec import SchemaEvolution
from framework.job import RunContext, RunStatus
from framework.layers import job_class
from tests.kafka_broker import Broker, kafka_broker

SCHEMA = (
    "order_id STRING, customer_id STRING, store_id STRING, event_time TIMESTAMP, "
    "quantity INT, unit_price DECIMAL(10,2), status STRING"
)
TOPIC = "orders"


def produce(broker: Broker, records: int, partitions: int) -> None:
    statuses = ("new", "paid", "shipped", "cancelled")

    def rows():  # type: ignore[no-untyped-def]
        for n in range(records):
            value = json.dumps({
                "order_id": f"o{n:09d}", "customer_id": f"c{n % 50_000:06d}",
                "store_id": f"s{n % 300:04d}",
                "event_time": f"2026-11-{1 + n % 28:02d}T{n % 24:02d}:{n % 60:02d}:{n % 59:02d}Z",
                "quantity": 1 + n % 7, "unit_price": f"{(n % 10_000) / 100:.2f}",
                "status": statuses[n % 4]})
            yield n % partitions, f"o{n:09d}".encode(), value.encode()

    broker.create_topic(TOPIC, partitions)
    started = time.perf_counter()
    sent = broker.produce(TOPIC, rows())
    print(f"produced {sent} records on {partitions} partitions in "
          f"{time.perf_counter() - started:.1f}s", flush=True)


def run_framework(lake: BenchLakehouse, broker: Broker, name: str, records: int) -> float:
    lake.write(f"tables/bronze/{name}.yaml", {"source": {
        "format": "kafka", "bootstrap_servers": broker.bootstrap, "topics": [TOPIC],
        "schema": SCHEMA}})
    table = lake.project().table(name)
    started = time.perf_counter()
    summary = job_class(table)(lake.spark, table, RunContext()).run()
    elapsed = time.perf_counter() - started
    if summary.status is not RunStatus.SUCCEEDED or summary.rows_out != records:
        raise SystemExit(f"expected {records} bronze rows, found {summary.to_dict()}")
    return elapsed


def run_by_hand(lake: BenchLakehouse, broker: Broker, name: str, records: int) -> float:
    """The framework's work per record, by hand."""
    spark = lake.spark
    schema = StructType.fromDDL(SCHEMA)
    conformer = Conformer(schema, "_rescued_data", SchemaEvolution.RESCUE, {})
    out = lake.work / "by_hand" / name
    started = time.perf_counter()
    raw = (spark.readStream.format("kafka")
           .option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", TOPIC)
           .option("startingOffsets", "earliest").load())
    lines = raw.select(F.col("value").cast("string").alias("value"), "topic", "partition",
                       "offset", "timestamp", "key")
    parsed = parse_json_lines(lines, conformer, {}, 16 * 1024 * 1024,
                              ["topic", "partition", "offset", "timestamp", "key"],
                              origin=F.col("topic"))  # the framework's own expressions
    rows = parsed.select(
        *[c for c in parsed.columns if c not in ("_corrupt_reason", "_dropped_columns",
                                                 "topic", "partition", "offset", "timestamp",
                                                 "key")],
        F.col("topic").alias("_topic"), F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"), F.col("timestamp").alias("_kafka_timestamp"),
        F.col("key").cast("string").alias("_key"))
    table = str(out / "table")

    def append(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        (batch.where(F.col("_corrupt_record").isNull()).drop("_corrupt_record")
         .withColumn("_ingested_at", F.current_timestamp())
         .withColumn("_batch_id", F.lit(batch_id).cast("long"))
         .write.format("delta").mode("append")
         .option("txnAppId", f"by-hand-{name}").option("txnVersion", batch_id).save(table))

    query = (rows.writeStream.foreachBatch(append)
             .option("checkpointLocation", str(out / "_checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    written = spark.read.format("delta").load(table).count()
    if written != records:
        raise SystemExit(f"expected {records} rows by hand, found {written}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as folder, \
            kafka_broker(Path(folder)) as broker:
        produce(broker, args.records, args.partitions)
        lake = BenchLakehouse("kafka")
        sides = {"framework": run_framework, "by hand": run_by_hand}
        for name, run in sides.items():
            run(lake, broker, f"warmup_{name.replace(' ', '_')}", args.records)
        seconds: dict[str, list[float]] = {name: [] for name in sides}
        names = list(sides)
        for r in range(args.rounds):
            order = names[r % 2:] + names[:r % 2]
            for name in order:
                seconds[name].append(sides[name](lake, broker, f"r{r}_{name.replace(' ', '_')}",
                                                 args.records))
            print(f"round {r}: " + ", ".join(f"{n} {seconds[n][-1]:.1f}s" for n in order),
                  flush=True)
        lake.spark.stop()
        shutil.rmtree(lake.work, ignore_errors=True)
    median = {name: statistics.median(s) for name, s in seconds.items()}
    rate = {name: args.records / s for name, s in median.items()}
    for name in names:
        print(f"{name:10s} {median[name]:6.2f}s {rate[name]:>10,.0f} rows/s")
    print(json.dumps({
        "benchmark": "kafka_ingest",
        "records": args.records,
        "partitions": args.partitions,
        "rounds": args.rounds,
        "cores": os.cpu_count(),
        "seconds": {name: [round(t, 2) for t in s] for name, s in seconds.items()},
        "rows_per_s": {name: round(r) for name, r in rate.items()},
        "ratio": round(rate["framework"] / rate["by hand"], 3),
    }))


if __name__ == "__main__":
    main()
