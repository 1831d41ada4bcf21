"""Per-micro-batch overhead: the framework's bronze and silver against hand-written queries
doing the same per-batch work, one small file per batch, side by side.

Each round lands ``--batches`` new JSON Lines files of ``--rows`` order events (the event time
one minute later per file; one row in fifty repeats a key of the file before) and runs four
sides in one Spark session, alternated (the order turns each round):

- ``framework bronze``: the bronze job as a feed runs it (``max_files_per_trigger: 1``): strict
  reads, the rescued column, the quarantine split, the file ledger, archiving each file, the
  run history;
- ``hand bronze``: the same parse by hand (the framework's own JSON expressions,
  :func:`bronze.reading.parse_json_lines`, with the ingestion columns), appended exactly once
  per batch (``foreachBatch`` with Delta's ``txnAppId``/``txnVersion``), no ledger, no
  archiving, no history;
- ``framework silver``: the silver job reading the framework's bronze table one commit per
  batch, with ``dedup`` (``dropDuplicatesWithinWatermark`` on the order id, 5 minutes) and an
  expectation that drops rows without a positive quantity;
- ``hand silver``: the same query by hand: watermark, ``dropDuplicatesWithinWatermark``, the
  rule's rows counted and dropped, the rest appended exactly once per batch.

Every side keeps its table and checkpoint from round to round, as a feed does from run to run.
A side's seconds per batch are measured the same way for all: the median gap between the
starts of consecutive micro-batches of its query (Spark's progress reports; the framework's
come from its run history, ``ops.runs``), so everything a batch costs, in the trigger or
between triggers, is in it.

    python bench/batch_overhead.py [--batches 200] [--rows 1000] [--rounds 2]
    python bench/batch_overhead.py --lineage [--batches 50] [--rows 1000] [--rounds 2]

``--lineage`` measures what OpenLineage events add instead (:mod:`framework.lineage`): each
round the framework's bronze lands its batches once, then two silver tables with the same spec
read them, side by side in one session (the order turns each round): ``events off``, and
``events on`` with the file transport (a START and an end event per run, each reading the
tables' schemas; the end event the run's Delta history). A side's seconds per batch are its
whole run's seconds over its batches (the events are sent before the first batch and after the
last: a gap between two batches' starts would not see them); the last line's ``ratio`` is
events-off / events-on seconds per batch.

It prints each round, the framework's per-step medians (milliseconds, from ``ops.runs``'s
``durations_ms``: Spark's steps and the job's own), and on the last line one JSON object with
``bronze_median_s``, ``silver_median_s``, the hand-written sides' medians, and ``ratio`` =
hand-written / framework seconds per batch, over bronze and silver together.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.bronze_ingest import SCHEMA, same_work_append, same_work_records
from bench.common import BenchLakehouse
from bronze.job import BronzeJob
from framework.config.model import Layer
from framework.job import RunContext, RunStatus
from silver.job import SilverJob

DELAY = "5 minutes"
RULE = "quantity > 0"
START = datetime(2026, 11, 1)


def land(folder: Path, batches: int, rows: int, round_no: int) -> int:
    """``batches`` files of ``rows`` events for round ``round_no`` (its own keys and event
    times); returns the number of distinct keys."""
    folder.mkdir(parents=True, exist_ok=True)
    statuses = ("new", "paid", "shipped", "cancelled")
    for b in range(batches):
        minute = START + timedelta(minutes=round_no * (batches + 10) + b)
        lines = []
        for i in range(rows):
            # one row in fifty repeats a key of the file before, within the watermark's delay
            key = f"r{round_no}b{b - 1}i{i}" if b and i % 50 == 0 else f"r{round_no}b{b}i{i}"
            lines.append(json.dumps({
                "order_id": key, "customer_id": f"c{i % 997:05d}", "store_id": f"s{i % 30:03d}",
                "event_time": (minute + timedelta(seconds=i % 60)).isoformat() + "Z",
                "quantity": i % 9, "unit_price": f"{(i % 1000) / 100:.2f}",
                "status": statuses[i % 4]}))
        (folder / f"r{round_no}-{b:05d}.json").write_text("\n".join(lines) + "\n")
    return batches * rows - (batches - 1) * len(range(0, rows, 50))


def gaps(starts: Sequence[datetime]) -> list[float]:
    """Seconds between the starts of consecutive batches."""
    ordered = sorted(starts)
    return [(b - a).total_seconds() for a, b in pairwise(ordered)]


def progress_starts(query: Any) -> list[datetime]:
    return [datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
            for p in query.recentProgress if p["numInputRows"]]


class HandSide:
    """A hand-written streaming query that keeps its checkpoint and table from round to
    round."""

    def __init__(self, work: Path, name: str) -> None:
        self.out = work / name
        self.table = str(self.out / "table")
        self.checkpoint = str(self.out / "_checkpoint")

    def run(self, stream: DataFrame, append: Callable[[DataFrame, int], None]
            ) -> tuple[float, list[float]]:
        started = time.perf_counter()
        query = (stream.writeStream.foreachBatch(append)
                 .option("checkpointLocation", self.checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        elapsed = time.perf_counter() - started
        return elapsed, gaps(progress_starts(query))


def hand_bronze(spark: SparkSession, side: HandSide, landing: Path
                ) -> tuple[float, list[float]]:
    """bench/bronze_ingest.py's same-work query, one file per batch."""
    return side.run(same_work_records(spark, landing, 1),
                    same_work_append(side.table, "hand-bronze"))


