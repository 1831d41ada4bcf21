"""Gold: windowed aggregates, marts over a fact and its dimensions, and pruning evidence, on
real Spark and Delta."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast
from zoneinfo import ZoneInfo

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from framework.config.model import Layer
from framework.errors import ConfigValidationError
from framework.job import RunContext, RunStatus, TableRunSummary
from framework.layers import job_class
from framework.pruning import explain_pruning
from framework.staleness import SPEC_WRITTEN
from tests.support import CliRun, Lakehouse, bronze_spec, silver_spec, write_delta_commits

BASE = datetime(2026, 11, 1, 8, 0, 0)
SALES = "order_id STRING, store_id STRING, amount INT, event_time TIMESTAMP"
DELAY = timedelta(minutes=10)


def run_gold(spark: SparkSession, lakehouse: Lakehouse, name: str) -> TableRunSummary:
    table = lakehouse.project().table(name, Layer.GOLD)
    summary = job_class(table)(spark, table, RunContext()).run()
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    return summary


def silver_location(lakehouse: Lakehouse, name: str) -> str:
    return lakehouse.project().table(name, Layer.SILVER).location


def with_silver_orders(lakehouse: Lakehouse) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(schema=SALES))
    lakehouse.add_table("silver", "orders", silver_spec(event_time="event_time"))


def sales_commits() -> tuple[list[list[tuple[Any, ...]]], list[tuple[Any, ...]]]:
    """Four commits, ten minutes of event time apart, two stores; commit 3 also brings three
    rows from an hour before the first, far behind the watermark by then (late)."""
    commits, late = [], []
    for i in range(4):
        at = BASE + timedelta(minutes=10 * i)
        rows = [(f"o{i}_{s}_{m}", s, 10 * i + m, at + timedelta(minutes=m))
                for s in ("s1", "s2") for m in (1, 2, 6)]
        if i == 3:
            late = [(f"late_{j}", "s1", 1000, BASE - timedelta(hours=1) + timedelta(minutes=j))
                    for j in range(3)]
            rows += late
        commits.append(rows)
    return commits, late


WINDOWS = {
    "tumbling": ({"type": "tumbling", "duration": "10 minutes"},
                 lambda: F.window("event_time", "10 minutes")),
    "sliding": ({"type": "sliding", "duration": "10 minutes", "slide": "5 minutes"},
                lambda: F.window("event_time", "10 minutes", "5 minutes")),
    "session": ({"type": "session", "gap": "3 minutes"},
                lambda: F.session_window("event_time", "3 minutes")),
}


def expected_windows(spark: SparkSession, rows: list[tuple[Any, ...]], window: Any,
                     closed_by: datetime | None) -> DataFrame:
    """The same aggregate computed in batch over ``rows``; with ``closed_by``, only the
    windows that end by then (what append mode has written)."""
    df = spark.createDataFrame(rows, SALES).groupBy(window().alias("w"), "store_id").agg(
        F.count(F.lit(1)).alias("orders"), F.sum("amount").cast("bigint").alias("revenue"))
    if closed_by is not None:
        df = df.where(F.col("w.end") <= F.lit(closed_by))
    return df.select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                     "store_id", "orders", "revenue")


def aggregate_spec(window: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"description": "Orders and revenue per store and window",
            "source": {"table": "orders", "max_files_per_trigger": 1},
            "event_time": "event_time", "watermark": "10 minutes", "window": window,
            "group_by": ["store_id"],
            "aggregates": [{"name": "orders", "expr": "count(*)", "comment": "Orders"},
                           {"name": "revenue", "expr": "sum(amount)"}],
            **extra}


@pytest.mark.parametrize("kind", list(WINDOWS))
def test_append_windows_equal_a_batch_computation_without_the_late_rows(
    spark: SparkSession, lakehouse: Lakehouse, kind: str
) -> None:
    with_silver_orders(lakehouse)
    lakehouse.add_table("gold", "store_sales", aggregate_spec(WINDOWS[kind][0],
                                                              partition_by=["window_date"]))
    commits, late = sales_commits()
    write_delta_commits(spark, silver_location(lakehouse, "orders"), commits, SALES)

    summary = run_gold(spark, lakehouse, "store_sales")

    on_time = [r for c in commits for r in c if r not in late]
    watermark = max(r[3] for r in on_time) - DELAY
    got = spark.table(lakehouse.project().table("store_sales", Layer.GOLD).full_name)
    want = expected_windows(spark, on_time, WINDOWS[kind][1], closed_by=watermark)
    assert_df_equality(got.drop("window_date"), want, ignore_row_order=True,
                       ignore_nullable=True, ignore_metadata=True)
    assert summary.rows_out == want.count() > 0
    assert summary.counts["late_groups_dropped"] >= 1  # the late rows reached no window
    # The late rows would have changed the first windows had they been counted.
    with_late = expected_windows(spark, [r for c in commits for r in c], WINDOWS[kind][1],
                                 closed_by=watermark)
    assert with_late.exceptAll(want).count() > 0


def test_update_mode_merges_windows_as_they_change_and_a_replay_changes_nothing(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    with_silver_orders(lakehouse)
    lakehouse.add_table("gold", "store_sales", aggregate_spec(
        WINDOWS["tumbling"][0], output_mode="update", partition_by=["store_id"]))
    commits, late = sales_commits()
    silver = silver_location(lakehouse, "orders")
    write_delta_commits(spark, silver, commits[:2], SALES)
    run_gold(spark, lakehouse, "store_sales")
    # The next rows fall in a window already written: it is updated, not duplicated.
    extra = [("o1_s1_9", "s1", 100, BASE + timedelta(minutes=19))]
    write_delta_commits(spark, silver, [extra + commits[2], *commits[3:]], SALES)
    summary = run_gold(spark, lakehouse, "store_sales")
    assert summary.counts["windows_updated"] >= 1

    table = lakehouse.project().table("store_sales", Layer.GOLD)
    on_time = [r for c in commits for r in c if r not in late] + extra
    want = expected_windows(spark, on_time, WINDOWS["tumbling"][1], closed_by=None)
    got = spark.table(table.full_name).drop("window_date")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True,
                       ignore_metadata=True)

    # Replay the last batch: forget its commit, run again; the table is unchanged.
    commits_dir = Path(table.checkpoint) / "commits"
    last = max(int(p.name) for p in commits_dir.iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (commits_dir / name).unlink(missing_ok=True)
    run_gold(spark, lakehouse, "store_sales")
    assert_df_equality(spark.table(table.full_name).drop("window_date"), want,
                       ignore_row_order=True, ignore_nullable=True, ignore_metadata=True)


def test_gold_table_and_columns_carry_comments(spark: SparkSession,
                                               lakehouse: Lakehouse) -> None:
    with_silver_orders(lakehouse)
    lakehouse.add_table("gold", "store_sales", aggregate_spec(
        WINDOWS["tumbling"][0], comments={"store_id": "The store that took the order"}))
    write_delta_commits(spark, silver_location(lakehouse, "orders"), sales_commits()[0][:1],
                        SALES)
    run_gold(spark, lakehouse, "store_sales")
    name = lakehouse.project().table("store_sales", Layer.GOLD).full_name
    comments = {c.name: c.description for c in spark.catalog.listColumns(name)}
    assert comments == {
        "window_start": "Start of the event-time window (inclusive)",
        "window_end": "End of the event-time window (exclusive)",
        "window_date": "Date of window_start",
        "store_id": "The store that took the order",
        "orders": "Orders",
        "revenue": "sum(amount) over the window",
    }
    detail = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").where("col_name = 'Comment'").first()
    assert detail is not None and detail["data_type"] == "Orders and revenue per store and window"


def test_a_gold_table_starts_with_its_spec_and_is_registered_again_if_the_catalog_lost_it(
        spark: SparkSession, lakehouse: Lakehouse) -> None:
    with_silver_orders(lakehouse)
    lakehouse.add_table("gold", "store_sales", aggregate_spec(WINDOWS["tumbling"][0]))
    commits, _ = sales_commits()
    silver = silver_location(lakehouse, "orders")
    write_delta_commits(spark, silver, commits, SALES)
    run_gold(spark, lakehouse, "store_sales")
    table = lakehouse.project().table("store_sales", Layer.GOLD)
    # what its rows are computed with is in its first commit, not in a commit of its own
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table.location}`").orderBy("version")
    operations = [r["operation"] for r in history.collect()]
    assert operations[0] == "CREATE TABLE" and "SET TBLPROPERTIES" not in operations
    properties = {r["key"]: r["value"] for r in spark.sql(
        f"SHOW TBLPROPERTIES delta.`{table.location}`").collect()}
    assert properties["delta.enableChangeDataFeed"] == "true"
    assert "window" in json.loads(properties[SPEC_WRITTEN])
    rows = spark.table(table.full_name).count()
    assert rows > 0
    # the catalog lost it (its folder stays): the next run registers it over its log again
    spark.sql(f"DROP TABLE {table.full_name}")
    run_gold(spark, lakehouse, "store_sales")
    assert spark.table(table.full_name).count() == rows
    again = {r["key"]: r["value"] for r in spark.sql(
        f"SHOW TBLPROPERTIES {table.full_name}").collect()}
    assert {k: again[k] for k in properties} == properties


STORES = 50


def with_sales_mart(spark: SparkSession, lakehouse: Lakehouse, partition_by: str,
                    stores: int = STORES, **mart: Any) -> None:
    """A gold fact of orders per store (partitioned by ``partition_by``), the stores
    dimension (10% of them in region 'north') and a mart view joining them."""
    with_silver_orders(lakehouse)
    lakehouse.add_table("bronze", "stores", bronze_spec())
    lakehouse.add_table("silver", "stores", {"source": "stores"})
    lakehouse.add_table("gold", "store_sales", aggregate_spec(
        WINDOWS["tumbling"][0], output_mode="update", partition_by=[partition_by]))
    lakehouse.add_table("gold", "regional_sales", {
        "kind": "mart", "description": "Store sales with the store's region",
        "fact": "store_sales",
        "dimensions": [{"table": "stores", "on": "store_id", "columns": ["region"]}], **mart})
    rows = [(f"o{s}_{m}", f"s{s:02d}", m, BASE + timedelta(minutes=m))
            for s in range(stores) for m in (1, 12)]
    write_delta_commits(spark, silver_location(lakehouse, "orders"), [rows], SALES)
    regions = [(f"s{s:02d}", "north" if s % 10 == 0 else "south") for s in range(stores)]
    write_delta_commits(spark, silver_location(lakehouse, "stores"), [regions],
                        "store_id STRING, region STRING")
    stores_table = lakehouse.project().table("stores", Layer.SILVER)
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {stores_table.env.catalog}.{stores_table.schema}")
    spark.sql(f"CREATE TABLE {stores_table.full_name} "
              f"USING DELTA LOCATION '{silver_location(lakehouse, 'stores')}'")
    run_gold(spark, lakehouse, "store_sales")
    run_gold(spark, lakehouse, "regional_sales")


def test_a_filtered_dimension_prunes_the_fact_to_its_partitions(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    with_sales_mart(spark, lakehouse, partition_by="store_id")
    mart = lakehouse.project().table("regional_sales", Layer.GOLD).full_name
    query = (f"SELECT store_id, sum(revenue) AS revenue FROM {mart} WHERE region = 'north' "
             "GROUP BY store_id")

    pruned = explain_pruning(spark, query)
    fact = pruned.scan("store_sales")
    assert pruned.dynamic_pruning and fact.dynamic_pruning
    assert fact.partitions_total == STORES
    assert fact.partitions_read is not None
    assert fact.partitions_read <= STORES // 10
    assert fact.files_read < fact.files_total
    answer = spark.sql(query)

    spark.conf.set("spark.sql.optimizer.dynamicPartitionPruning.enabled", "false")
    try:
        full = explain_pruning(spark, query)
        unpruned_answer = spark.sql(query).collect()
    finally:
        spark.conf.unset("spark.sql.optimizer.dynamicPartitionPruning.enabled")
    assert not full.dynamic_pruning
    assert full.scan("store_sales").partitions_read == STORES
    assert_df_equality(answer, spark.createDataFrame(unpruned_answer, answer.schema),
                       ignore_row_order=True)
    assert {r["store_id"] for r in unpruned_answer} == {f"s{s:02d}" for s in range(0, 50, 10)}


def test_a_materialized_mart_rebuilds_only_the_fact_partitions_that_changed(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    with_sales_mart(spark, lakehouse, partition_by="store_id", stores=10, materialize=True)
    project = lakehouse.project()
    mart, fact = (project.table(n, Layer.GOLD).full_name for n in ("regional_sales",
                                                                    "store_sales"))
    stores = project.table("stores", Layer.SILVER)

    def joined() -> DataFrame:  # the same join, computed here in batch
        return spark.table(fact).join(spark.table(stores.full_name), "store_id") \
            .select(*spark.table(fact).columns, "region")

    def rebuild() -> dict[str, int]:
        counts = run_gold(spark, lakehouse, "regional_sales").counts
        assert_df_equality(spark.table(mart), joined(), ignore_row_order=True,
                           ignore_column_order=True, ignore_nullable=True, ignore_metadata=True)
        return counts

    assert spark.table(mart).count() == 2 * 10  # built once by with_sales_mart
    # New orders for two stores: the fact changes in their partitions only.
    later = BASE + timedelta(hours=3)
    write_delta_commits(spark, silver_location(lakehouse, "orders"), [[
        ("n1", "s01", 5, later), ("n2", "s02", 7, later)]], SALES)
    run_gold(spark, lakehouse, "store_sales")
    assert rebuild() == {"dimensions": 1, "dimensions_too_big_to_broadcast": 0, "columns": 7,
                         "full_rebuild": 0, "partitions_rebuilt": 2}
    assert rebuild()["partitions_rebuilt"] == 0  # nothing changed
    # A changed dimension changes rows in every partition: all of it is rebuilt.
    spark.sql(f"UPDATE {stores.full_name} SET region = 'east' WHERE store_id = 's01'")
    counts = rebuild()
    assert counts["full_rebuild"] == 1
    assert spark.table(mart).where("region = 'east'").count() == 3
    # A compaction of the fact changes no row: nothing is rebuilt (the change data feed has
    # no rows for it, where its files were rewritten).
    metrics = spark.sql(f"OPTIMIZE {fact}").first()["metrics"]  # type: ignore[index]
    assert metrics["numFilesRemoved"] > 0
    assert rebuild()["partitions_rebuilt"] == 0
    # Without the fact's change data feed the mart cannot know what changed: rebuilt whole.
    spark.sql(f"ALTER TABLE {fact} SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'false')")
    write_delta_commits(spark, silver_location(lakehouse, "orders"), [[
        ("n3", "s03", 1, later + timedelta(hours=1))]], SALES)
    run_gold(spark, lakehouse, "store_sales")
    assert rebuild()["full_rebuild"] == 1
    # A new dimension column in the mart: rebuilt whole with its columns (and their comments).
    spark.sql(f"ALTER TABLE {stores.full_name} ADD COLUMN (manager STRING COMMENT 'Manager')")
    lakehouse.add_table("gold", "regional_sales", {
        "kind": "mart", "fact": "store_sales", "materialize": True,
        "dimensions": [{"table": "stores", "on": "store_id", "columns": ["region", "manager"]}]})
    assert run_gold(spark, lakehouse, "regional_sales").counts["full_rebuild"] == 1
    assert {c.name: c.description for c in spark.catalog.listColumns(mart)}["manager"] == \
        "Manager"
    assert spark.table(mart).count() == spark.table(fact).count()
    assert [c.description for c in spark.catalog.listColumns(mart)
            if c.name == "window_start"] == ["Start of the event-time window (inclusive)"]
    # A new filter changes which rows it holds, though no table changed: rebuilt whole.
    lakehouse.add_table("gold", "regional_sales", {
        "kind": "mart", "fact": "store_sales", "materialize": True, "where": "region = 'east'",
        "dimensions": [{"table": "stores", "on": "store_id", "columns": ["region", "manager"]}]})
    assert run_gold(spark, lakehouse, "regional_sales").counts["full_rebuild"] == 1
    east = joined().where("region = 'east'")
    assert 0 < east.count() < spark.table(fact).count()
    assert_df_equality(spark.table(mart).drop("manager"), east, ignore_row_order=True,
                       ignore_column_order=True, ignore_nullable=True, ignore_metadata=True)
    assert run_gold(spark, lakehouse, "regional_sales").counts["full_rebuild"] == 0


def test_validate_warns_when_the_fact_is_not_partitioned_by_the_join_key(
    lakehouse: Lakehouse
) -> None:
    with_silver_orders(lakehouse)
    lakehouse.add_table("bronze", "stores", bronze_spec(schema="store_id STRING, region STRING"))
    lakehouse.add_table("silver", "stores", {"source": "stores"})
    lakehouse.add_table("gold", "store_sales", aggregate_spec(
        WINDOWS["tumbling"][0], partition_by=["window_date"]))
    # Written by hand, as a person would: YAML reads a bare `on` key as true; it still works.
    (lakehouse.conf / "tables" / "gold" / "regional_sales.yaml").write_text(
        "kind: mart\nfact: store_sales\ndimensions:\n  - {table: stores, on: store_id}\n")
    code, out = CliRun(["validate", "--no-spark"], lakehouse.cli_env()).finish()
    assert code == 0, out
    assert "warning:" in out
    assert "cannot prune" in out and "partitioned by window_date" in out
    assert "partition store_sales by store_id" in out

    # a materialized mart is queried as its own table, not through the join: nothing to say
    mart = lakehouse.conf / "tables" / "gold" / "regional_sales.yaml"
    mart.write_text(mart.read_text() + "materialize: true\n")
    code, out = CliRun(["validate", "--no-spark"], lakehouse.cli_env()).finish()
    assert code == 0 and "cannot prune" not in out, out

    # (reading whole commits of silver, without the tests' one-file-a-batch limit, with the
    # feeds' landing folder made)
    lakehouse.add_table("gold", "store_sales", aggregate_spec(
        WINDOWS["tumbling"][0], partition_by=["store_id"], source="orders"))
    lakehouse.path("landing", "orders").mkdir(parents=True)
    code, out = CliRun(["validate", "--no-spark"], lakehouse.cli_env()).finish()
    assert code == 0 and "warning:" not in out, out


def test_gold_config_errors_say_what_was_expected(lakehouse: Lakehouse) -> None:
    with_silver_orders(lakehouse)
    lakehouse.add_table("gold", "sessions", aggregate_spec(
        {"type": "session", "gap": "5 minutes"}, output_mode="update",
        partition_by=["day"]))
    lakehouse.add_table("gold", "bad_window", aggregate_spec(
        {"type": "sliding", "duration": "10 minutes"}))
    with pytest.raises(ConfigValidationError) as info:
        lakehouse.project()
    text = str(info.value)
    assert "expected output_mode append for a session window" in text
    assert "expected columns among the output columns" in text and "found day" in text
    assert "expected duration, slide for a sliding window, found duration" in text


@pytest.mark.parametrize("materialize", [False, True], ids=["view", "materialized"])
def test_a_mart_filters_groups_and_joins_keys_named_differently(
    spark: SparkSession, lakehouse: Lakehouse, materialize: bool
) -> None:
    # Flights per west-coast destination: the fact's `dest` is the airports' `faa`.
    lakehouse.add_table("bronze", "flights", bronze_spec())
    lakehouse.add_table("silver", "flights", {"source": "flights"})
    lakehouse.add_table("bronze", "airports", bronze_spec())
    lakehouse.add_table("silver", "airports", {"source": "airports"})
    lakehouse.add_table("gold", "west_coast_arrivals", {
        "kind": "mart", "fact": {"table": "flights", "layer": "silver"},
        "dimensions": [{"table": "airports", "on": {"dest": "faa"}, "columns": ["tz", "city"]}],
        "where": "tz = 'America/Los_Angeles'", "group_by": ["dest", "city"],
        "aggregates": [{"name": "flights", "expr": "count(*)", "comment": "Arrivals"},
                       {"name": "delay", "expr": "avg(arr_delay)"}],
        "materialize": materialize})
    project = lakehouse.project()
    flights = [(f"f{i}", dest, i % 7) for i, dest in enumerate(
        ["SFO", "SFO", "LAX", "SEA", "JFK", "LAX", "SFO", "ORD", "SEA", "LAX"])]
    airports = [("SFO", "San Francisco", "America/Los_Angeles"),
                ("LAX", "Los Angeles", "America/Los_Angeles"),
                ("SEA", "Seattle", "America/Los_Angeles"), ("JFK", "New York", "America/New_York"),
                ("ORD", "Chicago", "America/Chicago")]
    for name, rows, schema in (("flights", flights, "id STRING, dest STRING, arr_delay INT"),
                               ("airports", airports, "faa STRING, city STRING, tz STRING")):
        table = project.table(name, Layer.SILVER)
        write_delta_commits(spark, table.location, [rows], schema)
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {table.env.catalog}.{table.schema}")
        spark.sql(f"CREATE TABLE {table.full_name} USING DELTA LOCATION '{table.location}'")

    summary = run_gold(spark, lakehouse, "west_coast_arrivals")

    mart = project.table("west_coast_arrivals", Layer.GOLD).full_name
    want = spark.createDataFrame([("SFO", "San Francisco", 3, 7 / 3),
                                  ("LAX", "Los Angeles", 3, 3.0), ("SEA", "Seattle", 2, 2.0)],
                                 "dest STRING, city STRING, flights BIGINT, delay DOUBLE")
    assert_df_equality(spark.table(mart), want, ignore_row_order=True, ignore_nullable=True,
                       ignore_metadata=True)
    assert summary.counts["columns"] == 4
    comments = {c.name: c.description for c in spark.catalog.listColumns(mart)}
    assert comments["flights"] == "Arrivals" and comments["delay"] == "avg(arr_delay) per group"


def test_a_batch_spanning_more_than_the_watermark_is_warned_about(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    from structlog.testing import capture_logs

    with_silver_orders(lakehouse)
    lakehouse.add_table("gold", "store_sales", aggregate_spec(
        WINDOWS["tumbling"][0], source="orders"))  # whole commits: one batch for the four
    commits, _ = sales_commits()
    write_delta_commits(spark, silver_location(lakehouse, "orders"), commits, SALES)
    with capture_logs() as events:
        summary = run_gold(spark, lakehouse, "store_sales")
    wide = [e for e in events if e["event"] == "gold.batch.wide_event_time"]
    assert summary.batches >= 1 and len(wide) == 1
    assert wide[0]["batch_id"] == 0 and wide[0]["input_rows"] == sum(map(len, commits))
    assert wide[0]["span"] == "1 hour 36 minutes" and wide[0]["watermark"] == "10 minutes"


NEW_YORK = ZoneInfo("America/New_York")


def local(*parts: int) -> datetime:
    """An instant given by its wall-clock time in New York."""
    return datetime(*parts, tzinfo=NEW_YORK)  # type: ignore[misc]


@pytest.fixture
def new_york_session(spark: SparkSession) -> Iterator[SparkSession]:
    """The session in the lake's time zone of New York (its clocks change on 8 March 2026)."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        yield spark
    finally:
        spark.conf.set("spark.sql.session.timeZone", cast(str, before))


