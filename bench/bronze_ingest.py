"""Bronze ingest throughput: the framework against hand-written queries, side by side.

All sides read the same JSON Lines files (default: 1,000,000 records in 200 files) with the same
schema into Delta with an availableNow trigger, in one Spark session, after a warm-up of each,
alternated (the order of the sides turns each round). Each side keeps its table and checkpoint
from round to round, as a feed does from run to run, and every round lands a new copy of the
files (new names) for each. The sides:

- ``framework``: the whole bronze job (strict reads, the corrupt-record path, the rescued column,
  the ingestion columns, the quarantine split, the file ledger, archiving the files);
- ``framework, no rescue``: the same with ``rescued_column: null``;
- ``same work``: a hand-written query doing the same work per record: lines read as text,
  checked to be UTF-8, each parsed as strict JSON holding exactly one object
  (``try_parse_json``) and with ``from_json`` against the schema with a corrupt-record column,
  keys outside the schema and values that do not fit their type rescued as typed JSON (the
  framework's own expressions, :func:`bronze.reading.parse_json_lines`), the five ingestion
  columns (source file named as the ledger names it, its time and size, ingestion time, batch
  id), the good rows appended
  exactly once (``foreachBatch`` with Delta's ``txnAppId``/``txnVersion``);
- ``bare``: ``readStream.json`` with the schema into Delta's streaming sink.

    python bench/bronze_ingest.py [--records 1000000] [--files 200] [--rounds 3]
                                  [--max-files-per-trigger N] [--growth] [--drift]
                                  [--without-no-rescue]

``--drift`` makes the feed change shape as a producer does: from the middle file on every record
carries a new key (``channel``), and one record in fifty has its quantity as text (``"7"``):
both are rescued (``schema_evolution: rescue``, the default).

It prints ``ratio_same_work`` (framework / same work, rows per second), ``ratio_bare``
(framework / bare) and ``ratio_no_rescue`` (framework without the rescued column / bare);
``ratio`` is ``ratio_same_work``. With ``--growth`` it also runs the framework alone on ten
times the records in ten times the files, and prints ``growth``: its seconds at 10x over its
seconds at 1x (medians). Each round shows where the framework's time went (the job's step
timings: the batch write, the ledger, archiving, and the rest: listing, planning, offsets).
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

from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from bench.common import BenchLakehouse
from bronze.batch import file_name
from bronze.conform import Conformer
from bronze.job import BronzeJob
from bronze.reading import parse_json_lines
from bronze.spec import SchemaEvolution
from framework.config.loader import load_project
from framework.job import RunContext, RunStatus

SCHEMA = (
    "order_id STRING, customer_id STRING, store_id STRING, event_time TIMESTAMP, "
    "quantity INT, unit_price DECIMAL(10,2), status STRING"
)


def generate(folder: Path, records: int, files: int, drift: bool = False) -> None:
    """JSON Lines order events, written once and reused while the sizes match; with
    ``drift``, a new key from the middle file on and a quantity as text in 1 record of 50."""
    stamp = folder / f".complete-{records}-{files}{'-drift' if drift else ''}"
    if stamp.exists():
        return
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    per_file = records // files
    statuses = ("new", "paid", "shipped", "cancelled")
    n = 0
    for f in range(files):
        lines = []
        for _ in range(per_file if f < files - 1 else records - per_file * (files - 1)):
            event = {
                "order_id": f"o{n:09d}",
                "customer_id": f"c{n % 50_000:06d}",
                "store_id": f"s{n % 300:04d}",
                "event_time": f"2026-11-{1 + n % 28:02d}T{n % 24:02d}:{n % 60:02d}:{n % 59:02d}Z",
                "quantity": 1 + n % 7,
                "unit_price": f"{(n % 10_000) / 100:.2f}",
                "status": statuses[n % 4],
            }
            if drift and f >= files // 2:
                event["channel"] = ("store", "web", "app")[n % 3]
            if drift and n % 50 == 7:
                event["quantity"] = str(event["quantity"])
            lines.append(json.dumps(event))
            n += 1
        (folder / f"orders-{f:05d}.json").write_text("\n".join(lines) + "\n")
    stamp.touch()


def copy_landing(source: Path, target: Path, tag: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for p in source.glob("*.json"):
        shutil.copyfile(p, target / f"{tag}-{p.name}")


def run_bare(spark, landing: Path, out: Path,  # type: ignore[no-untyped-def]
             max_files_per_trigger: int | None = None) -> float:
    """``readStream.json`` with the schema into Delta's streaming sink."""
    started = time.perf_counter()
    reader = spark.readStream.format("json").schema(SCHEMA)
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    query = (
        reader.load(str(landing))
        .writeStream.format("delta")
        .option("checkpointLocation", str(out / "_checkpoint"))
        .trigger(availableNow=True)
        .start(str(out / "table"))
    )
    query.awaitTermination()
    return time.perf_counter() - started


