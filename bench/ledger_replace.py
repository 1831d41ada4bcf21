"""The file ledger's status update: one ``replaceWhere`` of a batch's rows, with Delta's table
state rebuilt by as many tasks as the local master has cores (what local sessions do) and by
one per shuffle partition (what they did before), in one session.

Each round appends a batch of ``--files`` ledger rows to each of two ledger tables, as bronze
does for a micro-batch, then replaces them with their archived status, as bronze's reconcile
does at the end of a run; the two settings alternate which goes first. Most of a replace is
Delta rebuilding the state of the version the append made (which files the partition holds).

    python bench/ledger_replace.py [--rounds 24] [--files 200]

The last line is one JSON object with the median seconds per replace of each setting and
"ratio" (cores / shuffle partitions: below 1 when fewer tasks are faster).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import BenchLakehouse
from bronze.ledger import LEDGER_SCHEMA, FileStatus
from framework.delta import append, create_table, literal_rows, replace_rows
from framework.session import local_cores

SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--files", type=int, default=200)
    args = parser.parse_args()

    shuffle_partitions = 4
    lake = BenchLakehouse("ledger", shuffle_partitions=shuffle_partitions)
    spark = lake.spark
    cores = local_cores(lake.project().env.master) or shuffle_partitions
    settings = {"cores": cores, "shuffle_partitions": shuffle_partitions}
    tables = {}
    for name in settings:
        tables[name] = str(lake.work / f"ledger_{name}")
        create_table(spark, f"default.ledger_{name}", LEDGER_SCHEMA, tables[name],
                     partition_by=["batch_id"])
    now = datetime.now()
    times: dict[str, list[float]] = {name: [] for name in settings}
    for batch in range(args.rounds):
        order = list(settings) if batch % 2 == 0 else list(settings)[::-1]
        for name in order:
            spark.conf.set(SNAPSHOT_PARTITIONS, str(settings[name]))
            rows = [(f"/landing/{batch}/{i}.json", 100, now, batch, 10, 10, 0,
                     FileStatus.INGESTED, None, f"/landing/{batch}/{i}.json", now, now)
                    for i in range(args.files)]
            append(literal_rows(spark, rows, LEDGER_SCHEMA), tables[name], "bench", batch)
            archived = literal_rows(spark, [(*r[:7], FileStatus.ARCHIVED, *r[8:]) for r in rows],
                                    LEDGER_SCHEMA)
            started = time.perf_counter()
            replace_rows(archived, tables[name], f"batch_id IN ({batch})")
            times[name].append(time.perf_counter() - started)
        print(f"round {batch}: " + ", ".join(f"{n} ({settings[n]} tasks) {times[n][-1]:.2f}s"
                                             for n in settings), flush=True)
    for name, location in tables.items():
        archived_rows = spark.read.format("delta").load(location).where(
            f"status = '{FileStatus.ARCHIVED}'").count()
        if archived_rows != args.rounds * args.files:
            raise SystemExit(f"{name}: expected {args.rounds * args.files} archived rows, "
                             f"found {archived_rows}")
    # The first two rounds warm the session up; Delta checkpoints every tenth commit and
    # those rounds stay in (each setting has the same share of them).
    medians = {name: statistics.median(t[2:]) for name, t in times.items()}
    spark.stop()
    shutil.rmtree(lake.work, ignore_errors=True)
    print(json.dumps({
        "benchmark": "ledger_replace",
        "rows_per_replace": args.files,
        "rounds": args.rounds,
        "cores": os.cpu_count(),
        "tasks": settings,
        "seconds": {name: round(m, 3) for name, m in medians.items()},
        "seconds_per_round": {name: [round(t, 3) for t in v] for name, v in times.items()},
        "ratio": round(medians["cores"] / medians["shuffle_partitions"], 3),
    }))


if __name__ == "__main__":
    main()
