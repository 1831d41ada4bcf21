"""Silver: watermarked dedup, expectations, upserts and table layouts, on real Spark and Delta."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from structlog.testing import capture_logs

from framework.config.model import Layer
from framework.errors import ConfigValidationError
from framework.job import RunContext, RunStatus, TableRunSummary
from silver.job import SilverJob
from tests.support import (
    Lakehouse,
    bronze_spec,
    run_history,
    silver_spec,
    write_delta_commits,
)

BASE = datetime(2026, 11, 1, 8, 0, 0)


def run_silver(spark: SparkSession, lakehouse: Lakehouse, name: str = "orders",
               ok: bool = True) -> tuple[TableRunSummary, SilverJob]:
    table = lakehouse.project().table(name, Layer.SILVER)
    job = SilverJob(spark, table, RunContext())
    summary = job.run()
    if ok:
        assert summary.status is RunStatus.SUCCEEDED, summary.error
    return summary, job


def bronze_location(lakehouse: Lakehouse, name: str = "orders") -> str:
    return lakehouse.project().table(name, Layer.BRONZE).location


def row(key: str, customer: str | None, quantity: int, at: datetime,
        batch: int = 0) -> tuple[Any, ...]:
    return (key, customer, quantity, at, batch)


def silver_df(spark: SparkSession, lakehouse: Lakehouse, name: str = "orders") -> DataFrame:
    return spark.table(lakehouse.project().table(name, Layer.SILVER).full_name)


def test_dedup_drops_duplicates_within_the_delay_counts_late_rows_and_state_levels_off(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(
        event_time="event_time", dedup={"keys": ["order_id"], "delay": "10 minutes"}))
    # 12 commits, 5 minutes of event time apart: 20 new keys each, 5 re-deliveries of the
    # previous commit's keys (within the delay: duplicates), and in commit 6, 3 new keys whose
    # event time is far behind the watermark (late).
    commits, expected = [], []
    for i in range(12):
        at = BASE + timedelta(minutes=5 * i)
        rows = [row(f"k{i:02d}_{j:02d}", "c1", 1, at + timedelta(seconds=j)) for j in range(20)]
        expected += [r[0] for r in rows]
        if i:
            prev = BASE + timedelta(minutes=5 * (i - 1))
            rows += [row(f"k{i - 1:02d}_{j:02d}", "c1", 1, prev + timedelta(seconds=j))
                     for j in range(5)]
        if i == 6:
            rows += [row(f"late_{j}", "c1", 1, BASE - timedelta(hours=1)) for j in range(3)]
        commits.append(rows)
    write_delta_commits(spark, bronze_location(lakehouse), commits)

    summary, job = run_silver(spark, lakehouse)

    assert not job.direct  # a table with a watermark writes per batch (its span is checked)
    assert summary.rows_in == 12 * 20 + 11 * 5 + 3
    assert summary.counts["duplicates_dropped"] == 55
    assert summary.counts["late_rows_dropped"] == 3
    assert summary.rows_out == 240
    got = silver_df(spark, lakehouse).select("order_id")
    want = spark.createDataFrame([(k,) for k in expected], "order_id STRING")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    # A key stays in the state until the watermark passes its event time plus the delay, so
    # the state holds about two delays of keys (here 4-5 commits of 20): it levels off.
    states = [job.state_rows_by_batch[b] for b in sorted(job.state_rows_by_batch)]
    assert len(states) >= 12
    assert max(states) <= 120 < 240
    assert max(states[8:]) <= max(states[4:8])

    # The run history: one row per batch, whose figures add up to the summary's
    rows = run_history(spark, lakehouse, job.table.full_name)
    assert [r["batch_id"] for r in rows] == list(range(summary.batches))
    assert {(r["status"], r["run_id"], r["layer"], r["trigger"]) for r in rows} == {
        ("committed", job.ctx.run_id, "silver", "availableNow")}
    assert sum(r["rows_in"] for r in rows) == summary.rows_in
    assert sum(r["rows_out"] for r in rows) == summary.rows_out == 240
    assert sum(r["duplicates_dropped"] for r in rows) == 55
    assert sum(r["late_dropped"] for r in rows) == 3
    assert [r["state_rows"] for r in rows] == states
    assert all(r["started_at"] <= r["ended_at"] and r["durations_ms"]["addBatch"] >= 0
               for r in rows)
    assert rows[-1]["watermark"] is not None and rows[-1]["error"] is None


def test_expectations_split_every_row_into_good_dropped_and_quarantined(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(
        columns=[{"name": "order_id"}, {"name": "customer_id"},
                 {"name": "quantity", "from": "qty", "type": "int"}, {"name": "event_time"}],
        expectations=[
            {"name": "positive_quantity", "rule": "quantity > 0", "action": "quarantine"},
            {"name": "has_customer", "rule": "customer_id IS NOT NULL", "action": "drop"},
            {"name": "small_order", "rule": "quantity < 100", "action": "warn"},
        ]))
    rows = [(f"o{i}", "c1", str(i % 5 + 1), BASE) for i in range(10)]  # 10 good
    rows += [(f"q{i}", "c1", "0", BASE) for i in range(3)]  # quarantined
    rows += [(f"d{i}", None, "2", BASE) for i in range(2)]  # dropped
    rows += [("qd", None, "-1", BASE)]  # breaks both: quarantined, not dropped
    rows += [(f"w{i}", "c1", "500", BASE) for i in range(4)]  # warned, kept
    rows += [("bad", "c1", "many", BASE)]  # does not fit INT: quarantined as cast:quantity
    schema = "order_id STRING, customer_id STRING, qty STRING, event_time TIMESTAMP"
    write_delta_commits(spark, bronze_location(lakehouse), [rows], schema)

    summary, _ = run_silver(spark, lakehouse)

    c = summary.counts
    assert (summary.rows_out, c["dropped_rows"], c["quarantined_rows"]) == (14, 2, 5)
    assert summary.rows_out + c["dropped_rows"] + c["quarantined_rows"] == len(rows)
    # The value that does not fit is NULL after the cast, and NULL breaks a rule too.
    assert c["rule:positive_quantity"] == 5 and c["rule:has_customer"] == 3
    assert c["rule:small_order"] == 5 and c["rule:cast:quantity"] == 1
    quarantine = spark.table(lakehouse.project().table("orders", Layer.SILVER)
                             .qualified("quarantine"))
    rules = {r["key"]: sorted(r["_failed_rules"]) for r in quarantine.select(
        F.get_json_object("_row", "$.order_id").alias("key"), "_failed_rules").collect()}
    assert rules == {"q0": ["positive_quantity"], "q1": ["positive_quantity"],
                     "q2": ["positive_quantity"], "qd": ["has_customer", "positive_quantity"],
                     "bad": ["cast:quantity", "positive_quantity", "small_order"]}
    kept = {r[0] for r in silver_df(spark, lakehouse).select("order_id").collect()}
    assert kept == {f"o{i}" for i in range(10)} | {f"w{i}" for i in range(4)}


def test_a_batch_that_drops_or_quarantines_by_design_is_no_warning(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    """Rows dropped or quarantined by their rules are the spec's design: the batch's event is
    news (a warning) only when a ``warn`` rule broke."""
    rules = [{"name": "positive_quantity", "rule": "quantity > 0", "action": "quarantine"},
             {"name": "has_customer", "rule": "customer_id IS NOT NULL", "action": "drop"},
             {"name": "small_order", "rule": "quantity < 100", "action": "warn"}]
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(expectations=rules))
    schema = "order_id STRING, customer_id STRING, quantity INT, event_time TIMESTAMP"
    designed = [("o1", "c1", 1, BASE), ("q1", "c1", 0, BASE), ("d1", None, 2, BASE)]
    write_delta_commits(spark, bronze_location(lakehouse), [designed, [("w1", "c1", 500, BASE)]],
                        schema)
    with capture_logs() as events:
        summary, _ = run_silver(spark, lakehouse)
    committed = [(e["log_level"], e["quarantined_rows"], e["dropped_rows"])
                 for e in events if e["event"] == "silver.batch.committed"]
    assert committed == [("info", 1, 1), ("warning", 0, 0)]
    assert summary.counts["rule:small_order"] == 1


@pytest.mark.parametrize("dedup", [False, True], ids=["plain", "dedup"])
def test_a_fail_rule_stops_the_query_before_its_batch_commits(
    spark: SparkSession, lakehouse: Lakehouse, dedup: bool
) -> None:
    # (with dedup the batch is cached and counted first: the rule raises in that count)
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(expectations=[
        {"name": "sane_quantity", "rule": "quantity < 1000", "action": "fail"}],
        **({"event_time": "event_time", "dedup": {"keys": ["order_id"], "delay": "1 hour"}}
           if dedup else {})))
    good = [row(f"a{i}", "c1", 1, BASE) for i in range(5)]
    bad = [row(f"b{i}", "c1", 1, BASE) for i in range(5)] + [row("huge", "c1", 5000, BASE)]
    write_delta_commits(spark, bronze_location(lakehouse), [good, bad])

    summary, _ = run_silver(spark, lakehouse, ok=False)

    assert summary.status is RunStatus.FAILED
    assert "sane_quantity" in (summary.error or "")
    kept = sorted(r[0] for r in silver_df(spark, lakehouse).select("order_id").collect())
    assert kept == [f"a{i}" for i in range(5)]  # nothing of the failed batch
    # The run history: batch 0's row, and the failure, for batch 1 (in flight), with its error
    rows = run_history(spark, lakehouse, lakehouse.project().table("orders", Layer.SILVER)
                       .full_name)
    assert [(r["batch_id"], r["status"]) for r in rows] == [(0, "committed"), (1, "failed")]
    assert "sane_quantity" in rows[1]["error"] and rows[0]["rows_out"] == 5


def test_partitioned_table_has_partition_folders_and_a_filter_prunes(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(
        columns=[{"name": "order_id"}, {"name": "event_time"},
                 {"name": "order_date", "expr": "to_date(event_time)"}],
        partition_by=["order_date"]))
    rows = [row(f"o{d}_{i}", "c1", 1, BASE + timedelta(days=d)) for d in range(4) for i in range(3)]
    write_delta_commits(spark, bronze_location(lakehouse), [rows])

    run_silver(spark, lakehouse)

    location = Path(lakehouse.project().table("orders", Layer.SILVER).location)
    folders = sorted(p.name for p in location.iterdir() if p.name.startswith("order_date="))
    assert folders == [f"order_date=2026-11-0{d + 1}" for d in range(4)]
    query = silver_df(spark, lakehouse).where("order_date = DATE'2026-11-02'")
    plan = query._jdf.queryExecution().executedPlan().toString()
    assert "PartitionFilters: [isnotnull(order_date" in plan and "2026-11-02" in plan
    assert len(query.inputFiles()) == 1 and query.count() == 3


def test_bucketed_tables_join_and_aggregate_without_a_shuffle(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("bronze", "payments", bronze_spec())
    bucketed = {"format": "parquet", "bucket_by": ["customer_id"], "buckets": 4,
                "sort_by": ["customer_id"]}
    lakehouse.add_table("silver", "orders", silver_spec(**bucketed))
    lakehouse.add_table("silver", "payments", {**silver_spec(**bucketed),
                                               "source": {"table": "payments"}})
    orders = [row(f"o{i}", f"c{i % 13}", i % 7 + 1, BASE) for i in range(200)]
    payments = [row(f"p{i}", f"c{i % 11}", i % 5 + 1, BASE) for i in range(150)]
    write_delta_commits(spark, bronze_location(lakehouse), [orders[:100], orders[100:]])
    write_delta_commits(spark, bronze_location(lakehouse, "payments"), [payments])
    run_silver(spark, lakehouse, "orders")
    run_silver(spark, lakehouse, "payments")

    project = lakehouse.project()
    o = spark.table(project.table("orders", Layer.SILVER).full_name)
    p = spark.table(project.table("payments", Layer.SILVER).full_name)
    plain_o = spark.read.format("delta").load(bronze_location(lakehouse))
    plain_p = spark.read.format("delta").load(bronze_location(lakehouse, "payments"))

    def join(a: DataFrame, b: DataFrame) -> DataFrame:
        return a.alias("a").join(b.alias("b"), "customer_id").select(
            "customer_id", F.col("a.order_id").alias("o"), F.col("b.order_id").alias("p"))

    def agg(a: DataFrame) -> DataFrame:
        return a.groupBy("customer_id").agg(F.sum("quantity").alias("q"))

    previous = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        for bucketed_query, plain_query in ((join(o, p), join(plain_o, plain_p)),
                                            (agg(o), agg(plain_o))):
            bucketed_plan = bucketed_query._jdf.queryExecution().executedPlan().toString()
            plain_plan = plain_query._jdf.queryExecution().executedPlan().toString()
            assert "Exchange" not in bucketed_plan, bucketed_plan
            assert "Exchange" in plain_plan  # the same query on unbucketed tables shuffles
            assert_df_equality(bucketed_query, plain_query, ignore_row_order=True,
                               ignore_nullable=True)
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", previous)


def test_upsert_keeps_the_latest_row_per_key_and_a_replayed_batch_changes_nothing(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(
        mode="upsert", upsert={"keys": ["order_id"], "sequence_by": "event_time"}))
    first = [row("a", "c1", 1, BASE), row("b", "c1", 1, BASE), row("a", "c1", 2, BASE
                                                                   + timedelta(minutes=1))]
    second = [row("b", "c1", 9, BASE + timedelta(minutes=5)),  # newer: wins
              row("a", "c1", 7, BASE - timedelta(minutes=5)),  # older: ignored
              row("c", "c2", 3, BASE)]
    write_delta_commits(spark, bronze_location(lakehouse), [first, second])
    run_silver(spark, lakehouse)
    table = silver_df(spark, lakehouse).select("order_id", "quantity")
    want = spark.createDataFrame([("a", 2), ("b", 9), ("c", 3)], "order_id STRING, quantity INT")
    assert_df_equality(table, want, ignore_row_order=True, ignore_nullable=True)
    before = table.collect()

    # Forget that the last batch committed: the next start runs it again.
    checkpoint = Path(lakehouse.project().table("orders", Layer.SILVER).checkpoint)
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    summary, _ = run_silver(spark, lakehouse)

    assert summary.batches == 1  # the replay
    assert_df_equality(silver_df(spark, lakehouse).select("order_id", "quantity"),
                       spark.createDataFrame(before, table.schema), ignore_row_order=True)


def test_a_batch_appended_just_before_a_crash_is_replayed_once(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(expectations=[
        {"name": "positive_quantity", "rule": "quantity > 0", "action": "quarantine"}]))
    location = bronze_location(lakehouse)
    batches = [[row(f"{b}{i}", "c1", 1, BASE) for i in range(4)] + [row(f"{b}-zero", "c1", 0, BASE)]
               for b in ("a", "b")]
    write_delta_commits(spark, location, batches[:1])
    run_silver(spark, lakehouse)
    table = lakehouse.project().table("orders", Layer.SILVER)
    quarantine = table.companion_location("quarantine")
    # Batch 1 fails right after its silver commit (the quarantine refuses its rows), leaving
    # what a driver killed at that moment leaves: silver written, the batch not committed.
    spark.sql(f"ALTER TABLE delta.`{quarantine}` ADD CONSTRAINT crash CHECK (_batch_id <> 1)")
    write_delta_commits(spark, location, batches[1:])
    failed, _ = run_silver(spark, lakehouse, ok=False)
    assert failed.status is RunStatus.FAILED
    assert silver_df(spark, lakehouse).count() == 8
    spark.sql(f"ALTER TABLE delta.`{quarantine}` DROP CONSTRAINT crash")

    summary, _ = run_silver(spark, lakehouse)

    assert summary.batches == 1  # the replay
    assert (summary.rows_out, summary.counts["quarantined_rows"]) == (4, 1)
    expected = spark.createDataFrame([(f"{b}{i}",) for b in "ab" for i in range(4)],
                                     "order_id STRING")
    assert_df_equality(silver_df(spark, lakehouse).select("order_id"), expected,
                       ignore_row_order=True, ignore_nullable=True)  # none twice
    keys = spark.read.format("delta").load(quarantine).select(
        F.get_json_object("_row", "$.order_id").alias("order_id"))
    assert_df_equality(keys, spark.createDataFrame([("a-zero",), ("b-zero",)], "order_id STRING"),
                       ignore_row_order=True, ignore_nullable=True)


def test_cluster_by_creates_a_clustered_table_that_optimize_lays_out(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    from framework.delta import optimize

    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(cluster_by=["customer_id"]))
    commits = [[row(f"o{c}_{i}", f"c{i % 5}", 1, BASE) for i in range(20)] for c in range(3)]
    write_delta_commits(spark, bronze_location(lakehouse), commits)
    run_silver(spark, lakehouse)
    name = lakehouse.project().table("orders", Layer.SILVER).full_name

    detail = spark.sql(f"DESCRIBE DETAIL {name}").first()
    assert detail is not None and detail["clusteringColumns"] == ["customer_id"]
    result = optimize(spark, name)
    assert result["clustered"] and result["numFilesRemoved"] == 3


def test_config_errors_explain_bucketing_on_delta_and_unknown_sources(
    lakehouse: Lakehouse,
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(bucket_by=["customer_id"], buckets=4))
    lakehouse.add_table("silver", "items", {"source": "nothing_here"})
    lakehouse.add_table("silver", "both", silver_spec(partition_by=["a"], cluster_by=["b"]))
    with pytest.raises(ConfigValidationError) as err:
        lakehouse.project()
    text = str(err.value)
    assert "Delta rejects bucketing" in text and "cluster_by" in text
    assert "bronze.nothing_here" in text
    assert "either partition_by or cluster_by" in text


def test_silver_before_its_bronze_table_exists_says_to_run_bronze_first(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec())

    summary, _ = run_silver(spark, lakehouse, ok=False)

    assert summary.status is RunStatus.FAILED
    assert summary.error is not None
    assert "expected the source table bronze.orders" in summary.error
    assert "found no Delta table there (run its layer first)" in summary.error
