"""The README's quickstart, command by command, as a new user runs it from the repository (its
own conf/, the local default), on a reduced demo feed. Every command must exit 0, and the
demo's figures must hold:

* its summary reconciles exactly with the generated feed (every line in bronze or its
  quarantine; silver = bronze - duplicates - late rows - quarantined);
* gold equals an independent batch computation over silver, and the mart's query prunes;
* silver keeps both versions of each updated customer (SCD type 2), and the segments mart counts
  each order under the segment its customer had when it was placed;
* the orders of a store whose row comes in a later stores file wait in silver.orders_held, and
  are written to silver.orders once, by the run that finds the store, then counted by gold;
* the quickstart's last command, the demo run again, changes no table;
* no command prints a line of Spark's, Hadoop's or the JVM's log: each line of its output is
  its own, or one of its events (other commands the documentation shows are run on the same
  lake, as a person at a terminal sees them);
* `quarantine list orders` prints states and rules the README's section on checks shows, and
  as many orders of quantity 0 as the demo quarantined."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tests.support import REPO, QuickstartLake, foreign_lines, row_counts

README = REPO / "README.md"
CHECKS = "## Checks, and the quarantine's rows sent again"
# The quickstart's lake is made once per worker (tests/conftest.py), shared with the Spark
# Connect demo's comparison: both run in one xdist group, so it is made once.
pytestmark = [pytest.mark.slow, pytest.mark.demo, pytest.mark.xdist_group("quickstart")]


def test_every_quickstart_command_exits_0_and_the_demo_reconciles(
        spark: SparkSession, quickstart_lake: QuickstartLake) -> None:
    lake = quickstart_lake
    _check_the_demo(spark, lake.root, lake.first_summary, lake.outputs["make demo"])

    status = lake.outputs[".venv/bin/medallion status"]
    assert "spark_catalog.gold.regional_sales | view" in status  # a mart is a view
    assert re.search(r"spark_catalog\.gold\.segment_sales +\| delta", status)  # materialized
    assert "spark_catalog.silver.orders" in status and "(9 rows)" in status

    # a customer's two versions, as the quickstart shows them
    (versions,) = [out for command, out in lake.outputs.items() if "silver.customers" in command]
    assert "(2 rows)" in versions and "wholesale" in versions

    # the second run adds nothing and loses nothing
    again = lake.last_summary
    assert not again["feed"]["generated_now"]
    assert all(t["added"] == 0 for tables in again["layers"].values() for t in tables.values())
    assert row_counts(spark, lake.root) == lake.before_last


def test_every_quickstart_command_prints_its_own_lines_and_events_only(
        quickstart_lake: QuickstartLake) -> None:
    lake = quickstart_lake
    foreign = {command: foreign_lines(lake.outputs[command], lake.errors[command])
               for command in lake.outputs}
    assert {command: lines for command, lines in foreign.items() if lines} == {}


def _check_the_demo(spark: SparkSession, root: Path, summary: dict, out: str) -> None:
    feed, layers = summary["feed"], summary["layers"]
    bronze, silver = layers["bronze"]["orders"], layers["silver"]["orders"]
    gold = layers["gold"]["store_sales"]

    # every line of the readable files is in bronze or its quarantine
    assert feed["records"] == bronze["rows"] + bronze["quarantined"]
    assert bronze["quarantined"] == feed["malformed_lines"] > 0
    assert bronze["files_archived"] == feed["files"] - 1  # all but the unreadable one
    assert bronze["files_quarantined"] == 1
    # the extra key and the new column halfway are kept, rescued, in their rows
    assert bronze["rescued"] == feed["extra_column_events"] + feed["new_column_events"] > 0
    assert "rows with rescued values" in out
    # the customers update, its columns in another order, is read by name; silver keeps a
    # version per change: the update's customers have two, the one before closed at the update
    customers = spark.read.format("delta").load(str(root / "tables" / "silver" / "customers"))
    current = customers.where("__is_current")
    updated = current.where("segment = 'wholesale' AND country = 'LU'")
    assert updated.count() == feed["customer_updates"] > 0 and current.count() == 200
    assert customers.count() == 200 + feed["customer_updates"]
    closed = customers.where("NOT __is_current").select("customer_id", "__end_at", "__deleted")
    assert sorted(closed.collect()) == sorted(
        (r["customer_id"], r["__start_at"], False) for r in updated.collect())
    assert updated.where(F.col("__start_at") != F.lit(feed["customer_updates_at"])
                         .cast("timestamp")).count() == 0
    assert not list((root / "landing" / "orders").rglob("*.json*"))
    assert list((root / "_quarantine").rglob(feed["unreadable_file"]))

    # silver = bronze - duplicates - late rows - rows its expectations quarantined (the rows
    # held for the new store are all released by the second run)
    assert silver["held"] == silver["released"] == feed["new_store_orders"] > 0
    assert silver["still_held"] == silver["expired"] == 0
    assert silver["rows"] == (bronze["rows"] - silver["duplicates_dropped"]
                              - silver["late_rows_dropped"] - silver["quarantined"])
    assert silver["duplicates_dropped"] == feed["duplicate_events"] + feed["redelivered_records"]
    assert silver["late_rows_dropped"] == feed["late_events"] > 0
    assert silver["quarantined"] == feed["rejected_events"]
    assert silver["rows"] == feed["events"] - feed["rejected_events"]
    silver_orders = spark.read.format("delta").load(str(root / "tables" / "silver" / "orders"))
    assert silver_orders.select("order_id").distinct().count() == silver["rows"]

    # gold = an independent batch computation over silver
    expected = (
        silver_orders.groupBy(F.window("event_time", "1 day").alias("w"), "store_id")
        .agg(F.count(F.lit(1)).alias("orders"), F.sum("quantity").alias("items"),
             F.sum("amount").alias("revenue"))
        .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                "store_id", "orders", "items", "revenue")
    )
    actual = spark.read.format("delta").load(str(root / "tables" / "gold" / "store_sales")) \
        .select(*expected.columns)
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True,
                       ignore_metadata=True)
    assert gold["rows"] == expected.count() and gold["late_rows_dropped"] == 0

    # a gold query that prunes: only the north region's stores (4 of 13, the new one too) are
    # read
    query = summary["query"]
    assert query["rows"] and {r[query["columns"].index("region")] for r in query["rows"]} == {
        "north"}
    (fact,) = [s for s in query["pruning"]["scans"] if s["table"].endswith("store_sales")]
    assert fact["dynamic_pruning"] and (fact["partitions_read"], fact["partitions_total"]) == (
        4, 13)

    # the segments mart = each order under its customer's segment at the order's time, from
    # the customers' rows as bronze read them
    segments = _segments_at_the_time(spark, root, silver_orders)
    mart = spark.read.format("delta").load(str(root / "tables" / "gold" / "segment_sales"))
    assert_df_equality(mart.select(*segments.columns), segments, ignore_row_order=True,
                       ignore_nullable=True, ignore_metadata=True)
    assert segments.agg(F.sum("orders")).first()[0] == silver["rows"]
    # the moved customers' new segment starts on the day of their move
    shown = {r[0]: r for r in summary["segments"]["rows"]}
    assert shown["wholesale"][1] == feed["customer_updates_at"][:10] > shown["retail"][1]

    # a person sees progress and the same figures
    assert "bronze.orders          batch   0" in out
    assert f"{silver['late_rows_dropped']:,}" in out and "read 4 of 13 partitions" in out
    assert (f"silver.orders: {silver['held']:,} rows held in silver.orders_held for a key not "
            f"there yet (store_id in silver.stores): {silver['released']:,} released when it "
            "arrived, 0 still held") in out
    assert "orders per customer segment" in out and "wholesale" in out

    # the run history has a row per batch of each table, with the summary's figures
    runs = spark.read.format("delta").load(str(root / "tables" / "ops" / "runs"))
    written = {r["table"].rsplit(".", 1)[-1] + "." + r["layer"]: r["rows"] for r in
               runs.where("status = 'committed' AND batch_id IS NOT NULL")
               .groupBy("table", "layer").agg(F.sum("rows_out").alias("rows")).collect()}
    assert written["orders.bronze"] == bronze["rows"]
    assert written["orders.silver"] == silver["rows"] - silver["released"]  # (not a batch's)


def test_the_orders_of_a_store_not_known_yet_are_held_then_released_once_and_counted_by_gold(
        spark: SparkSession, quickstart_lake: QuickstartLake) -> None:
    root, summary = quickstart_lake.root, quickstart_lake.first_summary
    feed, tables = summary["feed"], root / "tables"
    new = feed["new_store"]
    # its orders, as bronze read them (the feed repeats some), but those silver rejects
    bronze = spark.read.format("delta").load(str(tables / "bronze" / "orders"))
    ordered = bronze.where((F.col("store_id") == new) & (F.col("quantity") > 0)) \
        .select("order_id").distinct()
    assert ordered.count() == feed["new_store_orders"] > 0

    # the first run held them, the store not in silver.stores yet: orders_held after its
    # batches' appends (the release replaces its rows)
    held_at = str(tables / "silver" / "orders_held")
    appended = max(r["version"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{held_at}`")
                   .collect() if r["operation"] == "WRITE"
                   and r["operationParameters"]["mode"] == "Append")
    held = spark.read.format("delta").option("versionAsOf", appended).load(held_at)
    assert_df_equality(held.select("order_id"), ordered, ignore_row_order=True,
                       ignore_nullable=True)
    assert {tuple(r["_held_by"]) for r in held.collect()} == {("store_id_in_stores",)}

    # the second run found the store and released them: each once in silver.orders, in one
    # commit (tagged release:<version of orders_held>), and none left in orders_held
    assert spark.read.format("delta").load(held_at).count() == 0
    orders_at = str(tables / "silver" / "orders")
    silver = spark.read.format("delta").load(orders_at)
    theirs = silver.where(F.col("store_id") == new)
    assert theirs.count() == theirs.select("order_id").distinct().count() == ordered.count()
    assert_df_equality(theirs.select("order_id"), ordered, ignore_row_order=True,
                       ignore_nullable=True)
    (release,) = [r for r in spark.sql(f"DESCRIBE HISTORY delta.`{orders_at}`").collect()
                  if (r["userMetadata"] or "").startswith("release:")]
    before = spark.read.format("delta").option("versionAsOf", release["version"] - 1) \
        .load(orders_at)
    assert before.where(F.col("store_id") == new).count() == 0
    assert int(release["operationMetrics"]["numOutputRows"]) == ordered.count()

    # gold counts them, and the regional mart shows the store under its region
    sales = spark.read.format("delta").load(str(tables / "gold" / "store_sales"))
    assert sales.where(F.col("store_id") == new).agg(F.sum("orders")).first()[0] \
        == feed["new_store_orders"]
    query = summary["query"]
    names = [r[query["columns"].index("name")] for r in query["rows"]]
    assert f"Store {int(new[1:])}" in names, query["rows"]


def _segments_at_the_time(spark: SparkSession, root: Path, orders: DataFrame) -> DataFrame:
    """Orders and revenue per day and segment, each order under the segment of its customer's
    latest row (in bronze) updated at or before the order's time."""
    rows = spark.read.format("delta").load(str(root / "tables" / "bronze" / "customers")) \
        .select(F.col("customer_id").alias("cid"), "segment", "updated_at")
    joined = orders.join(rows, (orders["customer_id"] == rows["cid"])
                         & (rows["updated_at"] <= orders["event_time"]), "left")
    per_order = joined.groupBy("order_id", "order_date", "amount").agg(
        F.max_by("segment", "updated_at").alias("segment"))
    return per_order.groupBy("order_date", "segment").agg(
        F.count(F.lit(1)).alias("orders"), F.sum("amount").alias("revenue"))


