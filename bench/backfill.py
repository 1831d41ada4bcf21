"""A backfill of ``--files`` historical files while the landing feed keeps receiving files
(``medallion backfill``, :mod:`bronze.backfill`), checked file by file, and timed beside the
same files ingested through landing by a plain run.

Lake A: the landing feed runs once (``--landing`` files); some of them are also in the
historical folder (the same name and bytes). Then the backfill of the folder runs while a
thread keeps landing new files, some of them copies of historical files; then a run ingests
landing. Checked: every order once in bronze, each historical file in the ledger once (as a
backfill's, or as landing's for the shared ones), the folder untouched (names, sizes, times),
landing empty and every landing file archived. Lake B: the same historical files put in
landing and ingested by ``run bronze``, in batches of the same size.

    python bench/backfill.py [--files 2000] [--per-file 20] [--landing 50] [--max-files 500]

The last line is one JSON object; ``ratio`` is B's seconds over the backfill's (1.0: a
backfill costs what ingesting the files through landing costs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from bench.common import BenchLakehouse
from framework.cli import main as medallion

SCHEMA = "order_id STRING, customer_id STRING, quantity INT, event_time TIMESTAMP"
DAY = 86_400


def orders_file(path: Path, first: int, count: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")  # whole or not at all, as a store would
    with tmp.open("w") as fh:
        for i in range(first, first + count):
            fh.write(json.dumps({"order_id": f"o{i:08d}", "customer_id": f"c{i % 97}",
                                 "quantity": i % 9 + 1,
                                 "event_time": "2024-01-01T00:00:00Z"}) + "\n")
    os.replace(tmp, path)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def spec(max_files: int) -> dict[str, Any]:
    return {"description": "bench orders",
            "source": {"path": "landing/orders", "format": "json", "schema": SCHEMA,
                       "clean_source": "archive", "max_files_per_trigger": max_files,
                       "recursive_file_lookup": True}}


def run(lake: BenchLakehouse, *args: str) -> float:
    began = time.perf_counter()
    code = medallion([*args, "--conf", str(lake.conf), "--env", "bench",
                      "--log-format", "json", "--log-level", "warning"])
    if code != 0:
        raise SystemExit(f"medallion {' '.join(args)} exited {code}")
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--per-file", type=int, default=20)
    parser.add_argument("--landing", type=int, default=50)
    parser.add_argument("--max-files", type=int, default=500)
    args = parser.parse_args()
    n, per = args.files, args.per_file

    lake = BenchLakehouse("backfill", shuffle_partitions=2)
    lake.write("tables/bronze/orders.yaml", spec(args.max_files))
    landing = lake.root / "landing" / "orders"
    hist = lake.work / "history"
    # The folder: years of files, a day apart; orders 0 .. n*per
    start = time.time() - n * DAY
    for f in range(n):
        path = hist / f"{2020 + f * 5 // n}" / f"day-{f:05d}.json"
        orders_file(path, f * per, per)
        os.utime(path, (start + f * DAY, start + f * DAY))
    # The landing feed's first files; the first fifth of them the historical folder has too
    base = n * per
    shared = max(1, args.landing // 5)
    for f in range(args.landing):
        orders_file(landing / f"live-{f:05d}.json", base + f * per, per)
    run(lake, "run", "bronze")
    for f in range(shared):
        shutil.copy2(next((lake.root / "archive").rglob(f"live-{f:05d}.json")),
                     hist / f"live-{f:05d}.json")
    before = snapshot(hist)

    # The backfill, while files keep landing: new ones, and copies of historical files
    landed: list[str] = []
    done = threading.Event()

    def keep_landing() -> None:
        i = 0
        while not done.is_set():
            if i % 4 == 3:  # a historical file delivered to landing too (same path and bytes)
                name = f"day-{i:05d}.json"
                source = hist / f"{2020 + i * 5 // n}" / name
                target = landing / source.parent.name / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target.with_name(f".{name}.tmp"))
                os.replace(target.with_name(f".{name}.tmp"), target)
            else:
                orders_file(landing / f"late-{i:05d}.json", base + (args.landing + i) * per, per)
            landed.append(str(i))
            i += 1
            done.wait(0.25)

    feeder = threading.Thread(target=keep_landing, daemon=True)
    feeder.start()
    backfill_s = run(lake, "backfill", "orders", "--from", str(hist),
                     "--max-files", str(args.max_files))
    done.set()
    feeder.join()
    run(lake, "run", "bronze")  # the landing files that came meanwhile
    spark = lake.spark
    tables = lake.root / "tables" / "bronze"
    bronze = spark.read.format("delta").load(str(tables / "orders"))
    ledger = spark.read.format("delta").load(str(tables / "orders_files"))
    late = len(landed)
    copies = sum(1 for i in range(late) if i % 4 == 3)
    want = n * per + args.landing * per + (late - copies) * per
    rows = bronze.count()
    distinct = bronze.select("order_id").distinct().count()
    backfilled = ledger.where("ingestion = 'backfill' AND batch_id >= 0").count()
    settled = ledger.where("ingestion = 'backfill' AND batch_id = -1").count()
    untouched = snapshot(hist) == before
    landing_left = [p for p in landing.rglob("*") if p.is_file()]
    ok = rows == distinct == want and backfilled == n and settled == copies and untouched \
        and not landing_left

    # Lake B: the same historical files through landing
    plain = BenchLakehouse("backfill-plain", shuffle_partitions=2)
    env = yaml.safe_load((plain.conf / "environments" / "bench.yaml").read_text())
    plain.write("environments/bench.yaml", {**env, "schemas": {
        layer: f"{layer}_plain" for layer in ("bronze", "silver", "gold", "ops")}})
    plain.write("tables/bronze/orders.yaml", spec(args.max_files))
    plain_landing = plain.root / "landing" / "orders"
    for path in sorted(hist.rglob("day-*.json")):
        target = plain_landing / path.relative_to(hist)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    plain_s = run(plain, "run", "bronze")
    plain_rows = spark.read.format("delta").load(
        str(plain.root / "tables" / "bronze" / "orders")).count()
    ok = ok and plain_rows == n * per

    print(f"historical files {n} ({n * per} orders), landing {args.landing} + {late} during "
          f"the backfill ({copies} of them historical files)")
    print(f"backfill {backfill_s:.1f} s; the same files through landing {plain_s:.1f} s")
    print(f"bronze rows {rows}, distinct orders {distinct}, expected {want}; backfilled "
          f"files {backfilled}; landing copies settled without a read {settled}; folder "
          f"untouched {untouched}; files left in landing {len(landing_left)}")
    print(json.dumps({"files": n, "orders": n * per, "landed_during": late,
                      "landing_copies": copies, "bronze_rows": rows, "distinct": distinct,
                      "expected": want, "backfilled_files": backfilled,
                      "settled_copies": settled, "folder_untouched": untouched,
                      "ok": ok, "backfill_s": round(backfill_s, 1),
                      "landing_s": round(plain_s, 1),
                      "ratio": round(plain_s / backfill_s, 3) if ok else 0.0}))
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