def hand_silver(spark: SparkSession, side: HandSide, source: str) -> tuple[float, list[float]]:
    stream = (spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)
              .select("order_id", "customer_id", "store_id", "event_time", "quantity",
                      "unit_price", "status")
              .withWatermark("event_time", DELAY)
              .dropDuplicatesWithinWatermark(["order_id"]))

    def append(batch: DataFrame, batch_id: int) -> None:
        batch = batch.observe("rule", F.count_if(~F.expr(RULE)).alias("dropped"))
        (batch.where(RULE).write.format("delta").mode("append")
         .option("txnAppId", "hand-silver").option("txnVersion", batch_id).save(side.table))

    return side.run(stream, append)


def framework_side(spark: SparkSession, lake: BenchLakehouse, layer: Layer, name: str,
                   job_class: type) -> tuple[float, list[float], dict[str, list[int]], int]:
    """Seconds, the gaps between the batches' starts and each step's milliseconds per batch
    (from the run history), and the rows written."""
    project = lake.project()
    table = project.table(name, layer)
    ctx = RunContext()
    job = job_class(spark, table, ctx)
    started = time.perf_counter()
    summary = job.run()
    elapsed = time.perf_counter() - started
    if summary.status is not RunStatus.SUCCEEDED:
        raise SystemExit(f"framework {layer} failed: {summary.error}")
    runs = project.env.root.rstrip("/") + "/tables/ops/runs"
    rows = (spark.read.format("delta").load(runs)
            .where((F.col("run_id") == ctx.run_id) & (F.col("status") == "committed")
                   & (F.col("rows_in") > 0))
            .select("started_at", "durations_ms").collect())
    steps: dict[str, list[int]] = {}
    for r in rows:
        for step, ms in (r["durations_ms"] or {}).items():
            steps.setdefault(step, []).append(ms)
    return elapsed, gaps([r["started_at"] for r in rows]), steps, summary.rows_out or 0


