"""The demo end to end, at a reduced size, with the project's own table configuration: its
summary reconciles exactly with the generated feed, gold equals a batch computation over
silver, and a second run over the same root changes no table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from framework.cli import main
from framework.config.model import Layer
from tests.support import REPO, Lakehouse

pytestmark = pytest.mark.slow


def _row_counts(spark: SparkSession, lakehouse: Lakehouse) -> dict[str, int]:
    """Rows of every table the demo writes, companions (quarantine, file ledger) included."""
    counts = {}
    for layer in ("bronze", "silver", "gold"):
        for t in spark.catalog.listTables(lakehouse.schemas[layer]):
            if t.tableType != "VIEW":
                name = f"{lakehouse.schemas[layer]}.{t.name}"
                counts[name] = spark.table(name).count()
    return counts


def test_the_demo_reconciles_and_a_second_run_changes_nothing(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(REPO / "conf" / "tables", lakehouse.conf / "tables")
    path = tmp_path / "summary.json"
    args = ["demo", "--orders", "2400", "--files", "30", "--summary", str(path),
            "--conf", str(lakehouse.conf), "--env", lakehouse.env_name, "--log-format", "json"]
    assert main(args) == 0
    out = capsys.readouterr().out
    summary = json.loads(path.read_text())
    feed, layers = summary["feed"], summary["layers"]
    bronze, silver = layers["bronze"]["orders"], layers["silver"]["orders"]
    gold = layers["gold"]["store_sales"]

    # every line of the readable files is in bronze or its quarantine
    assert feed["records"] == bronze["rows"] + bronze["quarantined"]
    assert bronze["quarantined"] == feed["malformed_lines"] > 0
    assert bronze["files_archived"] == feed["files"] - 1  # all but the unreadable one
    assert bronze["files_quarantined"] == 1
    assert not list(lakehouse.path("landing", "orders").rglob("*.json*"))
    assert list(lakehouse.path("_quarantine").rglob(feed["unreadable_file"]))

    # silver = bronze - duplicates - late rows - rows its expectations quarantined
    assert silver["rows"] == (bronze["rows"] - silver["duplicates_dropped"]
                              - silver["late_rows_dropped"] - silver["quarantined"])
    assert silver["duplicates_dropped"] == feed["duplicate_events"] + feed["redelivered_records"]
    assert silver["late_rows_dropped"] == feed["late_events"] > 0
    assert silver["quarantined"] == feed["rejected_events"]
    assert silver["rows"] == feed["events"] - feed["rejected_events"]
    project = lakehouse.project()
    silver_orders = spark.table(project.table("orders", Layer.SILVER).full_name)
    assert silver_orders.select("order_id").distinct().count() == silver["rows"]

    # gold = an independent batch computation over silver
    expected = (
        silver_orders.groupBy(F.window("event_time", "1 day").alias("w"), "store_id")
        .agg(F.count(F.lit(1)).alias("orders"), F.sum("quantity").alias("items"),
             F.sum("amount").alias("revenue"))
        .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                "store_id", "orders", "items", "revenue")
    )
    actual = spark.table(project.table("store_sales", Layer.GOLD).full_name).select(
        *expected.columns)
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True,
                       ignore_metadata=True)
    assert gold["rows"] == expected.count() and gold["late_rows_dropped"] == 0

    # a gold query that prunes: only the north region's stores (3 of 12) are read
    query = summary["query"]
    assert query["rows"] and {r[query["columns"].index("region")] for r in query["rows"]} == {
        "north"}
    (fact,) = [s for s in query["pruning"]["scans"] if s["table"].endswith("store_sales")]
    assert fact["dynamic_pruning"] and (fact["partitions_read"], fact["partitions_total"]) == (
        3, 12)

    # a person sees progress and the same figures
    assert "bronze.orders          batch   0" in out
    assert f"{silver['late_rows_dropped']:,}" in out and "read 3 of 12 partitions" in out

    # a second run over the same root adds nothing and loses nothing
    before = _row_counts(spark, lakehouse)
    assert main(args) == 0
    again = json.loads(path.read_text())
    assert not again["feed"]["generated_now"]
    assert all(t["added"] == 0 for tables in again["layers"].values() for t in tables.values())
    assert _row_counts(spark, lakehouse) == before