def test_a_calendar_aggregate_counts_every_row_into_its_period_of_the_lakes_time_zone(
    new_york_session: SparkSession, lakehouse: Lakehouse
) -> None:
    spark = new_york_session
    with_silver_orders(lakehouse)
    months = aggregate_spec({"type": "calendar", "unit": "month"}, watermark=None)
    lakehouse.add_table("gold", "monthly_sales", {k: v for k, v in months.items()
                                                  if k != "watermark"})
    weeks = aggregate_spec({"type": "calendar", "unit": "week"})
    lakehouse.add_table("gold", "weekly_sales", {k: v for k, v in weeks.items()
                                                 if k != "watermark"})
    silver = silver_location(lakehouse, "orders")
    # 23:30 on 31 January in New York is 04:30 on 1 February in UTC: January's. Clocks go
    # forward on 8 March: March ends at 04:00 UTC, not 05:00.
    write_delta_commits(spark, silver, [
        [("a", "s1", 10, local(2026, 1, 15, 10, 0)), ("b", "s1", 20, local(2026, 1, 31, 23, 30))],
        [("c", "s1", 5, local(2026, 2, 1, 0, 30)), ("d", "s2", 7, local(2026, 3, 9, 12, 0))]],
        SALES)
    run_gold(spark, lakehouse, "monthly_sales")
    run_gold(spark, lakehouse, "weekly_sales")
    # A row of January comes after March's: nothing is late, January is updated.
    write_delta_commits(spark, silver, [[("e", "s1", 1, local(2026, 1, 2, 8, 0))]], SALES)
    summary = run_gold(spark, lakehouse, "monthly_sales")
    assert (summary.counts["windows_inserted"], summary.counts["windows_updated"]) == (0, 1)
    assert summary.counts["late_groups_dropped"] == 0

    schema = ("window_start TIMESTAMP, window_end TIMESTAMP, store_id STRING, orders BIGINT, "
              "revenue BIGINT")
    want = spark.createDataFrame([
        (local(2026, 1, 1), local(2026, 2, 1), "s1", 3, 31),
        (local(2026, 2, 1), local(2026, 3, 1), "s1", 1, 5),
        (local(2026, 3, 1), local(2026, 4, 1), "s2", 1, 7)], schema)
    project = lakehouse.project()
    got = spark.table(project.table("monthly_sales", Layer.GOLD).full_name)
    assert_df_equality(got.drop("window_date"), want, ignore_row_order=True,
                       ignore_nullable=True, ignore_metadata=True)
    assert local(2026, 4, 1).astimezone(ZoneInfo("UTC")).hour == 4  # (summer time)
    dates = {r.window_date.isoformat() for r in got.select("window_date").collect()}
    assert dates == {"2026-01-01", "2026-02-01", "2026-03-01"}
    # Weeks start on Monday: 12 January, 26 January (the 31st and 1 February), 9 March.
    weekly = spark.table(project.table("weekly_sales", Layer.GOLD).full_name)
    assert sorted((r.window_start.date().isoformat(), r.window_end.date().isoformat(),
                   r.store_id, r.orders) for r in weekly.collect()) == [
        ("2026-01-12", "2026-01-19", "s1", 1), ("2026-01-26", "2026-02-02", "s1", 2),
        ("2026-03-09", "2026-03-16", "s2", 1)]


