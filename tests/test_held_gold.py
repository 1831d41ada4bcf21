"""A fact held for a dimension row that comes later (``references`` with ``hold``) ends, in its
silver table and in a gold aggregate over it, as it ends on a lake where the dimension came
first: released once, counted once, into the day of its event time."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from framework.config.model import Layer
from framework.job import RunContext, RunStatus, TableRunSummary
from framework.layers import job_class
from tests.support import Lakehouse, bronze_spec, write_delta_commits

ORDERS = "order_id STRING, store_id STRING, amount INT, event_time TIMESTAMP"
STORES = "store_id STRING, name STRING"
DAY = datetime(2026, 11, 1, 9, 0)


def order(order_id: str, store: str, amount: int, days: int, hours: int = 0) -> tuple[Any, ...]:
    return (order_id, store, amount, DAY + timedelta(days=days, hours=hours))


# One bronze commit per run. s2's first orders come in runs 1 and 2; on lake A, s2 itself
# comes before run 4 (three runs after its first order), on lake B before run 1.
ORDERS_BY_RUN = [
    [order("a1", "s1", 10, 0), order("b1", "s2", 20, 0, 1)],
    [order("a2", "s1", 5, 1), order("b2", "s2", 7, 1), order("b3", "s2", 1, 0, 5)],
    [order("a3", "s1", 1, 2)],
    [order("a4", "s1", 2, 2, 3)],
    [order("b4", "s2", 3, 3)],
]
S2_RUN = 3  # (the run's index)


def lake(spark: SparkSession, lakehouse: Lakehouse, s2_first: bool) -> Lakehouse:
    """bronze.orders refined into silver.orders (held for a store silver.stores lacks), and
    gold.daily_sales per store and calendar day, each run as ``medallion run`` runs them (the
    stores, written here as their run would, then the orders, then gold)."""
    lakehouse.add_table("bronze", "orders", bronze_spec(schema=ORDERS, path="landing/orders"))
    lakehouse.add_table("bronze", "stores", bronze_spec(schema=STORES, path="landing/stores"))
    lakehouse.add_table("silver", "stores", {"source": "stores"})
    lakehouse.add_table("silver", "orders", {
        "source": "orders", "event_time": "event_time",
        "checks": [{"references": {"column": "store_id", "table": "stores"},
                    "action": "hold"}]})
    lakehouse.add_table("gold", "daily_sales", {
        "description": "Orders and revenue per store and day",
        "source": {"table": "orders"}, "event_time": "event_time",
        "window": {"type": "calendar", "unit": "day"}, "group_by": ["store_id"],
        "aggregates": [{"name": "orders", "expr": "count(*)"},
                       {"name": "revenue", "expr": "sum(amount)"}]})
    project = lakehouse.project()
    stores = project.table("stores", Layer.SILVER).location
    bronze = project.table("orders", Layer.BRONZE).location
    for i, orders in enumerate(ORDERS_BY_RUN):
        if i == 0:
            write_delta_commits(spark, stores, [[("s1", "one")]], STORES)
        if i == (0 if s2_first else S2_RUN):
            write_delta_commits(spark, stores, [[("s2", "two")]], STORES)
        write_delta_commits(spark, bronze, [orders], ORDERS)
        silver = run(spark, lakehouse, "orders", Layer.SILVER)
        run(spark, lakehouse, "daily_sales", Layer.GOLD)
        if not s2_first:
            held, released = silver.counts["held_rows"], silver.counts["released_rows"]
            assert (held, released) == {0: (1, 0), 1: (2, 0), S2_RUN: (0, 3)}.get(i, (0, 0))
    return lakehouse


def run(spark: SparkSession, lakehouse: Lakehouse, name: str, layer: Layer) -> TableRunSummary:
    table = lakehouse.project().table(name, layer)
    summary = job_class(table)(spark, table, RunContext()).run()
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    return summary


def table(spark: SparkSession, lakehouse: Lakehouse, name: str, layer: Layer,
          companion: str | None = None) -> DataFrame:
    found = lakehouse.project().table(name, layer)
    where = found.companion_location(companion) if companion else found.location
    df = spark.read.format("delta").load(where)
    return df.drop(*[c for c in df.columns if c.startswith("_")])  # (when it was ingested)


def test_a_fact_held_three_runs_for_its_store_ends_as_if_the_store_came_first(
    spark: SparkSession, tmp_path: Any
) -> None:
    late = lake(spark, Lakehouse(tmp_path / "store_late"), s2_first=False)
    first = lake(spark, Lakehouse(tmp_path / "store_first"), s2_first=True)

    orders = table(spark, late, "orders", Layer.SILVER)
    assert_df_equality(orders, table(spark, first, "orders", Layer.SILVER),
                       ignore_row_order=True, ignore_nullable=True)
    ids = [r["order_id"] for r in orders.collect()]
    assert sorted(ids) == ["a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4"]  # each once
    assert table(spark, late, "orders", Layer.SILVER, "held").count() == 0
    daily = table(spark, late, "daily_sales", Layer.GOLD)
    assert_df_equality(daily, table(spark, first, "daily_sales", Layer.GOLD),
                       ignore_row_order=True, ignore_nullable=True, ignore_metadata=True)
    s2 = sorted((r["window_start"].day, r["orders"], r["revenue"])
                for r in daily.where("store_id = 's2'").collect())
    assert s2 == [(1, 2, 21), (2, 1, 7), (4, 1, 3)]  # b1 and b3 on the 1st, released late
