"""Bronze: exactly-once ingestion, nothing lost, the ledger and the landing zone drained."""

from __future__ import annotations

import bz2
import gzip
import json
import os
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze.filebatch import FileBatchWriter, FileSource, LandingFiles
from bronze.job import BronzeJob
from bronze.reconcile import Reconciler
from framework.checkpoint import last_committed_batch, last_reconciled_batch
from framework.errors import StorageError
from framework.job import RunContext, RunStatus, TableRunSummary
from framework.storage.hadoop import HadoopStorage
from tests.support import (
    REPO,
    Lakehouse,
    archived_files,
    bronze_spec,
    files_under,
    medallion_cmd,
    order,
    write_json_lines,
    write_order_files,
)


def run_bronze(spark: SparkSession, lakehouse: Lakehouse, name: str = "orders") -> TableRunSummary:
    table = lakehouse.project().table(name)
    summary = BronzeJob(spark, table, RunContext()).run()
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    return summary


def test_available_now_ingests_every_file_exactly_once(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(max_files_per_trigger=2))
    landing = lakehouse.path("landing", "orders")
    ids = write_order_files(landing, files=5, per_file=20)

    first = run_bronze(spark, lakehouse)
    table = lakehouse.project().table("orders").full_name
    got = spark.table(table)
    assert first.batches == 3  # 5 files, at most 2 per batch
    assert first.rows_out == 100 and first.counts["records_read"] == 100
    expected = spark.createDataFrame([(i,) for i in ids], "order_id STRING")
    assert_df_equality(got.select("order_id"), expected, ignore_row_order=True)

    second = run_bronze(spark, lakehouse)
    assert second.rows_out == 0 and second.counts["files"] == 0
    assert spark.table(table).count() == 100

    later = write_order_files(landing, files=2, per_file=10, start=1000, prefix="late")
    third = run_bronze(spark, lakehouse)
    assert third.rows_out == 20
    expected = spark.createDataFrame([(i,) for i in ids + later], "order_id STRING")
    assert_df_equality(spark.table(table).select("order_id"), expected, ignore_row_order=True)


def test_ingestion_metadata_is_recorded(spark: SparkSession, lakehouse: Lakehouse) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    write_order_files(lakehouse.path("landing", "orders"), files=2, per_file=3)
    run_bronze(spark, lakehouse)
    rows = spark.table(lakehouse.project().table("orders").full_name).collect()
    assert {r["_source_file"].rsplit("/", 1)[-1] for r in rows} == {
        "part-00000.json", "part-00001.json"
    }
    assert all(r["_batch_id"] == 0 for r in rows)
    assert all(r["_ingested_at"] is not None and r["_file_modification_time"] is not None
               for r in rows)
    assert all(r["_file_size"] > 0 for r in rows)


def test_source_file_names_a_file_as_the_ledger_does(spark: SparkSession,
                                                     lakehouse: Lakehouse) -> None:
    """A name holding '#', '%', '+', a space or non-ASCII letters: ``_source_file`` holds it as
    written, as the ledger's ``path`` does (not URL-encoded), so the two join."""
    lakehouse.add_table("bronze", "orders", bronze_spec(clean_source="off"))
    landing = lakehouse.path("landing", "orders")
    names = ["a#1.json", "b%23.json", "c+d.json", "e f.json", "commandé.json"]
    for i, name in enumerate(names):
        write_json_lines(landing / name, [order(i)])
    run_bronze(spark, lakehouse)
    table = lakehouse.project().table("orders")
    rows = spark.table(table.full_name).select("_source_file").collect()
    ledger = spark.table(table.qualified("files")).select("path").collect()
    expected = sorted(str(landing / n) for n in names)
    assert sorted(r["_source_file"] for r in rows) == expected
    assert sorted(r["path"] for r in ledger) == expected


