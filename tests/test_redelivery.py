"""Files delivered again: a delivery is a file's bytes, not its name (decision 17), and the file
ledger keeps bronze from reading a file twice when its checkpoint is reset."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from structlog.testing import capture_logs

from bronze.deliveries import LandingPattern, delivery_name
from bronze.job import BronzeJob
from bronze.spec import BronzeTableSpec
from framework.config.model import Table
from framework.job import RunContext, RunStatus, TableRunSummary
from tests.support import (
    Lakehouse,
    archived_files,
    bronze_spec,
    files_under,
    order,
    write_json_lines,
    write_order_files,
)

# 2026-11-25T01:30:00.123Z: the time given to a second delivery, and so its new name.
REDELIVERED_MS = int(datetime(2026, 11, 25, 1, 30, tzinfo=UTC).timestamp()) * 1000 + 123
REDELIVERED_NAME = "e1.delivery-20261125T013000123Z.json"
SKIP_REASON = "delivered again under a name already ingested (batch 0); redelivery: skip"


def run_bronze(spark: SparkSession, lakehouse: Lakehouse) -> TableRunSummary:
    summary = BronzeJob(spark, orders(lakehouse), RunContext()).run()
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    return summary


def orders(lakehouse: Lakehouse) -> Table:
    return lakehouse.project().table("orders")


def order_ids(spark: SparkSession, lakehouse: Lakehouse) -> Any:
    return spark.read.format("delta").load(orders(lakehouse).location).select("order_id")


def ids_frame(spark: SparkSession, ids: list[int]) -> Any:
    return spark.createDataFrame([(order(i)["order_id"],) for i in ids], "order_id STRING")


def ledger(spark: SparkSession, lakehouse: Lakehouse) -> list[tuple[Any, ...]]:
    """(file name, batch, rows, status, error) per ledger row, in order."""
    rows = spark.read.format("delta").load(orders(lakehouse).companion_location("files"))
    return sorted((Path(r["path"]).name, r["batch_id"], r["rows"], r["status"], r["error"])
                  for r in rows.collect())


def land_again(path: Path, ids: list[int]) -> bytes:
    """Other bytes under the same name, with the time :data:`REDELIVERED_MS`."""
    write_json_lines(path, [order(i) for i in ids])
    os.utime(path, ns=(REDELIVERED_MS * 1_000_000, REDELIVERED_MS * 1_000_000))
    return path.read_bytes()


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name]


@pytest.mark.parametrize("store", ["local", "hadoop"])
def test_a_file_landed_again_with_other_bytes_is_a_new_delivery_ingested_once(
    spark: SparkSession, lakehouse: Lakehouse, store: str
) -> None:
    if store == "hadoop":  # the Hadoop file system, under a scheme of its own (faulty://)
        lakehouse.write_env(root=f"faulty://{lakehouse.root}",
                            metastore=str(lakehouse.base / "metastore_db"))
    lakehouse.add_table("bronze", "orders", bronze_spec())
    landing = lakehouse.path("landing", "orders")
    first = write_json_lines(landing / "e1.json", [order(i) for i in range(3)]).read_bytes()
    run_bronze(spark, lakehouse)
    second = land_again(landing / "e1.json", list(range(100, 105)))

    with capture_logs() as logs:
        summary = run_bronze(spark, lakehouse)

    assert summary.rows_out == 5 and summary.counts["records_read"] == 5
    assert order_ids(spark, lakehouse).count() == 8
    assert_df_equality(order_ids(spark, lakehouse),
                       ids_frame(spark, [*range(3), *range(100, 105)]), ignore_row_order=True)
    assert ledger(spark, lakehouse) == [("e1.delivery-20261125T013000123Z.json", 1, 5,
                                         "archived", None),
                                        ("e1.json", 0, 3, "archived", None)]
    archived = {p.name: p.read_bytes() for p in archived_files(lakehouse.path("archive"))}
    assert archived == {"e1.json": first, REDELIVERED_NAME: second}  # the first kept as it was
    assert files_under(landing) == []
    [renamed] = events(logs, "bronze.file.redelivered")
    assert renamed["log_level"] == "warning" and renamed["earlier_batch"] == 0
    landing_uri = f"faulty://{landing}" if store == "hadoop" else str(landing)
    assert (renamed["path"], renamed["renamed_to"]) == (f"{landing_uri}/e1.json",
                                                        f"{landing_uri}/{REDELIVERED_NAME}")

    assert run_bronze(spark, lakehouse).rows_out == 0  # once
    assert order_ids(spark, lakehouse).count() == 8


def test_the_same_bytes_landed_again_are_not_ingested_again_and_are_reported(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    landing = lakehouse.path("landing", "orders")
    write_json_lines(landing / "e1.json", [order(i) for i in range(3)])
    run_bronze(spark, lakehouse)
    [archived] = archived_files(lakehouse.path("archive"))
    shutil.copy2(archived, landing / "e1.json")  # the same bytes, with their time

    with capture_logs() as logs:
        summary = run_bronze(spark, lakehouse)

    assert summary.rows_out == 0 and summary.counts["records_read"] == 0
    assert_df_equality(order_ids(spark, lakehouse), ids_frame(spark, list(range(3))),
                       ignore_row_order=True)
    assert ledger(spark, lakehouse) == [("e1.json", 0, 3, "archived", None)]
    [warning] = events(logs, "bronze.file.already_ingested")
    assert warning["log_level"] == "warning"
    assert (warning["path"], warning["ingested_in_batch"]) == (str(landing / "e1.json"), 0)
    assert files_under(landing) == [landing / "e1.json"]  # left as it is


def test_redelivery_skip_quarantines_the_new_bytes_with_a_ledger_row(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(redelivery="skip"))
    landing = lakehouse.path("landing", "orders")
    write_json_lines(landing / "e1.json", [order(i) for i in range(3)])
    run_bronze(spark, lakehouse)
    second = land_again(landing / "e1.json", list(range(100, 105)))

    with capture_logs() as logs:
        summary = run_bronze(spark, lakehouse)

    assert summary.rows_out == 0
    assert_df_equality(order_ids(spark, lakehouse), ids_frame(spark, list(range(3))),
                       ignore_row_order=True)
    assert ledger(spark, lakehouse) == [("e1.json", -1, 0, "quarantined", SKIP_REASON),
                                        ("e1.json", 0, 3, "archived", None)]
    [quarantined] = files_under(lakehouse.path("_quarantine"))
    assert quarantined.name == REDELIVERED_NAME and quarantined.read_bytes() == second
    assert files_under(landing) == []
    [warning] = events(logs, "bronze.file.redelivery_quarantined")
    assert warning["log_level"] == "warning" and warning["reason"] == SKIP_REASON
    assert warning["location"] == str(quarantined)

    # The run after it: nothing more.
    assert run_bronze(spark, lakehouse).rows_out == 0
    assert len(ledger(spark, lakehouse)) == 2


def test_a_reset_checkpoint_does_not_read_again_what_the_ledger_holds(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(clean_source="off"))
    landing = lakehouse.path("landing", "orders")
    ids = write_order_files(landing, files=4, per_file=3)
    run_bronze(spark, lakehouse)
    before = ledger(spark, lakehouse)
    assert len(before) == 4
    Path(orders(lakehouse).checkpoint).rename(tmp_path / "checkpoint-aside")

    with capture_logs() as logs:
        summary = run_bronze(spark, lakehouse)

    assert summary.rows_out == 0 and summary.counts["records_read"] == 0
    assert summary.counts["skipped_files"] == 4
    bronze = order_ids(spark, lakehouse)
    assert bronze.count() == 12 and bronze.distinct().count() == 12
    assert_df_equality(bronze, spark.createDataFrame([(i,) for i in ids], "order_id STRING"),
                       ignore_row_order=True)
    skipped = events(logs, "bronze.file.skipped_known")
    assert sorted(e["path"] for e in skipped) == sorted(str(p) for p in files_under(landing))
    assert {(e["log_level"], e["batch_id"], e["ingested_in_batch"]) for e in skipped} == {
        ("warning", 0, 0)}
    assert ledger(spark, lakehouse) == before  # no new row
    assert len(files_under(landing)) == 4  # clean_source: off


def test_after_a_reset_only_the_files_the_ledger_lacks_are_read(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(clean_source="off"))
    landing = lakehouse.path("landing", "orders")
    ids = write_order_files(landing, files=3, per_file=2)
    run_bronze(spark, lakehouse)
    Path(orders(lakehouse).checkpoint).rename(tmp_path / "checkpoint-aside")
    later = write_order_files(landing, files=1, per_file=5, start=100, prefix="late")

    summary = run_bronze(spark, lakehouse)

    assert summary.rows_out == 5 and summary.counts["skipped_files"] == 3
    assert_df_equality(order_ids(spark, lakehouse),
                       spark.createDataFrame([(i,) for i in ids + later], "order_id STRING"),
                       ignore_row_order=True)
    assert [(name, rows) for name, _, rows, _, _ in ledger(spark, lakehouse)] == [
        ("late-00100.json", 5), ("part-00000.json", 2), ("part-00001.json", 2),
        ("part-00002.json", 2)]


def test_a_run_stopped_after_renaming_a_delivery_ingests_it_once_the_next_time(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    landing = lakehouse.path("landing", "orders")
    write_json_lines(landing / "e1.json", [order(i) for i in range(3)])
    run_bronze(spark, lakehouse)
    land_again(landing / "e1.json", list(range(100, 105)))
    BronzeJob(spark, orders(lakehouse), RunContext()).prepare()  # renamed; stopped there
    assert files_under(landing) == [landing / REDELIVERED_NAME]

    summary = run_bronze(spark, lakehouse)

    assert summary.rows_out == 5
    assert_df_equality(order_ids(spark, lakehouse),
                       ids_frame(spark, [*range(3), *range(100, 105)]), ignore_row_order=True)
    assert [(name, batch) for name, batch, *_ in ledger(spark, lakehouse)] == [
        (REDELIVERED_NAME, 1), ("e1.json", 0)]
    assert files_under(landing) == []


def test_a_skipped_delivery_whose_move_a_stop_cut_off_is_moved_without_a_second_row(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(redelivery="skip"))
    landing = lakehouse.path("landing", "orders")
    write_json_lines(landing / "e1.json", [order(i) for i in range(3)])
    run_bronze(spark, lakehouse)
    second = land_again(landing / "e1.json", list(range(100, 105)))
    run_bronze(spark, lakehouse)
    # As a stop between the ledger's commit and the move leaves it: the row, the file in landing.
    [quarantined] = files_under(lakehouse.path("_quarantine"))
    quarantined.rename(landing / "e1.json")

    with capture_logs() as logs:
        summary = run_bronze(spark, lakehouse)

    assert summary.rows_out == 0 and order_ids(spark, lakehouse).count() == 3
    assert files_under(landing) == [] and quarantined.read_bytes() == second
    assert ledger(spark, lakehouse) == [("e1.json", -1, 0, "quarantined", SKIP_REASON),
                                        ("e1.json", 0, 3, "archived", None)]
    [warning] = events(logs, "bronze.file.redelivery_quarantined")
    assert warning["location"] == str(quarantined)


# ---------------------------------------------------------------------- names and patterns
@pytest.mark.parametrize(("name", "expected"), [
    ("e1.json", "e1.delivery-20261125T013000123Z.json"),
    ("x.csv.gz", "x.delivery-20261125T013000123Z.csv.gz"),
    ("part-00000.snappy.parquet", "part-00000.delivery-20261125T013000123Z.snappy.parquet"),
    ("data.2026.11.json", "data.2026.11.delivery-20261125T013000123Z.json"),
    ("e1", "e1.delivery-20261125T013000123Z"),
    ("e1.delivery-20260101T000000000Z-2.json", "e1.delivery-20261125T013000123Z.json"),
])
def test_a_delivery_name_keeps_the_stem_and_the_extensions(name: str, expected: str) -> None:
    assert delivery_name(name, REDELIVERED_MS) == expected
    assert delivery_name(name, REDELIVERED_MS, 2) == expected.replace("123Z", "123Z-2", 1)


def test_the_landing_pattern_lists_what_sparks_file_source_lists(
    lakehouse: Lakehouse
) -> None:
    def pattern(**source: Any) -> tuple[LandingPattern, str]:
        lakehouse.add_table("bronze", "orders", bronze_spec(**source))
        table = orders(lakehouse)
        return LandingPattern(cast(BronzeTableSpec, table.spec), table), \
            str(lakehouse.path("landing"))

    flat, root = pattern(path="landing/orders", recursive_file_lookup=False,
                         path_glob_filter="*.json")
    assert flat.reads(f"{root}/orders/a.json") and flat.reads(f"{root}/orders/k=1/a.json")
    assert not flat.reads(f"{root}/orders/sub/a.json")  # a folder that is not a partition
    assert not flat.reads(f"{root}/orders/a.csv")  # the filter
    assert not flat.reads(f"{root}/orders/.a.json") and not flat.reads(f"{root}/orders/_a.json")
    assert not flat.reads(f"{root}/other/a.json")

    deep, root = pattern(path="landing/{orders,returns}/day=*")
    assert deep.reads(f"{root}/orders/day=1/sub/a.json")
    assert deep.reads(f"{root}/returns/day=2/a.csv.gz")
    assert not deep.reads(f"{root}/orders/a.json")  # above the glob's depth
    assert not deep.reads(f"{root}/refunds/day=1/a.json")
    assert not deep.reads(f"{root}/orders/day=1/_tmp/a.json")  # a hidden folder
    assert deep.reads(f"{root}/orders/day=1/_k=v/a.json")  # a partition folder is not hidden