def test_an_aggregate_without_a_window_rewrites_only_the_groups_a_batch_touches(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    with_silver_orders(lakehouse)
    lakehouse.add_table("gold", "store_totals", {
        "source": "orders", "group_by": ["store_id"],
        "aggregates": [{"name": "orders", "expr": "count(*)"},
                       {"name": "revenue", "expr": "sum(amount)"}]})
    silver = silver_location(lakehouse, "orders")
    commits, late = sales_commits()
    write_delta_commits(spark, silver, commits, SALES)
    first = run_gold(spark, lakehouse, "store_totals")
    assert (first.counts["windows_inserted"], first.counts["late_groups_dropped"]) == (2, 0)
    # A batch of s2 and a new store: s1's row is left alone.
    extra = [("x1", "s2", 3, BASE), ("x2", "s3", 4, BASE - timedelta(days=30))]
    write_delta_commits(spark, silver, [extra], SALES)
    second = run_gold(spark, lakehouse, "store_totals")
    assert (second.counts["windows_inserted"], second.counts["windows_updated"]) == (1, 1)

    rows = [r for c in commits for r in c] + extra  # the late rows too: nothing is late
    want = spark.createDataFrame(rows, SALES).groupBy("store_id").agg(
        F.count(F.lit(1)).alias("orders"), F.sum("amount").cast("bigint").alias("revenue"))
    table = lakehouse.project().table("store_totals", Layer.GOLD)
    got = spark.table(table.full_name)
    assert got.columns == ["store_id", "orders", "revenue"]
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True,
                       ignore_metadata=True)
    assert len(late) == 3
    touched = spark.sql(f"DESCRIBE HISTORY delta.`{table.location}`").where(
        "operation = 'MERGE'").orderBy(F.desc("version")).first()
    assert touched is not None
    assert int(touched.operationMetrics["numTargetRowsCopied"]) == 0  # s1 not rewritten