def lineage_overhead(args: argparse.Namespace) -> None:
    """Silver with OpenLineage events off and on (file transport), side by side."""
    import dataclasses

    from framework.config.model import Lineage

    lake = BenchLakehouse("lineage-overhead", shuffle_partitions=2)
    spark = lake.spark
    lake.write("tables/bronze/orders.yaml", {"source": {
        "path": "landing/orders", "format": "json", "schema": SCHEMA,
        "clean_source": "archive", "max_files_per_trigger": 1}})
    silver = {"source": {"table": "orders", "max_files_per_trigger": 1},
              "columns": [{"name": c} for c in ("order_id", "customer_id", "store_id",
                                                 "event_time", "quantity", "status")]
              + [{"name": "amount", "expr": "quantity * unit_price",
                  "type": "decimal(12,2)"}],
              "event_time": "event_time", "dedup": {"keys": ["order_id"], "delay": DELAY},
              "expectations": [{"name": "has_quantity", "rule": RULE, "action": "drop"}]}
    lake.write("tables/silver/orders_off.yaml", silver)
    lake.write("tables/silver/orders_on.yaml", silver)
    events = lake.work / "lineage-events.jsonl"
    lineage = Lineage(transport={"type": "file", "log_file_path": str(events),
                                 "append": True})
    landing = lake.root / "landing" / "orders"

    def silver_side(name: str, on: bool) -> tuple[float, int]:
        table = lake.project().table(name, Layer.SILVER)
        if on:
            table = dataclasses.replace(table, env=table.env.model_copy(
                update={"lineage": lineage}))
        started = time.perf_counter()
        summary = SilverJob(spark, table, RunContext()).run()
        elapsed = time.perf_counter() - started
        if summary.status is not RunStatus.SUCCEEDED:
            raise SystemExit(f"silver {name} failed: {summary.error}")
        return elapsed, summary.batches

    sides = {"events off": "orders_off", "events on": "orders_on"}
    per_batch: dict[str, list[float]] = {name: [] for name in sides}
    print(f"{args.batches} batches of {args.rows} rows per round, {args.rounds} rounds "
          "(and a warm-up of 3 batches), silver with OpenLineage events off and on", flush=True)
    for r in range(-1, args.rounds):
        batches = 3 if r < 0 else args.batches
        land(landing, batches, args.rows, r + 1)
        framework_side(spark, lake, Layer.BRONZE, "orders", BronzeJob)
        order = list(sides) if r % 2 else list(reversed(sides))
        line = []
        for name in order:
            elapsed, ran = silver_side(sides[name], name == "events on")
            if ran < batches:
                raise SystemExit(f"expected {batches} batches of {name}, found {ran}")
            line.append(f"{name} {elapsed:.1f}s ({elapsed / ran:.3f}s/batch)")
            if r >= 0:
                per_batch[name].append(elapsed / ran)
        print(("warm-up: " if r < 0 else f"round {r}: ") + ", ".join(line), flush=True)
    sent = [json.loads(line)["eventType"] for line in events.read_text().splitlines()]
    if sent != ["START", "COMPLETE"] * (args.rounds + 1):
        raise SystemExit(f"expected a START and a COMPLETE per run, found {sent}")
    counts = {name: spark.read.format("delta").load(
        lake.project().table(t, Layer.SILVER).location).count() for name, t in sides.items()}
    if len(set(counts.values())) != 1:
        raise SystemExit(f"expected the same rows on both sides, found {counts}")
    median = {name: round(statistics.median(v), 4) for name, v in per_batch.items()}
    for name in sides:
        print(f"{name:11s} {median[name]:.4f} s per batch")
    spark.stop()
    shutil.rmtree(lake.work, ignore_errors=True)
    print(json.dumps({
        "benchmark": "batch_overhead_lineage", "batches": args.batches, "rows": args.rows,
        "rounds": args.rounds, "cores": os.cpu_count(), "rows_written": counts,
        "events": len(sent), "seconds_per_batch": median,
        "added_ms_per_batch": round(1000 * (median["events on"] - median["events off"]), 1),
        "ratio": round(median["events off"] / median["events on"], 3)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=None,
                        help="per round (default: 200; 50 with --lineage)")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lineage", action="store_true",
                        help="silver with OpenLineage events off and on, side by side")
    args = parser.parse_args()
    if args.lineage:
        args.batches = args.batches or 50
        lineage_overhead(args)
        return
    args.batches = args.batches or 200

    lake = BenchLakehouse("batch-overhead", shuffle_partitions=2)
    spark = lake.spark
    lake.write("tables/bronze/orders.yaml", {"source": {
        "path": "landing/orders", "format": "json", "schema": SCHEMA,
        "clean_source": "archive", "max_files_per_trigger": 1}})
    lake.write("tables/silver/orders.yaml", {
        "source": {"table": "orders", "max_files_per_trigger": 1},
        "event_time": "event_time", "dedup": {"keys": ["order_id"], "delay": DELAY},
        "expectations": [{"name": "has_quantity", "rule": RULE, "action": "drop"}]})
    bronze_location = lake.project().table("orders", Layer.BRONZE).location
    landing = lake.root / "landing" / "orders"
    hand_landing = lake.work / "hand-landing"
    hand_b, hand_s = HandSide(lake.work, "hand-bronze"), HandSide(lake.work, "hand-silver")

    def fw_bronze(r: int) -> tuple[float, list[float], dict[str, list[int]]]:
        elapsed, between, steps, _ = framework_side(spark, lake, Layer.BRONZE, "orders",
                                                    BronzeJob)
        return elapsed, between, steps

    def fw_silver(r: int) -> tuple[float, list[float], dict[str, list[int]]]:
        elapsed, between, steps, _ = framework_side(spark, lake, Layer.SILVER, "orders",
                                                    SilverJob)
        return elapsed, between, steps

    def hw_bronze(r: int) -> tuple[float, list[float], dict[str, list[int]]]:
        return (*hand_bronze(spark, hand_b, hand_landing), {})

    def hw_silver(r: int) -> tuple[float, list[float], dict[str, list[int]]]:
        return (*hand_silver(spark, hand_s, bronze_location), {})

    sides = {"framework bronze": fw_bronze, "hand bronze": hw_bronze,
             "framework silver": fw_silver, "hand silver": hw_silver}
    per_batch: dict[str, list[float]] = {name: [] for name in sides}
    steps: dict[str, dict[str, list[int]]] = {"framework bronze": {}, "framework silver": {}}
    print(f"{args.batches} batches of {args.rows} rows per round, {args.rounds} rounds "
          "(and a warm-up of 3 batches)", flush=True)
    for r in range(-1, args.rounds):  # round -1: the warm-up
        batches = 3 if r < 0 else args.batches
        land(landing, batches, args.rows, r + 1)
        land(hand_landing, batches, args.rows, r + 1)
        # bronze, then silver (both silver sides read the framework's bronze table); which
        # side goes first turns each round
        order = (["framework bronze", "hand bronze", "hand silver", "framework silver"]
                 if r % 2 else
                 ["hand bronze", "framework bronze", "framework silver", "hand silver"])
        line = []
        for name in order:
            elapsed, between, taken = sides[name](r)
            if len(between) < batches - 2:
                raise SystemExit(f"expected {batches} batches of {name}, found "
                                 f"{len(between) + 1}")
            line.append(f"{name} {elapsed:.1f}s ({statistics.median(between):.2f}s/batch)")
            if r >= 0:
                per_batch[name] += between
                for step, ms in taken.items():
                    steps[name].setdefault(step, []).extend(ms)
        print(("warm-up: " if r < 0 else f"round {r}: ") + ", ".join(line), flush=True)
    counts = {
        "framework bronze": spark.read.format("delta").load(bronze_location).count(),
        "hand bronze": spark.read.format("delta").load(hand_b.table).count(),
        "framework silver": spark.table(lake.project().table("orders", Layer.SILVER)
                                        .full_name).count(),
        "hand silver": spark.read.format("delta").load(hand_s.table).count(),
    }
    if counts["framework bronze"] != counts["hand bronze"] or \
            counts["framework silver"] != counts["hand silver"]:
        raise SystemExit(f"expected the same rows on both sides, found {counts}")
    median = {name: round(statistics.median(v), 3) for name, v in per_batch.items()}
    step_medians = {name: {step: statistics.median(ms) for step, ms in sorted(s.items())}
                    for name, s in steps.items()}
    for name, s in step_medians.items():
        print(f"{name} steps (median ms per batch): "
              + ", ".join(f"{k} {v:.0f}" for k, v in s.items()))
    for name in sides:
        print(f"{name:18s} {median[name]:.3f} s per batch")
    spark.stop()
    shutil.rmtree(lake.work, ignore_errors=True)
    hand = median["hand bronze"] + median["hand silver"]
    framework = median["framework bronze"] + median["framework silver"]
    print(json.dumps({
        "benchmark": "batch_overhead", "batches": args.batches, "rows": args.rows,
        "rounds": args.rounds, "cores": os.cpu_count(), "rows_written": counts,
        "seconds_per_batch": median, "framework_steps_ms": step_medians,
        "bronze_median_s": median["framework bronze"],
        "silver_median_s": median["framework silver"],
        "bronze_ratio": round(median["hand bronze"] / median["framework bronze"], 3),
        "silver_ratio": round(median["hand silver"] / median["framework silver"], 3),
        "ratio": round(hand / framework, 3)}))


if __name__ == "__main__":
    main()
