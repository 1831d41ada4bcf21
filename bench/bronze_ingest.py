"""Bronze ingest throughput: the framework against a minimal hand-written query.

Both read the same JSON Lines files (default: 1,000,000 records in 200 files) with the same
schema into Delta with an availableNow trigger, in one Spark session, after a warm-up of each,
alternated (framework first in even rounds, second in odd ones). Each side keeps its table and
checkpoint from round to round, as a feed does from run to run, and every round lands a new
copy of the files (new names) for both. The framework's run
is the whole bronze job: parsing with a corrupt-record column, the rescued column, ingestion
metadata, the quarantine split, the file ledger and archiving the files.

    python bench/bronze_ingest.py [--records 1000000] [--files 200] [--rounds 3]
                                  [--max-files-per-trigger N] [--no-rescue]

With ``--max-files-per-trigger`` both sides read that many files per micro-batch (the default
is Spark's: all of them in one), which measures the cost each batch carries, as in continuous
ingestion with a short trigger interval. ``--no-rescue`` runs the framework without the rescued
column (``rescued_column: null``), which spares it a second parse of every line.

Each round also shows where the framework's time went (the job's own step timings: the batch
write, the ledger, archiving, and the rest: Spark listing the files, planning, offsets). The
last line printed is one JSON object with the figures and "ratio" (framework / hand-written
rows per second).
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

from bench.common import BenchLakehouse
from bronze.job import BronzeJob
from framework.config.loader import load_project
from framework.job import RunContext, RunStatus

SCHEMA = (
    "order_id STRING, customer_id STRING, store_id STRING, event_time TIMESTAMP, "
    "quantity INT, unit_price DECIMAL(10,2), status STRING"
)


def generate(folder: Path, records: int, files: int) -> None:
    """JSON Lines order events, written once and reused while the sizes match."""
    stamp = folder / f".complete-{records}-{files}"
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
            lines.append(json.dumps({
                "order_id": f"o{n:09d}",
                "customer_id": f"c{n % 50_000:06d}",
                "store_id": f"s{n % 300:04d}",
                "event_time": f"2026-11-{1 + n % 28:02d}T{n % 24:02d}:{n % 60:02d}:{n % 59:02d}Z",
                "quantity": 1 + n % 7,
                "unit_price": f"{(n % 10_000) / 100:.2f}",
                "status": statuses[n % 4],
            }))
            n += 1
        (folder / f"orders-{f:05d}.json").write_text("\n".join(lines) + "\n")
    stamp.touch()


def copy_landing(source: Path, target: Path, tag: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for p in source.glob("*.json"):
        shutil.copyfile(p, target / f"{tag}-{p.name}")


def run_handwritten(spark, landing: Path, out: Path,  # type: ignore[no-untyped-def]
                    max_files_per_trigger: int | None = None) -> float:
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
    steps = job.seconds()
    steps["other"] = round(elapsed - sum(steps.values()), 3)
    return elapsed, summary.counts | {"rows_out": summary.rows_out}, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-files-per-trigger", type=int, default=None,
                        help="files per micro-batch, on both sides (default: all in one)")
    parser.add_argument("--no-rescue", action="store_true",
                        help="the framework without the rescued column")
    parser.add_argument("--data", default=".bench/bronze_ingest", help="cached input files")
    args = parser.parse_args()

    data = Path(args.data).resolve() / "input"
    generate(data, args.records, args.files)
    lake = BenchLakehouse("bronze")
    work, conf, spark = lake.work, lake.conf, lake.spark
    source = {"path": "landing/orders", "format": "json", "schema": SCHEMA,
              "clean_source": "archive"}
    if args.max_files_per_trigger:
        source["max_files_per_trigger"] = args.max_files_per_trigger
    spec: dict[str, object] = {"source": source}
    if args.no_rescue:
        spec["rescued_column"] = None
    lake.write("tables/bronze/orders.yaml", spec)

    def framework_round(tag: str) -> tuple[float, dict[str, int], dict[str, float]]:
        copy_landing(data, work / "lakehouse" / "landing" / "orders", tag)
        return run_framework(spark, conf, "orders")

    def handwritten_round(tag: str) -> float:
        copy_landing(data, work / "hand" / "landing", tag)
        return run_handwritten(spark, work / "hand" / "landing", work / "hand",
                               args.max_files_per_trigger)

    print(f"input: {args.records} records in {args.files} files ({data})", flush=True)
    framework_round("warmup")
    handwritten_round("warmup")
    fw_times: list[float] = []
    hw_times: list[float] = []
    fw_steps: list[dict[str, float]] = []
    counts: dict[str, int] = {}
    for r in range(args.rounds):
        # Alternated: framework first in even rounds, second in odd ones.
        order = ("fw", "hw") if r % 2 == 0 else ("hw", "fw")
        for who in order:
            if who == "fw":
                elapsed, counts, steps = framework_round(f"r{r}")
                fw_times.append(elapsed)
                fw_steps.append(steps)
            else:
                hw_times.append(handwritten_round(f"r{r}"))
        print(f"round {r} ({' then '.join(order)}): "
              f"framework {args.records / fw_times[-1]:,.0f} rows/s "
              f"({fw_times[-1]:.1f}s: "
              f"{', '.join(f'{k} {v:.1f}' for k, v in fw_steps[-1].items())}), "
              f"hand-written {args.records / hw_times[-1]:,.0f} rows/s "
              f"({hw_times[-1]:.1f}s)", flush=True)
    if counts.get("rows_out") != args.records:
        raise SystemExit(f"expected {args.records} bronze rows, found {counts}")
    fw = args.records / statistics.median(fw_times)
    hw = args.records / statistics.median(hw_times)
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({
        "benchmark": "bronze_ingest",
        "records": args.records,
        "files": args.files,
        "max_files_per_trigger": args.max_files_per_trigger,
        "rescued_column": not args.no_rescue,
        "rounds": args.rounds,
        "cores": os.cpu_count(),
        "framework_rows_per_s": round(fw),
        "handwritten_rows_per_s": round(hw),
        "framework_seconds": [round(t, 2) for t in fw_times],
        "handwritten_seconds": [round(t, 2) for t in hw_times],
        "framework_steps_seconds": fw_steps,
        "ratio": round(fw / hw, 3),
    }))


if __name__ == "__main__":
    main()
