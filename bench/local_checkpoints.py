"""Streaming batches into Delta on a local disk, with Spark's checkpoint file manager over
Hadoop's FileSystem API (what local sessions use, framework/session.py) and over its default,
Hadoop's FileContext, in one session.

Each round lands ``--files`` small JSON files and runs one query over them (``availableNow``,
a batch per file) into a Delta table through ``foreachBatch``, as bronze does; the query's
offsets and commits, and Delta's checksum file of each commit, are written through the manager
named. The two managers alternate which goes first. With FileContext, each of these files'
renames starts two ``readlink`` processes (no Hadoop native library in a pip install).

    python bench/local_checkpoints.py [--rounds 8] [--files 10]

The last line is one JSON object with the median seconds per round of each manager and
"ratio" (FileContext / FileSystem: above 1 when the FileSystem API is faster).
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

from pyspark.sql import DataFrame

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import BenchLakehouse
from framework.session import CHECKPOINT_FILE_MANAGER


def appending_to(table: str) -> Callable[[DataFrame, int], None]:
    """A foreachBatch function appending each batch to the Delta table at ``table``."""
    def append(df: DataFrame, _: int) -> None:
        df.write.format("delta").mode("append").save(table)
    return append


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--files", type=int, default=10)
    args = parser.parse_args()

    lake = BenchLakehouse("checkpoints", shuffle_partitions=2)
    spark = lake.spark
    file_system = spark.conf.get(CHECKPOINT_FILE_MANAGER)
    if not file_system:
        raise SystemExit(f"expected {CHECKPOINT_FILE_MANAGER} set in a local session, found none")
    managers = {"file_system": file_system,
                "file_context": file_system.replace("FileSystemBased", "FileContextBased")}
    times: dict[str, list[float]] = {name: [] for name in managers}
    for r in range(args.rounds):
        order = list(managers) if r % 2 == 0 else list(managers)[::-1]
        for name in order:
            spark.conf.set(CHECKPOINT_FILE_MANAGER, managers[name])
            landing = lake.work / name / "landing" / str(r)
            landing.mkdir(parents=True)
            for i in range(args.files):
                (landing / f"{i}.json").write_text(
                    "".join(f'{{"id": {i * 100 + k}, "v": "x{k}"}}\n' for k in range(100)))
            table = str(lake.work / name / "table")
            started = time.perf_counter()
            query = (spark.readStream.schema("id BIGINT, v STRING")
                     .option("maxFilesPerTrigger", 1).json(str(landing))
                     .writeStream.trigger(availableNow=True)
                     .option("checkpointLocation", str(lake.work / name / "checkpoints" / str(r)))
                     .foreachBatch(appending_to(table))
                     .start())
            query.awaitTermination()
            times[name].append(time.perf_counter() - started)
        print(f"round {r}: " + ", ".join(f"{n} {times[n][-1]:.2f}s" for n in managers),
              flush=True)
    for name in managers:
        rows = spark.read.format("delta").load(str(lake.work / name / "table")).count()
        if rows != args.rounds * args.files * 100:
            raise SystemExit(f"{name}: expected {args.rounds * args.files * 100} rows, "
                             f"found {rows}")
    # The first round warms the session up.
    medians = {name: statistics.median(t[1:]) for name, t in times.items()}
    spark.stop()
    shutil.rmtree(lake.work, ignore_errors=True)
    print(json.dumps({
        "benchmark": "local_checkpoints",
        "batches_per_round": args.files,
        "rounds": args.rounds,
        "cores": os.cpu_count(),
        "seconds": {name: round(m, 3) for name, m in medians.items()},
        "seconds_per_round": {name: [round(t, 3) for t in v] for name, v in times.items()},
        "ratio": round(medians["file_context"] / medians["file_system"], 3),
    }))


if __name__ == "__main__":
    main()
