"""Where bronze's time per record goes: the same JSON Lines parsed four ways and appended to
Delta, side by side in one session.

1. ``hand-written``: Spark's JSON reader with the schema, appended as it is (what the
   hand-written query of ``bronze_ingest.py`` does in each batch);
2. ``reader + ingestion``: Spark's JSON reader with a corrupt-record column, plus what bronze
   adds to every batch (source file, modification time and size, ingestion time, batch id, the
   count of records read and quarantined, the quarantine split);
3. ``bronze, no rescue``: bronze's own reader (each line read as text and parsed with
   ``from_json``, so the raw line is at hand) with ``rescued_column: null``, plus the same;
4. ``bronze``: the same with the rescued column (the default): keys outside the schema are
   found in every line.

Batch reads, no streaming and no ledger: what is measured is the cost per record. Spark's JSON
reader parses bytes; ``from_json`` and ``json_object_keys`` parse a string through a character
reader, and only they can see the raw line, which the rescued column needs.

    python bench/bronze_parse.py [--records 1000000] [--files 200] [--rounds 5]

The last line is one JSON object with the seconds of each way and ``ratio`` (the hand-written
parse's seconds / bronze's, as rows per second would be).
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

from delta.tables import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql.types import StringType, StructField, StructType

from bench.bronze_ingest import SCHEMA, generate
from bench.common import BenchLakehouse
from bronze.batch import BRONZE_PROPERTIES, split_batch
from bronze.job import BronzeJob
from bronze.reading import CORRUPT, FeedReader
from framework.job import RunContext


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data", default=".bench/bronze_ingest", help="cached input files")
    args = parser.parse_args()

    data = Path(args.data).resolve() / "input"
    generate(data, args.records, args.files)
    files = str(data / "*.json")
    lake = BenchLakehouse("bronze-parse")
    spark = lake.spark
    for name, rescued in (("orders", "_rescued_data"), ("orders_no_rescue", None)):
        lake.write(f"tables/bronze/{name}.yaml", {
            "source": {"path": files, "format": "json", "schema": SCHEMA},
            "rescued_column": rescued})
    project = lake.project()
    schema = StructType.fromDDL(SCHEMA)
    with_corrupt = StructType([*schema.fields, StructField(CORRUPT, StringType())])
    batch_ids = iter(range(1_000_000))

    def bronze_batch(job: BronzeJob, df: DataFrame, target: str) -> None:
        """What each bronze batch adds to the parsed records: the job's ingestion columns,
        its counts of records read and quarantined, and its quarantine split."""
        split = split_batch(job.transform(df), job.table.name, next(batch_ids))
        append(split.good, target, BRONZE_PROPERTIES)
        if split.observation.get["records"] != args.records:
            raise SystemExit(f"expected {args.records} records, found {split.observation.get}")

    def append(df: DataFrame, target: str, properties: dict[str, str]) -> None:
        location = str(lake.work / "tables" / target)
        if not DeltaTable.isDeltaTable(spark, location):
            builder = DeltaTable.create(spark).location(location).addColumns(df.schema)
            for key, value in properties.items():
                builder = builder.property(key, value)
            builder.execute()
        df.write.format("delta").mode("append").save(location)

    def hand_written() -> None:
        append(spark.read.schema(SCHEMA).json(files), "hand_written", {})

    def reader_ingestion() -> None:
        job = BronzeJob(spark, project.table("orders_no_rescue"), RunContext())
        df = (spark.read.schema(with_corrupt)
              .options(mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT)
              .json(files).select("*", "_metadata"))
        bronze_batch(job, df, "reader_ingestion")

    def bronze_reader(table: str) -> Callable[[], None]:
        def run() -> None:
            job = BronzeJob(spark, project.table(table), RunContext())
            frame = FeedReader(spark, job.spec, job.files).read(files, schema).frame
            assert frame is not None
            bronze_batch(job, frame, table)
        return run

    ways: dict[str, Callable[[], None]] = {
        "hand-written": hand_written,
        "reader + ingestion": reader_ingestion,
        "bronze, no rescue": bronze_reader("orders_no_rescue"),
        "bronze": bronze_reader("orders"),
    }
    print(f"input: {args.records} records in {args.files} files ({data})", flush=True)
    for run in ways.values():  # warm-up
        run()
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    for r in range(args.rounds):
        order = list(ways) if r % 2 == 0 else list(reversed(ways))
        for name in order:
            started = time.perf_counter()
            ways[name]()
            seconds[name].append(time.perf_counter() - started)
        print(f"round {r}: " + ", ".join(f"{n} {seconds[n][-1]:.2f}s" for n in ways), flush=True)
    median = {name: statistics.median(s) for name, s in seconds.items()}
    for name in ways:
        print(f"{name:20s} {median[name]:6.2f}s  {args.records / median[name]:>10,.0f} rows/s  "
              f"hand-written / this: {median['hand-written'] / median[name]:.2f}")
    spark.stop()
    shutil.rmtree(lake.work, ignore_errors=True)
    print(json.dumps({
        "benchmark": "bronze_parse",
        "records": args.records,
        "files": args.files,
        "cores": os.cpu_count(),
        "seconds": {name: round(s, 3) for name, s in median.items()},
        "ratio": round(median["hand-written"] / median["bronze"], 3),
    }))


if __name__ == "__main__":
    main()