def same_work_records(spark, landing: Path,  # type: ignore[no-untyped-def]
                      max_files_per_trigger: int | None = None):
    """The framework's work per record, by hand, as a stream: text, from_json with a
    corrupt-record column, the rescued keys, the file's ingestion columns."""
    schema = StructType.fromDDL(SCHEMA)
    conformer = Conformer(schema, "_rescued_data", SchemaEvolution.RESCUE, {})
    reader = spark.readStream.format("text")
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    raw = reader.load(str(landing)).where(F.trim("value") != "")
    raw = raw.where(F.when(F.is_valid_utf8("value"), F.lit(True))
                    .otherwise(F.raise_error(F.lit("not UTF-8")).cast("boolean")))
    parsed = parse_json_lines(raw, conformer, {}, 16 * 1024 * 1024, ["_metadata"])
    return parsed.select(
        *[c for c in parsed.columns if c not in ("_metadata", "_corrupt_reason",
                                                 "_dropped_columns")],
        file_name(F.col("_metadata.file_path")).alias("_source_file"),
        F.col("_metadata.file_modification_time").alias("_file_modification_time"),
        F.col("_metadata.file_size").alias("_file_size"))


def same_work_append(table: str, app_id: str) -> Callable[..., None]:
    """A foreachBatch function appending a batch's good rows, with the batch's ingestion
    columns, exactly once (Delta's ``txnAppId``/``txnVersion``)."""
    def append(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        (batch.where(F.col("_corrupt_record").isNull()).drop("_corrupt_record")
         .withColumn("_ingested_at", F.current_timestamp())
         .withColumn("_batch_id", F.lit(batch_id).cast("long"))
         .write.format("delta").mode("append")
         .option("txnAppId", app_id).option("txnVersion", batch_id).save(table))
    return append


def run_same_work(spark, landing: Path, out: Path,  # type: ignore[no-untyped-def]
                  max_files_per_trigger: int | None = None) -> float:
    """The framework's work per record, by hand (:func:`same_work_records`), appended
    exactly once per batch."""
    started = time.perf_counter()
    records = same_work_records(spark, landing, max_files_per_trigger)
    query = (records.writeStream.foreachBatch(same_work_append(str(out / "table"), "same-work"))
             .option("checkpointLocation", str(out / "_checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return time.perf_counter() - started


def run_framework(spark, conf: Path, name: str) -> tuple[float, dict[str, int], dict[str, float]]:  # type: ignore[no-untyped-def]
    """Seconds, counts, and the seconds per step of the job (the rest: Spark listing the
    files, planning, committing the query's offsets)."""
    project = load_project(conf, "bench")
    table = project.table(name)
    started = time.perf_counter()
    job = BronzeJob(spark, table, RunContext())
    summary = job.run()
    elapsed = time.perf_counter() - started
    if summary.status is not RunStatus.SUCCEEDED:
        raise SystemExit(f"framework run failed: {summary.error}")
    steps = job.feed.seconds() | job.run_seconds
    steps["other"] = round(elapsed - sum(steps.values()), 3)
    return elapsed, summary.counts | {"rows_out": summary.rows_out}, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-files-per-trigger", type=int, default=None,
                        help="files per micro-batch, on every side (default: all in one)")
    parser.add_argument("--growth", action="store_true",
                        help="also time the framework on 10x the records in 10x the files")
    parser.add_argument("--data", default=".bench/bronze_ingest", help="cached input files")
    parser.add_argument("--drift", action="store_true",
                        help="a feed that changes shape: a new key halfway, quantities as text")
    parser.add_argument("--without-no-rescue", action="store_true",
                        help="leave out the 'framework, no rescue' side (its quarantine of "
                             "mistyped records is slow; ratio_no_rescue is then not printed)")
    args = parser.parse_args()

    data = Path(args.data).resolve() / ("input-drift" if args.drift else "input")
    generate(data, args.records, args.files, args.drift)
    lake = BenchLakehouse("bronze")
    work, conf, spark = lake.work, lake.conf, lake.spark
    for name, rescued in (("orders", "_rescued_data"), ("orders_no_rescue", None)):
        source = {"path": f"landing/{name}", "format": "json", "schema": SCHEMA,
                  "clean_source": "archive"}
        if args.max_files_per_trigger:
            source["max_files_per_trigger"] = args.max_files_per_trigger
        lake.write(f"tables/bronze/{name}.yaml", {"source": source, "rescued_column": rescued})
    landing = work / "lakehouse" / "landing"
    steps: dict[str, list[dict[str, float]]] = {"orders": [], "orders_no_rescue": []}

    def framework(name: str) -> Callable[[str], float]:
        def run(tag: str) -> float:
            copy_landing(data, landing / name, tag)
            elapsed, counts, taken = run_framework(spark, conf, name)
            # (without a rescued column, a value that does not fit makes its record malformed)
            if counts.get("rows_out", 0) + counts.get("quarantined_rows", 0) != args.records:
                raise SystemExit(f"expected {args.records} records in bronze and its "
                                 f"quarantine, found {counts}")
            steps[name].append(taken)
            return elapsed
        return run

    def by_hand(name: str, query: Callable[..., float]) -> Callable[[str], float]:
        def run(tag: str) -> float:
            copy_landing(data, work / name / "landing", tag)
            return query(spark, work / name / "landing", work / name,
                         args.max_files_per_trigger)
        return run

    sides = {"framework": framework("orders"),
             "framework, no rescue": framework("orders_no_rescue"),
             "same work": by_hand("same_work", run_same_work),
             "bare": by_hand("bare", run_bare)}
    if args.without_no_rescue:
        del sides["framework, no rescue"]
    print(f"input: {args.records} records in {args.files} files ({data})", flush=True)
    for run in sides.values():
        run("warmup")
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]  # each side first in turn
        for name in order:
            seconds[name].append(sides[name](f"r{r}"))
        print(f"round {r}: " + ", ".join(f"{n} {seconds[n][-1]:.1f}s" for n in order)
              + "".join(f" ({side}: {', '.join(f'{k} {v:.1f}' for k, v in steps[t][-1].items())})"
                        for side, t in (("framework", "orders"),
                                        ("no rescue", "orders_no_rescue")) if steps[t]),
              flush=True)
    median = {name: statistics.median(s) for name, s in seconds.items()}
    rate = {name: args.records / s for name, s in median.items()}
    figures: dict[str, object] = {
        "ratio_same_work": round(rate["framework"] / rate["same work"], 3),
        "ratio_bare": round(rate["framework"] / rate["bare"], 3),
    }
    if "framework, no rescue" in rate:
        figures["ratio_no_rescue"] = round(rate["framework, no rescue"] / rate["bare"], 3)
    if args.growth:
        figures.update(growth(spark, conf, lake, data, args, median["framework"]))
    for name in names:
        print(f"{name:22s} {median[name]:6.2f}s {rate[name]:>10,.0f} rows/s")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({
        "benchmark": "bronze_ingest",
        "records": args.records,
        "files": args.files,
        "max_files_per_trigger": args.max_files_per_trigger,
        "rounds": args.rounds,
        "drift": args.drift,
        "cores": os.cpu_count(),
        "seconds": {name: [round(t, 2) for t in s] for name, s in seconds.items()},
        "rows_per_s": {name: round(r) for name, r in rate.items()},
        "framework_steps_seconds": steps["orders"],
        "no_rescue_steps_seconds": steps["orders_no_rescue"],
        **figures,
        "ratio": figures["ratio_same_work"],
    }))


def growth(spark, conf: Path, lake: BenchLakehouse, data: Path,  # type: ignore[no-untyped-def]
           args: argparse.Namespace, one: float) -> dict[str, object]:
    """The framework on ten times the records in ten times the files: seconds, and their
    ratio to the seconds at the base size (medians of the same number of rounds)."""
    big = Path(args.data).resolve() / "input-10x"
    generate(big, args.records * 10, args.files * 10)
    lake.write("tables/bronze/orders_10x.yaml", {"source": {
        "path": "landing/orders_10x", "format": "json", "schema": SCHEMA}})
    times = []
    for r in range(max(1, args.rounds)):
        copy_landing(big, lake.work / "lakehouse" / "landing" / "orders_10x", f"g{r}")
        elapsed, counts, _ = run_framework(spark, conf, "orders_10x")
        if counts.get("rows_out") != args.records * 10:
            raise SystemExit(f"expected {args.records * 10} bronze rows, found {counts}")
        times.append(elapsed)
        print(f"growth round {r}: {elapsed:.1f}s for {args.records * 10} records", flush=True)
    ten = statistics.median(times)
    return {"seconds_10x": [round(t, 2) for t in times], "growth": round(ten / one, 3)}


if __name__ == "__main__":
    main()