def test_aggregates_without_a_watermark_say_what_each_window_needs(
        lakehouse: Lakehouse) -> None:
    with_silver_orders(lakehouse)
    lakehouse.add_table("gold", "calendar_late", aggregate_spec(
        {"type": "calendar", "unit": "month"}))
    lakehouse.add_table("gold", "calendar_append", {
        **{k: v for k, v in aggregate_spec({"type": "calendar", "unit": "year"}).items()
           if k != "watermark"}, "output_mode": "append"})
    lakehouse.add_table("gold", "no_keys", {
        "source": "orders", "aggregates": [{"name": "orders", "expr": "count(*)"}]})
    lakehouse.add_table("gold", "no_watermark", {
        k: v for k, v in aggregate_spec(WINDOWS["tumbling"][0]).items() if k != "watermark"})
    lakehouse.add_table("gold", "no_unit", aggregate_spec({"type": "calendar",
                                                           "duration": "30 days"}))
    with pytest.raises(ConfigValidationError) as info:
        lakehouse.project()
    problems = {(Path(e.file or "").stem, e.key): e.detail for e in info.value.errors}
    assert problems[("calendar_late", "watermark")].startswith(
        "expected no watermark with a calendar window: nothing is late")
    assert problems[("calendar_append", "output_mode")].startswith(
        "expected output_mode update with a calendar window")
    assert problems[("no_keys", "group_by")].startswith(
        "expected group_by with an aggregate without a window")
    assert problems[("no_watermark", "watermark")].startswith(
        "expected key 'watermark' with a tumbling window")
    assert "expected unit for a calendar window, found duration" in str(info.value)