def test_malformed_records_are_quarantined_and_new_columns_rescued(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    landing = lakehouse.path("landing", "orders")
    write_order_files(landing, files=2, per_file=10)
    malformed = ['{"order_id": "m1", "quantity": ', "not json at all", "[1, 2, 3]",
                 '{"order_id": "m4"} {"order_id": "m5"}']
    # A value of another type is not malformed: the row is kept, the value rescued.
    mistyped = '{"order_id": "m3", "quantity": "seven"}'
    write_json_lines(landing / "mixed.json", [order(500), order(501)], [*malformed, mistyped])
    missing_a_key = {k: v for k, v in order(603, coupon="C3").items() if k != "customer_id"}
    write_json_lines(landing / "new_column.json",
                     [order(600, coupon="SAVE10", channel={"kind": "app"}), order(601),
                      order(602, customer_id=None, coupon="C2"), missing_a_key,
                      order(604, customer_id=None)])

    summary = run_bronze(spark, lakehouse)
    project = lakehouse.project()
    table = project.table("orders")
    quarantine = spark.table(table.qualified("quarantine"))
    assert quarantine.count() == len(malformed)
    generic = "malformed record: does not parse against the schema"
    assert {r["_raw"]: r["_reason"] for r in quarantine.collect()} == {
        malformed[0]: generic, malformed[1]: generic,
        malformed[2]: "malformed record: expected a JSON object, found a JSON array",
        malformed[3]: "malformed record: expected one JSON value, found two or more (JSON "
                      "Lines hold one object per line)"}
    bronze = spark.table(table.full_name)
    assert bronze.count() == 28
    # Keys outside the schema are rescued whether a known key is null or missing beside them,
    # with their JSON types; so is a value that does not fit its column (the column null).
    rescued = bronze.where(F.col("_rescued_data").isNotNull()).collect()
    assert {r["order_id"]: json.loads(r["_rescued_data"]) for r in rescued} == {
        "o0000600": {"coupon": "SAVE10", "channel": {"kind": "app"}},
        "o0000602": {"coupon": "C2"},
        "o0000603": {"coupon": "C3"},
        "m3": {"quantity": "seven"},
    }
    assert bronze.where("order_id = 'm3'").first()["quantity"] is None
    assert summary.counts["records_read"] == 32
    assert summary.counts["quarantined_rows"] == 4 and summary.rows_out == 28


@dataclass(frozen=True)
class DeletingFiles(LandingFiles):
    """The stream's batches, with a file deleted after the source planned the batch, before
    the batch reads it."""

    doomed: tuple[Path, ...] = ()

    def planned(self, writer: FileBatchWriter, batch_id: int
                ) -> tuple[dict[str, int], tuple[str, ...]]:
        planned = super().planned(writer, batch_id)
        for path in self.doomed:
            path.unlink(missing_ok=True)
        return planned


class DeletingJob(BronzeJob):
    """Bronze with a file deleted after the source listed it, before the batch reads it."""

    doomed: ClassVar[list[Path]] = []

    def file_source(self) -> FileSource:
        source = cast(LandingFiles, super().file_source())
        return DeletingFiles(source.known, doomed=tuple(self.doomed))


def test_a_file_that_cannot_be_read_whole_is_quarantined_whole(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    # Between good files: an empty file, a gzip and a bzip2 stream cut short, a file in
    # UTF-16, and a file deleted after it was listed. None of their rows may reach bronze or
    # its quarantine table; each is failed in the ledger with its error and (if it is still
    # there) moved whole to the quarantine folder; the good files are ingested once.
    lakehouse.add_table("bronze", "orders", bronze_spec())
    landing = lakehouse.path("landing", "orders")
    good = write_order_files(landing, files=3, per_file=5)
    lines = "".join(json.dumps(order(i)) + "\n" for i in range(2000, 4000)).encode()
    (landing / "empty.json").write_bytes(b"")
    gz, bz = gzip.compress(lines), bz2.compress(lines)
    (landing / "cut.json.gz").write_bytes(gz[: len(gz) // 2])
    (landing / "cut.json.bz2").write_bytes(bz[: len(bz) // 2])
    (landing / "utf16.json").write_bytes(lines[:400].decode().encode("utf-16"))
    write_json_lines(landing / "deleted.json", [order(5000)])
    DeletingJob.doomed = [landing / "deleted.json"]
    table = lakehouse.project().table("orders")

    summary = DeletingJob(spark, table, RunContext()).run()

    assert summary.status is RunStatus.SUCCEEDED, summary.error
    bronze = spark.table(table.full_name)
    assert sorted(r["order_id"] for r in bronze.collect()) == sorted(good)  # once each
    assert spark.table(table.qualified("quarantine")).count() == 0
    assert summary.counts["records_read"] == 15 and summary.counts["failed_files"] == 5
    ledger = {Path(r["path"]).name: r for r in spark.table(table.qualified("files")).collect()}
    errors = {
        "empty.json": "empty file (0 bytes)",
        "cut.json.gz": "EOFException: Unexpected end of input stream",
        "cut.json.bz2": "unexpected end of stream",
        "utf16.json": "not UTF-8 text",
        "deleted.json": "",
    }
    for name, error in errors.items():
        row = ledger[name]
        assert row["rows"] == 0 and row["good_rows"] == 0, name
        assert error in row["error"], (name, row["error"])
    assert {n: r["status"] for n, r in ledger.items() if n in errors} == {
        **{n: "quarantined" for n in errors if n != "deleted.json"}, "deleted.json": "failed"}
    assert all(ledger[Path(p).name]["status"] == "archived" for p in
               archived_files(lakehouse.path("archive")))
    quarantined = {p.name for p in files_under(lakehouse.path("_quarantine"))}
    assert quarantined == set(errors) - {"deleted.json"}
    # whole: byte for byte what landed
    (cut,) = [p for p in files_under(lakehouse.path("_quarantine")) if p.name == "cut.json.gz"]
    assert cut.read_bytes() == gz[: len(gz) // 2]


def test_a_parquet_file_with_a_corrupt_row_group_is_quarantined_whole(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path
) -> None:
    # Magic bytes and footer intact, one row group's data pages overwritten; and a valid file
    # of 0 rows, which is ingested (there is nothing in it to lose).
    lakehouse.add_table("bronze", "orders", bronze_spec(format="parquet"))
    landing = lakehouse.path("landing", "orders")
    landing.mkdir(parents=True)
    rows = [(f"o{i:07d}", f"c{i % 7}", i % 9 + 1) for i in range(3000)]
    schema = "order_id STRING, customer_id STRING, quantity INT"
    for name, part in (("good-1", rows[:1000]), ("good-2", rows[1000:2000]),
                       ("corrupt", rows[2000:]), ("empty", [])):
        out = tmp_path / name
        spark.createDataFrame(part, schema).withColumn("event_time", F.current_timestamp()) \
            .coalesce(1).write.option("parquet.block.size", 8192).parquet(str(out))
        (written,) = out.glob("*.parquet")
        written.rename(landing / f"{name}.parquet")
    corrupt = landing / "corrupt.parquet"
    data = bytearray(corrupt.read_bytes())
    data[100:2000] = b"\xff" * 1900  # inside the first row group, far from the footer
    corrupt.write_bytes(bytes(data))
    assert data[:4] == data[-4:] == b"PAR1"

    summary = run_bronze(spark, lakehouse)

    table = lakehouse.project().table("orders")
    ids = sorted(r["order_id"] for r in spark.table(table.full_name).collect())
    assert ids == sorted(r[0] for r in rows[:2000])
    ledger = {Path(r["path"]).name: r for r in spark.table(table.qualified("files")).collect()}
    assert ledger["corrupt.parquet"]["status"] == "quarantined"
    assert ledger["corrupt.parquet"]["rows"] == 0 and ledger["corrupt.parquet"]["error"]
    assert ledger["empty.parquet"]["status"] == "archived" and ledger["empty.parquet"]["rows"] == 0
    assert summary.counts["failed_files"] == 1 and summary.rows_out == 2000


def test_landing_drains_into_the_archive_and_the_ledger_tracks_every_file(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(max_files_per_trigger=3))
    landing = lakehouse.path("landing", "orders")
    write_order_files(landing, files=7, per_file=4)
    write_order_files(landing / "2026" / "11", files=2, per_file=4, start=100)  # a subfolder

    summary = run_bronze(spark, lakehouse)
    assert summary.rows_out == 36
    assert files_under(landing) == []
    archived = archived_files(lakehouse.path("archive", "orders"))
    assert len(archived) == 9
    # archived in each batch, once its rows and ledger rows committed: each batch's manifest
    # says when (purge-archive ages files from it)
    manifests = sorted(lakehouse.path("archive", "orders", "_manifests").glob("*.json"))
    listed = [json.loads(m.read_text()) for m in manifests]
    assert [len(m["files"]) for m in listed] == [3, 3, 3]
    assert sorted(f for m in listed for f in m["files"]) == sorted(map(str, archived))
    assert all(abs(m["archived_at_ms"] / 1000 - time.time()) < 300 for m in listed)
    # Spark's archive layout: the archive folder plus the file's full path
    assert all(str(landing).lstrip("/") in str(p) for p in archived)
    table = lakehouse.project().table("orders")
    ledger = spark.table(table.qualified("files"))
    assert ledger.count() == 9
    assert {r["status"] for r in ledger.collect()} == {"archived"}
    assert ledger.agg(F.sum("rows")).first()[0] == 36
    assert summary.counts["files_archived"] == 9


def test_reconcile_repairs_an_interrupted_archive(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    landing = lakehouse.path("landing", "orders")
    write_order_files(landing, files=4, per_file=2)
    run_bronze(spark, lakehouse)
    table = lakehouse.project().table("orders")
    # A crash mid-reconcile: two files were moved back (never archived), all still 'ingested'.
    spark.sql(f"UPDATE {table.qualified('files')} SET status = 'ingested'")
    archived = archived_files(lakehouse.path("archive", "orders"))
    for p in archived[:2]:
        p.rename(landing / p.name)

    counts = BronzeJob(spark, table, RunContext()).reconcile()
    assert counts["files_archived"] == 4
    assert files_under(landing) == []
    statuses = [r["status"] for r in spark.table(table.qualified("files")).collect()]
    assert statuses == ["archived"] * 4


def test_a_batch_stopped_while_archiving_is_finished_by_the_next_run_without_a_read(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    landing = lakehouse.path("landing", "orders")
    write_order_files(landing, files=3, per_file=2)
    table = lakehouse.project().table("orders")

    @dataclass(frozen=True)
    class ArchivingOneThenStopping(LandingFiles):
        """The batches' settling stops after one file is archived."""

        def reconciler(self, *args: Any) -> Reconciler:
            made = super().reconciler(*args)
            settle = made.settle

            def one_then_stop(batch_id: int, rows: list[dict[str, Any]]) -> dict[str, int]:
                settle(batch_id, rows[:1])
                raise StorageError("the driver stopped here")

            made.settle = one_then_stop  # type: ignore[method-assign]
            return made

    class StoppedWhileArchiving(BronzeJob):
        """The driver stops after the batch's ledger commit, with one file archived."""

        def file_source(self) -> FileSource:
            return ArchivingOneThenStopping(cast(LandingFiles, super().file_source()).known)

    stopped = StoppedWhileArchiving(spark, table, RunContext()).run()
    assert stopped.status is RunStatus.FAILED
    assert len(files_under(landing)) == 2 and last_committed_batch(table.checkpoint) == -1
    ledger = spark.read.format("delta").load(table.companion_location("files"))
    assert [r["status"] for r in ledger.collect()] == ["archived"] * 3  # as they will stand

    # The next start replays batch 0 (one of its files gone from landing): its rows and ledger
    # rows are in, so it only finishes the moves; then the new file's batch.
    write_order_files(landing, files=1, per_file=2, start=100, prefix="late")
    summary = run_bronze(spark, lakehouse)
    # the run committed both batches (batch 0's rows were written before the stop, once)
    assert summary.batches == 2 and summary.rows_out == 8
    assert spark.table(table.full_name).count() == 8
    assert spark.table(table.full_name).select("order_id").distinct().count() == 8
    assert summary.counts["files_archived"] == 4  # batch 0's (one already there), batch 1's
    assert files_under(landing) == []
    assert len(archived_files(lakehouse.path("archive", "orders"))) == 4
    got = ledger.groupBy("batch_id", "status").count()
    expected = spark.createDataFrame([(0, "archived", 3), (1, "archived", 1)],
                                     "batch_id BIGINT, status STRING, count BIGINT")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)
    assert last_reconciled_batch(table.checkpoint) == 1


def test_the_ledger_counts_each_files_rows_exactly_as_they_are_written(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(max_files_per_trigger=2))
    landing = lakehouse.path("landing", "orders")
    write_json_lines(landing / "a.json", [order(i) for i in range(40)], ["{broken", "[]"])
    write_json_lines(landing / "b.json", [order(100)], ["nope"])
    write_json_lines(landing / "c.json", [order(200), order(201)])
    for i, name in enumerate(["c.json", "a.json", "b.json"]):  # read in this order
        os.utime(landing / name, (1_700_000_000 + i, 1_700_000_000 + i))
    # Small splits: each task reads a part of a file, so a file's rows come from several tasks.
    previous = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "1024")
    try:
        assert spark.read.text(str(landing / "a.json")).rdd.getNumPartitions() > 1
        job = BronzeJob(spark, lakehouse.project().table("orders"), RunContext())
        summary = job.run()
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", previous)

    assert summary.status is RunStatus.SUCCEEDED, summary.error
    table = lakehouse.project().table("orders")
    ledger = spark.read.format("delta").load(table.companion_location("files"))
    got = ledger.select(F.element_at(F.split("path", "/"), -1).alias("file"), "batch_id",
                        "good_rows", "quarantined_rows")
    expected = spark.createDataFrame(
        [("c.json", 0, 2, 0), ("a.json", 0, 40, 2), ("b.json", 1, 1, 1)],
        "file STRING, batch_id BIGINT, good_rows BIGINT, quarantined_rows BIGINT")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_a_file_logged_by_a_stopped_query_is_ingested_with_the_next_batch(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(max_files_per_trigger=1))
    landing = lakehouse.path("landing", "orders")
    write_json_lines(landing / "a.json", [order(1), order(2)])
    run_bronze(spark, lakehouse)
    table = lakehouse.project().table("orders")
    write_json_lines(landing / "b.json", [order(3)])
    write_json_lines(landing / "c.json", [order(4), order(5)])
    os.utime(landing / "b.json", (1_700_000_000, 1_700_000_000))
    # A query stopped after its source logged the next file (b) and before the offset log
    # recorded the batch leaves a source log entry no batch has read; Spark's next batch reads
    # it together with the file it picks next (c).
    entry = {"path": (landing / "b.json").as_uri(), "timestamp": 1_700_000_000_000, "batchId": 1}
    (Path(table.checkpoint) / "sources" / "0" / "1").write_text("v1\n" + json.dumps(entry))

    summary = run_bronze(spark, lakehouse)
    assert summary.counts["records_read"] == 3
    bronze = spark.read.format("delta").load(table.location)
    assert sorted(r["order_id"] for r in bronze.collect()) == [order(i)["order_id"]
                                                               for i in range(1, 6)]
    ledger = spark.read.format("delta").load(table.companion_location("files"))
    got = ledger.select(F.element_at(F.split("path", "/"), -1).alias("file"), "batch_id",
                        "rows", "status")
    expected = spark.createDataFrame(
        [("a.json", 0, 2, "archived"), ("b.json", 1, 1, "archived"),
         ("c.json", 1, 2, "archived")], "file STRING, batch_id BIGINT, rows BIGINT, status STRING")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)
    assert files_under(landing) == []


def test_a_start_after_a_kill_during_the_first_offset_write_ingests_every_file(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    ids = write_order_files(lakehouse.path("landing", "orders"), files=2, per_file=3)
    table = lakehouse.project().table("orders")
    # What a driver killed while Spark wrote the first offset file leaves: the file under
    # Spark's hidden temporary name (and its checksum), never renamed to offsets/0. Spark then
    # refuses every start of the query (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY).
    offsets = Path(table.checkpoint) / "offsets"
    offsets.mkdir(parents=True)
    temporary = offsets / ".0.c08b5493-a9cd-4eff-9759-a42d4082fc7c.tmp"
    temporary.write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n'
                         '{"logOffset":0}')
    checksum = offsets / "..0.c08b5493-a9cd-4eff-9759-a42d4082fc7c.tmp.crc"
    checksum.write_bytes(b"crc\x00\x00\x02\x00")

    summary = run_bronze(spark, lakehouse)
    assert summary.counts["records_read"] == 6
    got = spark.read.format("delta").load(table.location).select("order_id")
    expected = spark.createDataFrame([(i,) for i in ids], "order_id STRING")
    assert_df_equality(got, expected, ignore_row_order=True)
    assert not temporary.exists() and not checksum.exists()
    assert last_committed_batch(table.checkpoint) == 0


def test_a_checkpoint_holding_files_of_another_kind_is_refused_by_spark_not_cleared(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    write_order_files(lakehouse.path("landing", "orders"), files=1, per_file=3)
    table = lakehouse.project().table("orders")
    commits = Path(table.checkpoint) / "commits"
    commits.mkdir(parents=True)
    stray = commits / "notes.txt"  # not Spark's: only its owner can say what it is
    stray.write_text("kept")

    summary = BronzeJob(spark, table, RunContext()).run()
    assert stray.read_text() == "kept"
    condition = "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"
    jvm: Any = spark._jvm  # (Spark's own list of its error conditions)
    if not jvm.org.apache.spark.SparkThrowableHelper.isValidErrorClass(condition):
        # a Spark without the check (4.0) starts the query, and the file is still left alone
        assert summary.status is RunStatus.SUCCEEDED, summary.error
        return
    assert summary.status is RunStatus.FAILED
    assert condition in (summary.error or "")
    assert spark.read.format("delta").load(table.location).count() == 0


@pytest.mark.parametrize("change_feed", [True, False], ids=["own_commits", "whole_tables"])
def test_a_batch_committed_to_bronze_just_before_a_crash_is_replayed_once(
    spark: SparkSession, lakehouse: Lakehouse, change_feed: bool
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(clean_source="off"))
    ids = write_order_files(lakehouse.path("landing", "orders"), files=3, per_file=4)
    table = lakehouse.project().table("orders")
    ledger = table.companion_location("files")
    job = BronzeJob(spark, table, RunContext())
    job.prepare()
    assert set(job.change_feed.values()) == {True}  # tables made now record their feed
    if not change_feed:  # as tables made before the feed was recorded: read back whole
        for location in (table.location, table.companion_location("quarantine")):
            spark.sql(f"ALTER TABLE delta.`{location}` "
                      "SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'false')")
    # The batch fails right after its bronze commit (the ledger refuses its rows), leaving what
    # a driver killed at that moment leaves: bronze written, the batch planned but not
    # committed in the checkpoint, no ledger commit of it.
    spark.sql(f"ALTER TABLE delta.`{ledger}` ADD CONSTRAINT crash CHECK (batch_id <> 0)")
    failed = BronzeJob(spark, table, RunContext()).run()
    assert failed.status is RunStatus.FAILED
    assert spark.read.format("delta").load(table.location).count() == len(ids)
    assert last_committed_batch(table.checkpoint) == -1
    spark.sql(f"ALTER TABLE delta.`{ledger}` DROP CONSTRAINT crash")

    job = BronzeJob(spark, table, RunContext())
    summary = job.run()
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    assert summary.counts["records_read"] == 12 and summary.counts["quarantined_rows"] == 0
    # The replayed batch's rows per file are read back from what it committed.
    assert set(job.change_feed.values()) == {change_feed}
    got = spark.read.format("delta").load(table.location).select("order_id")
    expected = spark.createDataFrame([(i,) for i in ids], "order_id STRING")
    assert_df_equality(got, expected, ignore_row_order=True)  # none lost, none twice
    rows = spark.read.format("delta").load(ledger).where(F.col("batch_id") == 0)
    assert sorted((r["rows"], r["status"]) for r in rows.collect()) == [(4, "ingested")] * 3


def test_delete_mode_removes_ingested_files(spark: SparkSession, lakehouse: Lakehouse) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(clean_source="delete"))
    landing = lakehouse.path("landing", "orders")
    write_order_files(landing, files=3, per_file=2)
    summary = run_bronze(spark, lakehouse)
    assert files_under(landing) == [] and summary.counts["files_deleted"] == 3
    assert not lakehouse.path("archive").exists()


def test_csv_feed_quarantines_rows_with_another_number_of_fields(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    spec = bronze_spec(format="csv", path="landing/customers",
                       schema="customer_id STRING, name STRING, visits INT")
    lakehouse.add_table("bronze", "customers", spec)
    landing = lakehouse.path("landing", "customers")
    landing.mkdir(parents=True)
    (landing / "a.csv").write_text(
        "customer_id,name,visits\nc1,Ann,3\nc2,Bob,x\nc3,Cy,4,extra\nc4,Di,5\n"
    )
    summary = run_bronze(spark, lakehouse, "customers")
    table = lakehouse.project().table("customers")
    good = spark.table(table.full_name).select("customer_id", "name", "visits",
                                               "_rescued_data")
    # A value that does not fit its type is rescued (the row kept); a row with a field too
    # many is malformed.
    expected = spark.createDataFrame([("c1", "Ann", 3, None), ("c2", "Bob", None,
                                                                '{"visits":"x"}'),
                                      ("c4", "Di", 5, None)], good.schema)
    assert_df_equality(good, expected, ignore_row_order=True, ignore_nullable=True)
    raws = sorted(r["_raw"] for r in spark.table(table.qualified("quarantine")).collect())
    assert raws == ["c3,Cy,4,extra"]
    assert summary.counts["records_read"] == 4


def test_parquet_feed(spark: SparkSession, lakehouse: Lakehouse) -> None:
    lakehouse.add_table("bronze", "events", bronze_spec(
        format="parquet", path="landing/events", schema="id BIGINT, name STRING"))
    landing = lakehouse.path("landing", "events")
    spark.range(30).selectExpr("id", "concat('n', id) AS name").coalesce(3) \
        .write.parquet(str(landing / "drop1"))
    for junk in landing.rglob("*"):
        if junk.is_file() and not junk.name.endswith(".parquet"):
            junk.unlink()
    (landing / "broken.parquet").write_bytes(b"PAR1 not really")
    summary = run_bronze(spark, lakehouse, "events")
    table = lakehouse.project().table("events")
    assert spark.table(table.full_name).count() == 30
    ledger = {Path(r["path"]).name: r["status"]
              for r in spark.table(table.qualified("files")).collect()}
    assert ledger["broken.parquet"] == "quarantined"
    assert summary.counts["failed_files"] == 1


def test_a_schema_is_inferred_once_into_the_spec_never_at_run_time(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    from bronze.schema import infer_schema, write_schema

    spec = bronze_spec()
    del spec["source"]["schema"]
    spec_file = lakehouse.add_table("bronze", "orders", spec)
    spec_file.write_text("# orders feed\n" + spec_file.read_text())
    write_order_files(lakehouse.path("landing", "orders"), files=2, per_file=3)

    table = lakehouse.project().table("orders")
    failed = BronzeJob(spark, table, RunContext()).run()
    assert failed.status is RunStatus.FAILED
    assert "medallion infer-schema orders" in (failed.error or "")

    write_schema(table, infer_schema(spark, table))
    assert spec_file.read_text().startswith("# orders feed\n")  # comments kept
    inferred = lakehouse.project().table("orders").spec.source.schema_  # type: ignore[attr-defined]
    assert "`order_id` STRING" in inferred and "`quantity` BIGINT" in inferred
    assert "`event_time` TIMESTAMP" in inferred  # as bronze reads it (and `medallion new`)
    assert run_bronze(spark, lakehouse).rows_out == 6


def test_a_feed_switched_from_clean_source_off_to_archive_archives_the_files_left_in_landing(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(clean_source="off"))
    landing = lakehouse.path("landing", "orders")
    write_order_files(landing, files=2, per_file=2)

    class CountingReconciler(Reconciler):
        def _unsettled(self, *args: Any, **kwargs: Any) -> dict[int, list[Any]]:
            LedgerReads.reads += 1
            return super()._unsettled(*args, **kwargs)

    class LedgerReads(BronzeJob):
        reads = 0

        def reconciler(self) -> Reconciler:
            made = super().reconciler()
            made.__class__ = CountingReconciler
            return made

    def run(clean_source: str) -> TableRunSummary:
        lakehouse.add_table("bronze", "orders", bronze_spec(clean_source=clean_source))
        summary = LedgerReads(spark, lakehouse.project().table("orders"), RunContext()).run()
        assert summary.status is RunStatus.SUCCEEDED, summary.error
        return summary

    run("off")
    write_order_files(landing, files=1, per_file=2, start=100, prefix="late")
    run("off")  # its files and the first run's stay; the mark spares reading the ledger
    assert LedgerReads.reads == 0 and len(files_under(landing)) == 3
    table = lakehouse.project().table("orders")
    assert last_reconciled_batch(table.checkpoint, failed_only=True) == 1
    assert last_reconciled_batch(table.checkpoint) == -1

    summary = run("archive")  # nothing new: the ledger is read for what off mode left
    assert LedgerReads.reads == 1
    assert summary.counts["files_archived"] == 3 and files_under(landing) == []
    assert last_reconciled_batch(table.checkpoint) == 1


def test_a_late_file_keeping_an_old_modification_time_is_still_ingested(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    # Spark's file source skips, without a word, a new file more than maxFileAge (7 days by
    # default) older than the newest file it has seen; a late delivery copied with its own
    # time (cp -p, land --keep-times) must still be read.
    lakehouse.add_table("bronze", "orders", bronze_spec())
    landing = lakehouse.path("landing", "orders")
    write_order_files(landing, files=1, per_file=5)
    assert run_bronze(spark, lakehouse).rows_out == 5
    late = write_json_lines(landing / "exported-last-month.json", [order(100 + i)
                                                                   for i in range(3)])
    month_ago = time.time() - 30 * 86_400
    os.utime(late, (month_ago, month_ago))
    assert run_bronze(spark, lakehouse).rows_out == 3
    assert spark.table(lakehouse.project().table("orders").full_name).count() == 8


@pytest.mark.slow
def test_a_file_the_driver_may_not_read_is_quarantined_whole(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    # Listed (its folder can be read) but not readable: mode 000, read by a driver without
    # the capabilities that let root read any file (a real permission refusal, as a service
    # account meets it). The run goes on with the other files.
    lakehouse.add_table("bronze", "orders", bronze_spec())
    landing = lakehouse.path("landing", "orders")
    good = write_order_files(landing, files=2, per_file=3)
    locked = write_json_lines(landing / "locked.json", [order(900)])
    locked.chmod(0)
    command = shlex.join([*medallion_cmd(), "run", "bronze", "--log-format", "json"])
    done = subprocess.run(["capsh", "--drop=cap_dac_override,cap_dac_read_search", "--", "-c",
                           command], env=lakehouse.cli_env(), cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    table = lakehouse.project().table("orders")  # (its own catalog: read by location)
    bronze = spark.read.format("delta").load(table.location)
    assert sorted(r["order_id"] for r in bronze.collect()) == sorted(good)
    ledger = {Path(r["path"]).name: r for r in spark.read.format("delta").load(
        table.companion_location("files")).collect()}
    assert ledger["locked.json"]["status"] == "quarantined"
    assert "Permission denied" in ledger["locked.json"]["error"]
    assert ledger["locked.json"]["rows"] == 0
    assert [p.name for p in files_under(lakehouse.path("_quarantine"))] == ["locked.json"]


def test_a_run_through_the_hadoop_file_system_keeps_the_same_guarantees(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    # On a local disk a run moves files through os; on any other store through the session's
    # Hadoop file system. The same run with the Hadoop store, on the local disk.
    lakehouse.add_table("bronze", "orders", bronze_spec(max_files_per_trigger=2))
    landing = lakehouse.path("landing", "orders")
    good = write_order_files(landing, files=3, per_file=4)
    blob = gzip.compress(b"".join((json.dumps(order(i)) + "\n").encode() for i in range(500)))
    (landing / "cut.json.gz").write_bytes(blob[: len(blob) // 2])
    table = lakehouse.project().table("orders")
    job = BronzeJob(spark, table, RunContext())
    job.files = HadoopStorage(spark)

    summary = job.run()

    assert summary.status is RunStatus.SUCCEEDED, summary.error
    assert sorted(r["order_id"] for r in spark.table(table.full_name).collect()) == sorted(good)
    assert files_under(landing) == []
    assert [p.name for p in files_under(lakehouse.path("_quarantine"))] == ["cut.json.gz"]
    archived = archived_files(lakehouse.path("archive"))
    assert len(archived) == 3 and not list(lakehouse.path("archive").rglob("*.crc"))
    statuses = {r["status"] for r in spark.table(table.qualified("files")).collect()}
    assert statuses == {"archived", "quarantined"}
    assert summary.counts["files_archived"] == 3 and summary.counts["files_quarantined"] == 1


def test_a_read_stopped_by_a_cancelled_job_blames_no_file(
        spark: SparkSession, tmp_path: Path) -> None:
    """A batch whose jobs are cancelled (its query stopped, a second stop signal) fails, and
    runs again whole at the next start: the search for an unreadable file does not blame the
    file the cancelled read was reading."""
    import threading

    from bronze.checks import find_failing, stopped

    good = tmp_path / "good.json"
    write_json_lines(good, [{"order_id": "o1"}])
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(b'{"order_id": "o2"}\n' * 1000)[:60])

    errors: list[BaseException] = []

    def long_job() -> None:
        spark.sparkContext.setJobGroup("to-cancel", "a read stopped halfway")
        try:
            spark.range(0, 10**12, numPartitions=2).selectExpr("sum(id)").collect()
        except Exception as exc:
            errors.append(exc)

    worker = threading.Thread(target=long_job)
    worker.start()
    deadline = time.monotonic() + 120
    while not spark.sparkContext.statusTracker().getJobIdsForGroup("to-cancel"):
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.1)
    spark.sparkContext.cancelJobGroup("to-cancel")
    worker.join(timeout=120)
    (cancelled,) = errors
    assert stopped(cancelled)

    def probe(files: list[str]) -> None:  # a read of the good file, cancelled as it ran
        spark.read.text(files).count()
        raise cancelled

    with pytest.raises(type(cancelled)):
        find_failing([str(good)], probe, spark)
    # a file that cannot be read is still found, with Spark's reason
    failing = find_failing([str(good), str(cut)],
                           lambda files: spark.read.text(files).foreach(lambda _: None), spark)
    assert list(failing) == [str(cut)] and not stopped(Exception(failing[str(cut)]))
