"""What bronze's look for files delivered again costs at the start of a run
(:meth:`bronze.deliveries.Deliveries.check`): the landing listing and one read of the file
ledger filtered by the landing files' paths.

The ledger gets ``--batches`` commits of ``--per-batch`` archived rows (as bronze appends
them); then landing gets more files, and the check is timed ``--repeat`` times for each size of
landing in ``--landing`` (0 first: no read at all).

    python bench/deliveries_check.py [--batches 50] [--per-batch 20] [--landing 0,20,200]

The last line is one JSON object with the median seconds of the check per landing size.
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
from bronze.deliveries import Deliveries
from bronze.job import BronzeJob
from bronze.ledger import FileStatus, ledger_frame
from framework.delta import append
from framework.job import RunContext


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--per-batch", type=int, default=20)
    parser.add_argument("--landing", default="0,20,200")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    lake = BenchLakehouse("deliveries")
    lake.write("tables/bronze/orders.yaml", {
        "description": "bench orders",
        "source": {"path": "landing/orders", "format": "json", "schema": "id BIGINT"}})
    spark = lake.spark
    table = lake.project().table("orders")
    job = BronzeJob(spark, table, RunContext())
    job.prepare()  # the tables, and a first check of an empty landing
    ledger = table.companion_location("files")
    now = datetime.now()
    for batch in range(args.batches):
        rows = [{"path": f"{lake.root}/landing/orders/old-{batch}-{i}.json", "size": 10,
                 "modification_time": now, "batch_id": batch, "rows": 1, "good_rows": 1,
                 "quarantined_rows": 0, "status": FileStatus.ARCHIVED.value, "error": None,
                 "location": None, "ingested_at": now, "updated_at": now}
                for i in range(args.per_batch)]
        append(ledger_frame(spark, rows), ledger, "bench", batch)
    landing = lake.root / "landing" / "orders"
    landing.mkdir(parents=True, exist_ok=True)
    seconds: dict[int, list[float]] = {}
    for size in (int(n) for n in args.landing.split(",")):
        for i in range(len(list(landing.iterdir())), size):
            (landing / f"new-{i:06d}.json").write_text('{"id": 1}\n')
        runs = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            Deliveries.at_start(spark, job.files, table, ledger=ledger, replayable=range(0),
                                log=job.log)
            runs.append(time.perf_counter() - started)
        seconds[size] = runs
        print(f"landing {size} files: " + ", ".join(f"{s:.3f}s" for s in runs), flush=True)
    spark.stop()
    shutil.rmtree(lake.work, ignore_errors=True)
    print(json.dumps({
        "benchmark": "deliveries_check",
        "ledger_rows": args.batches * args.per_batch,
        "ledger_commits": args.batches,
        "cores": os.cpu_count(),
        "seconds": {str(n): round(statistics.median(s), 3) for n, s in seconds.items()},
        "seconds_per_check": {str(n): [round(x, 3) for x in s] for n, s in seconds.items()},
    }))


if __name__ == "__main__":
    main()