def test_a_mart_of_one_table_without_dimensions(spark: SparkSession,
                                                lakehouse: Lakehouse) -> None:
    lakehouse.add_table("bronze", "flights", bronze_spec())
    lakehouse.add_table("silver", "flights", {"source": "flights"})
    lakehouse.add_table("gold", "arrivals", {
        "kind": "mart", "fact": {"table": "flights", "layer": "silver"},
        "where": "arr_delay > 0", "group_by": ["dest"],
        "aggregates": [{"name": "late_flights", "expr": "count(*)"}]})
    project = lakehouse.project()
    table = project.table("flights", Layer.SILVER)
    write_delta_commits(spark, table.location, [[("f1", "SFO", 3), ("f2", "SFO", 0),
                                                 ("f3", "LAX", 9), ("f4", "SFO", 1)]],
                        "id STRING, dest STRING, arr_delay INT")
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {table.env.catalog}.{table.schema}")
    spark.sql(f"CREATE TABLE {table.full_name} USING DELTA LOCATION '{table.location}'")

    summary = run_gold(spark, lakehouse, "arrivals")

    assert summary.counts["dimensions"] == 0
    want = spark.createDataFrame([("SFO", 2), ("LAX", 1)], "dest STRING, late_flights BIGINT")
    assert_df_equality(spark.table(project.table("arrivals", Layer.GOLD).full_name), want,
                       ignore_row_order=True, ignore_nullable=True, ignore_metadata=True)