def test_the_quarantine_is_listed_as_the_readme_shows_it(
        quickstart_lake: QuickstartLake) -> None:
    """The quickstart's `quarantine list orders`: its states and rules among those the README's
    section on checks shows, its count of `positive_quantity` the demo's quarantined orders;
    and the spec that section shows is the shipped one's."""
    text = README.read_text(encoding="utf-8")
    section = text.split(CHECKS, 1)[1].split("\n## ", 1)[0]
    shown = _listed(section.split("medallion quarantine list orders", 1)[1]
                    .split("```text\n", 1)[1].split("```", 1)[0])
    listed = _listed(quickstart_lake.outputs[".venv/bin/medallion quarantine list orders"])
    assert listed and set(listed) <= set(shown), (listed, shown)
    assert listed[("quarantined", "positive_quantity")] == \
        quickstart_lake.first_summary["layers"]["silver"]["orders"]["quarantined"] > 0
    fragment = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    spec = (REPO / "conf" / "tables" / "silver" / "orders.yaml").read_text(encoding="utf-8")
    assert [line for line in fragment.splitlines() if line not in spec] == []


def _listed(out: str) -> dict[tuple[str, str], int]:
    """(state, rule): rows, of what `quarantine list` prints."""
    rows = [[cell.strip() for cell in line.split("|")] for line in out.splitlines()
            if line.count("|") == 4 and not line.startswith("state")]
    return {(r[0], r[1]): int(r[2].replace(",", "")) for r in rows}
