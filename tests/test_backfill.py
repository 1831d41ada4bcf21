"""``medallion backfill``: a historical folder ingested in place, exactly once, beside the
landing feed: a slice by modification time, then the rest; files the landing feed ingested
left out; a landing file a backfill ingested archived by the next run without a second read;
the folder never touched."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze.ledger import BatchKey, Origin, stored_in
from tests.support import (
    Lakehouse,
    archived_files,
    bronze_spec,
    cli,
    files_under,
    order,
    write_json_lines,
    write_order_files,
)


def at(year: int) -> float:
    return datetime(year, 6, 1, tzinfo=UTC).timestamp()


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in files_under(folder)}


def test_a_backfill_ingests_a_folder_in_place_once_beside_the_landing_feed(
    spark: SparkSession, tmp_path: Path
) -> None:
    lake = Lakehouse(tmp_path)
    lake.add_table("bronze", "orders", bronze_spec())
    landing = lake.path("landing", "orders")
    write_order_files(landing, 1, 10, start=100)  # part-00100.json: orders 100..109
    assert cli(lake, "run", "bronze") == 0

    hist = tmp_path / "history"
    write_order_files(hist / "2024", 3, 10, start=0, prefix="h")  # orders 0..29
    write_order_files(hist / "2025", 3, 10, start=30, prefix="h")  # orders 30..59
    for path in files_under(hist / "2024"):
        os.utime(path, (at(2024), at(2024)))
    for path in files_under(hist / "2025"):
        os.utime(path, (at(2025), at(2025)))
    # the landing feed's file, the same bytes under the same name: ingested once
    shutil.copyfile(archived_files(lake.path("archive"))[0], hist / "part-00100.json")
    write_json_lines(hist / "part-00200.json", [order(i) for i in range(200, 210)])
    (hist / "empty.json").write_bytes(b"")
    (hist / "_SUCCESS").write_bytes(b"")  # a hidden name: never listed
    before = snapshot(hist)

    bronze = lake.path("tables", "bronze", "orders")

    def orders() -> list[str]:
        rows = spark.read.format("delta").load(str(bronze)).select("order_id").collect()
        return sorted(r["order_id"] for r in rows)

    def ledger() -> list[dict[str, object]]:
        rows = spark.read.format("delta").load(str(lake.path("tables", "bronze", "orders_files")))
        return [r.asDict() for r in rows.collect()]

    # A slice: the files modified before 2025 only
    assert cli(lake, "backfill", "orders", "--from", str(hist), "--until", "2025-01-01",
               "--max-files", "2") == 0
    assert orders() == sorted([order(i)["order_id"] for i in [*range(100, 110), *range(30)]])
    # The rest: the slice's files and the landing feed's left out, the others read (the
    # folder spelt relative to where the command runs: the same folder, the same keys)
    assert cli(lake, "backfill", "orders", "--from", os.path.relpath(hist),
               "--max-files", "2") == 0
    want = sorted(order(i)["order_id"] for i in [*range(60), *range(100, 110),
                                                  *range(200, 210)])
    assert orders() == want
    # Again, spelt absolute: nothing is read twice
    assert cli(lake, "backfill", "orders", "--from", str(hist)) == 0
    assert orders() == want
    assert snapshot(hist) == before  # nothing in the folder moved or changed

    rows = ledger()
    backfilled = [r for r in rows if r["ingestion"] == "backfill"]
    assert sorted(str(r["file_key"]) for r in backfilled) == [
        "2024/h-00000.json", "2024/h-00001.json", "2024/h-00002.json", "2025/h-00030.json",
        "2025/h-00031.json", "2025/h-00032.json", "empty.json", "part-00200.json"]
    assert all(BatchKey.of(int(str(r["batch_id"]))).origin is Origin.BACKFILL for r in backfilled)
    failed = [r for r in backfilled if r["status"] == "failed"]
    assert [r["file_key"] for r in failed] == ["empty.json"]
    assert failed[0]["location"] == str(hist / "empty.json")  # left where it is
    assert sum(int(str(r["rows"])) for r in backfilled) == 70

    # The landing feed goes on: a file a backfill ingested lands, and a new one
    shutil.copyfile(hist / "part-00200.json", landing / "part-00200.json")
    write_order_files(landing, 1, 10, start=300)
    assert cli(lake, "run", "bronze") == 0
    assert orders() == sorted([*want, *(order(i)["order_id"] for i in range(300, 310))])
    assert files_under(landing) == []
    assert sorted(p.name for p in archived_files(lake.path("archive"))) == [
        "part-00100.json", "part-00200.json", "part-00300.json"]
    settled = [r for r in ledger() if r["path"] == str(landing / "part-00200.json")]
    assert [(r["batch_id"], r["status"], r["rows"], r["ingestion"]) for r in settled] == [
        (-1, "archived", 0, "backfill")]
    assert "ingested by a backfill" in str(settled[0]["notes"])
    # archived now, as the archive's manifests say (purge-archive ages it from now)
    listed = [f for m in lake.path("archive", "orders", "_manifests").glob("*.json")
              for f in json.loads(m.read_text())["files"]]
    assert settled[0]["location"] in listed
    # every order once
    df = spark.read.format("delta").load(str(bronze))
    assert df.groupBy("order_id").count().where(F.col("count") > 1).count() == 0


def test_a_backfill_refuses_the_feeds_own_folders(tmp_path: Path) -> None:
    lake = Lakehouse(tmp_path)
    lake.add_table("bronze", "orders", bronze_spec())
    assert cli(lake, "backfill", "orders", "--from", str(lake.path("archive"))) == 2
    assert cli(lake, "backfill", "orders", "--from", str(tmp_path / "h"), "--since",
               "2026-01-02", "--until", "2026-01-01") == 2


def test_a_batch_key_names_its_origin_and_the_lake_stores_it_as_before(
        spark: SparkSession) -> None:
    """A bronze batch is keyed by its origin and its query's number; the lake keeps the
    numbers it kept before the key (a backfill's from 10**12, the unread files' -1), so
    a ledger written by an older version reads the same."""
    keys = [BatchKey(Origin.LANDING, 0), BatchKey(Origin.LANDING, 7),
            BatchKey(Origin.BACKFILL, 0), BatchKey(Origin.BACKFILL, 7), BatchKey(Origin.UNREAD)]
    assert [k.stored for k in keys] == [0, 7, 10**12, 10**12 + 7, -1]
    assert [BatchKey.of(k.stored) for k in keys] == keys
    assert [str(k) for k in keys[1::2]] == ["landing batch 7", "backfill batch 7"]

    stored = spark.createDataFrame([(k.stored,) for k in keys], "batch_id long")
    by_origin = {o: sorted(r.batch_id for r in stored.where(stored_in(F.col("batch_id"), o))
                           .collect()) for o in Origin}
    assert by_origin == {Origin.LANDING: [0, 7], Origin.BACKFILL: [10**12, 10**12 + 7],
                         Origin.UNREAD: [-1]}
