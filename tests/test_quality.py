"""Table-level checks (framework.quality): a key unique across the table, whatever batch or run
brings a row again."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
import yaml
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from structlog.testing import capture_logs

from framework.config.model import Layer
from framework.job import RunContext, RunStatus, TableRunSummary
from silver.job import SilverJob
from tests.support import Lakehouse, bronze_spec, silver_spec, write_delta_commits

BASE = datetime(2026, 11, 1, 8, 0, 0)


def run(spark: SparkSession, lakehouse: Lakehouse, ok: bool = True) -> TableRunSummary:
    summary = SilverJob(spark, lakehouse.project().table("orders", Layer.SILVER),
                        RunContext()).run()
    if ok:
        assert summary.status is RunStatus.SUCCEEDED, summary.error
    return summary


def row(key: str | None, quantity: int, minutes: int) -> tuple[Any, ...]:
    return (key, "c1", quantity, BASE + timedelta(minutes=minutes), 0)


def order_ids(spark: SparkSession, location: str, column: str = "order_id") -> list[Any]:
    return sorted((r[0] for r in spark.read.format("delta").load(location)
                   .select(column).collect()), key=str)


def quarantined(spark: SparkSession, lakehouse: Lakehouse) -> list[tuple[str, list[str]]]:
    location = lakehouse.project().table("orders", Layer.SILVER).companion_location("quarantine")
    return sorted((r[0], list(r[1])) for r in spark.read.format("delta").load(location).select(
        F.concat(F.get_json_object("_row", "$.order_id"), F.lit("@"),
                 F.get_json_object("_row", "$.quantity")), "_failed_rules").collect())


def results(spark: SparkSession, lakehouse: Lakehouse) -> list[tuple[Any, ...]]:
    """The table's rows of ``<ops>.quality``: (batch, check, action, passed, rows affected)."""
    from framework.quality import quality_table

    table = lakehouse.project().table("orders", Layer.SILVER)
    rows = spark.read.format("delta").load(quality_table(table.env)[1]) \
        .where(F.col("table") == table.full_name).collect()
    assert all(r["kind"] == "unique" and r["threshold"] == "0" and r["run_id"] for r in rows)
    assert all(r["observed"] == str(r["rows_affected"]) for r in rows)
    return sorted((r["batch_id"], r["check"], r["action"], r["passed"], r["rows_affected"])
                  for r in rows)


def setup_unique(lakehouse: Lakehouse, action: str = "quarantine", **spec: Any) -> str:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(
        checks=[{"unique": ["order_id"], "action": action}], **spec))
    return lakehouse.project().table("orders", Layer.BRONZE).location


def test_a_key_sent_again_after_the_dedup_watermark_is_quarantined_not_written_twice(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    """Dedup forgets a key once the watermark passes it; the unique check does not: the
    re-sent row goes to the quarantine, counted under the check's name."""
    bronze = setup_unique(lakehouse, event_time="event_time",
                          dedup={"keys": ["order_id"], "delay": "10 minutes"})
    first = [row(f"o{i}", 1, i) for i in range(5)]
    later = [row(f"p{i}", 1, 120 + i) for i in range(5)]  # moves the watermark past o*
    after = [row("p5", 1, 125)]  # (the state forgets o* in the batch after the watermark moved)
    again = [row("o1", 2, 126), row("p9", 1, 127)]  # o1 sent again two hours later
    write_delta_commits(spark, bronze, [first, later, after, again])

    summary = run(spark, lakehouse)

    silver = lakehouse.project().table("orders", Layer.SILVER)
    assert order_ids(spark, silver.location) == sorted(
        [f"o{i}" for i in range(5)] + [f"p{i}" for i in range(6)] + ["p9"])
    assert summary.counts["duplicates_dropped"] == 0  # dedup no longer knew o1
    assert summary.counts["rule:unique_order_id"] == 1
    assert summary.counts["quarantined_rows"] == 1
    assert quarantined(spark, lakehouse) == [("o1@2", ["unique_order_id"])]


def test_a_key_twice_in_one_batch_keeps_the_earliest_and_across_runs_is_caught(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    bronze = setup_unique(lakehouse, event_time="event_time")
    # in one batch: k1 three times (the earliest, quantity 1, is kept), k2 once, a NULL key twice
    write_delta_commits(spark, bronze, [[row("k1", 3, 5), row("k1", 1, 1), row("k2", 1, 2),
                                         row("k1", 2, 3), row(None, 1, 1), row(None, 2, 1)]])
    first = run(spark, lakehouse)
    write_delta_commits(spark, bronze, [[row("k2", 9, 30), row("k3", 1, 30)]])
    second = run(spark, lakehouse)

    silver = lakehouse.project().table("orders", Layer.SILVER)
    got = spark.read.format("delta").load(silver.location).select("order_id", "quantity")
    want = spark.createDataFrame([("k1", 1), ("k2", 1), ("k3", 1), (None, 1), (None, 2)],
                                 "order_id STRING, quantity INT")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    assert (first.counts["rule:unique_order_id"], second.counts["rule:unique_order_id"]) == (2, 1)
    assert quarantined(spark, lakehouse) == [
        ("k1@2", ["unique_order_id"]), ("k1@3", ["unique_order_id"]),
        ("k2@9", ["unique_order_id"])]
    assert results(spark, lakehouse) == [(0, "unique_order_id", "quarantine", False, 2),
                                         (1, "unique_order_id", "quarantine", False, 1)]


def test_the_kept_row_of_a_key_is_one_no_other_rule_rejects(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    """Of a key's rows, a row quarantined by a row rule does not take the key: the good row
    is written even when it comes later in event time."""
    bronze = setup_unique(lakehouse, event_time="event_time", expectations=[
        {"name": "positive_quantity", "rule": "quantity > 0", "action": "quarantine"}])
    write_delta_commits(spark, bronze, [[row("k1", 0, 1), row("k1", 4, 2)]])

    run(spark, lakehouse)

    silver = lakehouse.project().table("orders", Layer.SILVER)
    assert order_ids(spark, silver.location, "quantity") == [4]
    assert quarantined(spark, lakehouse) == [("k1@0", ["positive_quantity"])]


@pytest.mark.parametrize("action", ["warn", "fail"])
def test_warn_writes_the_duplicate_and_counts_it_fail_writes_nothing_of_the_batch(
    spark: SparkSession, lakehouse: Lakehouse, action: str
) -> None:
    bronze = setup_unique(lakehouse, action=action)
    write_delta_commits(spark, bronze, [[row("k1", 1, 1)], [row("k2", 1, 2), row("k1", 2, 3)]])

    summary = run(spark, lakehouse, ok=action == "warn")

    silver = lakehouse.project().table("orders", Layer.SILVER)
    if action == "warn":
        assert order_ids(spark, silver.location) == ["k1", "k1", "k2"]
        assert summary.counts["rule:unique_order_id"] == 1
        assert results(spark, lakehouse) == [(0, "unique_order_id", "warn", True, 0),
                                             (1, "unique_order_id", "warn", False, 1)]
    else:
        assert summary.status is RunStatus.FAILED
        assert "unique_order_id" in (summary.error or "")
        assert order_ids(spark, silver.location) == ["k1"]  # nothing of batch 1


def test_a_batch_replayed_after_its_table_commit_judges_its_keys_as_before_it(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    """A driver killed between a batch's table commit and its quarantine's: the replay reads
    the table as it was before the batch, so its own rows are not taken for duplicates and the
    one duplicate is quarantined once."""
    bronze = setup_unique(lakehouse)
    write_delta_commits(spark, bronze, [[row("a1", 1, 1), row("a2", 1, 1)]])
    run(spark, lakehouse)
    silver = lakehouse.project().table("orders", Layer.SILVER)
    quarantine = silver.companion_location("quarantine")
    spark.sql(f"ALTER TABLE delta.`{quarantine}` ADD CONSTRAINT crash CHECK (_batch_id <> 1)")
    write_delta_commits(spark, bronze, [[row("b1", 1, 2), row("b2", 1, 2), row("a1", 5, 2)]])
    failed = run(spark, lakehouse, ok=False)
    assert failed.status is RunStatus.FAILED
    assert order_ids(spark, silver.location) == ["a1", "a2", "b1", "b2"]  # committed before
    spark.sql(f"ALTER TABLE delta.`{quarantine}` DROP CONSTRAINT crash")

    summary = run(spark, lakehouse)

    assert summary.batches == 1  # the replay
    assert (summary.rows_out, summary.counts["quarantined_rows"]) == (2, 1)
    assert order_ids(spark, silver.location) == ["a1", "a2", "b1", "b2"]
    assert quarantined(spark, lakehouse) == [("a1@5", ["unique_order_id"])]
    assert results(spark, lakehouse) == [(0, "unique_order_id", "quarantine", True, 0),
                                         (1, "unique_order_id", "quarantine", False, 1)]


def test_unique_checks_are_validated_against_the_columns_and_the_mode(
    lakehouse: Lakehouse
) -> None:
    from framework.errors import ConfigValidationError

    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(
        columns=[{"name": "order_id"}, {"name": "quantity"}], checks=[{"unique": ["order_ref"]}]))
    with pytest.raises(ConfigValidationError, match=r"checks\[0\]\.unique.*order_ref"):
        lakehouse.project()

    lakehouse.add_table("silver", "orders", silver_spec(
        checks=[{"unique": ["order_id"], "action": "hold"}]))
    hold = r"checks\[0\].*expected warn, quarantine or fail for unique .*found 'hold'"
    with pytest.raises(ConfigValidationError, match=hold):
        lakehouse.project()

    lakehouse.add_table("silver", "orders", silver_spec(
        mode="upsert", upsert={"keys": ["order_id"], "sequence_by": "event_time"},
        checks=[{"unique": ["order_id"]}]))
    with pytest.raises(ConfigValidationError, match="unique checks on a table of mode append"):
        lakehouse.project()


# ---------------------------------------------------------------------- checks of a run's table
def run_results_of(spark: SparkSession, lakehouse: Lakehouse) -> list[tuple[Any, ...]]:
    """The table's run-level rows of ``<ops>.quality``: (check, kind, passed, observed)."""
    from framework.quality import quality_table

    table = lakehouse.project().table("orders", Layer.SILVER)
    rows = spark.read.format("delta").load(quality_table(table.env)[1]) \
        .where((F.col("table") == table.full_name) & F.col("batch_id").isNull()).collect()
    return [(r["check"], r["kind"], r["passed"], r["observed"])
            for r in sorted(rows, key=lambda r: (r["recorded_at"], r["check"]))]


def failing_in_status(lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """``medallion status``'s lines of failing checks (read without Spark): table, check."""
    from tests.support import cli

    capsys.readouterr()
    assert cli(lakehouse, "status") == 0
    out = capsys.readouterr().out.splitlines()
    if not any(line.startswith("table") and "failing check" in line for line in out):
        return []
    start = next(i for i, line in enumerate(out) if "failing check" in line)
    return [" ".join(c.strip() for c in line.split("|")[:2]) for line in out[start + 2:]
            if line.strip() and not line.startswith("(")]


def test_a_stale_table_fails_its_run_with_a_fail_freshness_check_and_the_exit_code_says_so(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    """Event times four weeks old: the rows are written, then the freshness check fails the
    table's run (and ``medallion run``'s exit code); a check by commit passes the same run."""
    from tests.support import cli

    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(event_time="event_time", checks=[
        {"freshness": "1 day", "action": "fail"},
        {"freshness": "1 hour", "by": "commit", "name": "written_lately"}]))
    bronze = lakehouse.project().table("orders", Layer.BRONZE).location
    write_delta_commits(spark, bronze, [[row("k1", 1, 1), row("k2", 1, 2)]])

    summary = run(spark, lakehouse, ok=False)

    assert summary.status is RunStatus.FAILED and summary.rows_out == 2
    assert (summary.error or "").startswith(
        "check 'freshness' failed: expected a newest event time at most 1 day old, found "
        "newest event time 2026-11-01 08:02:00, "), summary.error
    silver = lakehouse.project().table("orders", Layer.SILVER)
    assert order_ids(spark, silver.location) == ["k1", "k2"]  # written all the same
    (fresh, by_commit) = run_results_of(spark, lakehouse)
    assert fresh[:3] == ("freshness", "freshness", False)
    assert by_commit[:3] == ("written_lately", "freshness", True)
    assert failing_in_status(lakehouse, capsys) == [f"{silver.full_name} freshness"]

    now = datetime.now().replace(microsecond=0)  # (naive, local: as PySpark gives TIMESTAMPs)
    write_delta_commits(spark, bronze, [[("k3", "c1", 1, now, 0)]])
    assert cli(lakehouse, "run", "silver") == 0  # fresh again
    assert failing_in_status(lakehouse, capsys) == []
    write_delta_commits(spark, bronze, [[("k4", "c1", 1, BASE, 0)]])
    assert cli(lakehouse, "run", "silver") == 0  # (the newest event time is k3's)
    lakehouse.add_table("silver", "orders", silver_spec(event_time="event_time", checks=[
        {"freshness": "1 second", "action": "fail"}]))
    assert cli(lakehouse, "run", "silver") == 1
    assert [r[2] for r in run_results_of(spark, lakehouse)] == [
        False, True, True, True, True, True, False]


def test_volume_bounds_absolute_and_against_the_recent_runs(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(checks=[
        {"volume": {"min": 3}, "name": "enough"},
        {"volume": {"recent_runs": 2, "low": 0.5, "high": 2}, "name": "usual"}]))
    bronze = lakehouse.project().table("orders", Layer.BRONZE).location
    for count in (10, 12, 3, 40):
        write_delta_commits(spark, bronze, [[row(f"r{count}_{i}", 1, i) for i in range(count)]])
        assert run(spark, lakehouse).rows_out == count  # warn: the runs succeed
    assert run_results_of(spark, lakehouse) == [
        ("enough", "volume", True, "10 rows written"),
        ("usual", "volume", True, "10 rows written"),  # no earlier run: no bound yet
        ("enough", "volume", True, "12 rows written"),
        ("usual", "volume", True, "12 rows written"),  # 5..20 (median 10)
        ("enough", "volume", True, "3 rows written"),
        ("usual", "volume", False, "3 rows written"),  # 6..22 (median 11)
        ("enough", "volume", True, "40 rows written"),
        ("usual", "volume", False, "40 rows written"),  # 4..15 (median of 12 and 3: 7.5)
    ]
    thresholds = spark.read.format("delta").load(
        __import__("framework.quality", fromlist=["quality_table"]).quality_table(
            lakehouse.project().env)[1]).where(F.col("check") == "usual") \
        .orderBy("recorded_at").select("threshold").collect()
    assert thresholds[-1][0] == ("between 4 and 15 rows written (the median of the last 2 "
                                 "runs writing rows is 7.5)")


def test_run_checks_are_validated(lakehouse: Lakehouse) -> None:
    from framework.errors import ConfigValidationError

    lakehouse.add_table("bronze", "orders", bronze_spec())
    for checks, message in (
        ([{"freshness": "1 day"}], r"checks\[0\]\.by: expected event_time in the spec"),
        ([{"freshness": "a while", "by": "commit"}], r"expected an interval such as"),
        ([{"volume": {"min": 5, "max": 2}}], r"expected min <= max"),
        ([{"volume": {"recent_runs": 3}}], r"expected low and/or high"),
        ([{"volume": {"min": 1}, "action": "quarantine"}], r"expected warn or fail"),
        ([{"volume": {"min": 1}, "action": "hold"}], r"expected warn or fail .*found .hold."),
        ([{"uniqe": ["order_id"]}],
         r"expected one of the keys unique, references, freshness or volume"),
    ):
        lakehouse.add_table("silver", "orders", silver_spec(checks=checks))
        with pytest.raises(ConfigValidationError, match=message):
            lakehouse.project()


def test_a_gold_aggregate_checks_its_freshness_by_window_and_its_volume(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    """The newest window of a gold aggregate dates it: windows of four weeks ago fail a
    one-day freshness; its run wrote its windows all the same. A unique check is refused."""
    from framework.errors import ConfigValidationError
    from framework.layers import job_class
    from framework.quality import quality_table
    from tests.test_gold import SALES, aggregate_spec, sales_commits, with_silver_orders

    with_silver_orders(lakehouse)
    lakehouse.add_table("gold", "store_sales", aggregate_spec(
        {"type": "tumbling", "duration": "10 minutes"}, checks=[
            {"freshness": "1 day", "action": "fail"}, {"volume": {"min": 1}}]))
    commits, _ = sales_commits()
    write_delta_commits(spark, lakehouse.project().table("orders", Layer.SILVER).location,
                        commits, SALES)
    table = lakehouse.project().table("store_sales", Layer.GOLD)

    summary = job_class(table)(spark, table, RunContext()).run()

    assert summary.status is RunStatus.FAILED and summary.rows_out > 0
    assert (summary.error or "").startswith(
        "check 'freshness' failed: expected a newest event time at most 1 day old, found "
        "newest event time 2026-11-01 08:"), summary.error
    rows = spark.read.format("delta").load(quality_table(table.env)[1]) \
        .where(F.col("table") == table.full_name).collect()
    assert sorted((r["check"], r["passed"]) for r in rows) == [
        ("freshness", False), ("volume", True)]
    # what status shows: read without Spark on this lake, with Spark on others, alike
    from framework.quality import failing_checks

    failing = failing_checks(table.env)
    assert [(f["table"], f["check"], f["kind"]) for f in failing] == [
        (table.full_name, "freshness", "freshness")]
    assert failing_checks(table.env, spark) == failing

    lakehouse.add_table("gold", "store_sales", aggregate_spec(
        {"type": "tumbling", "duration": "10 minutes"}, checks=[{"unique": ["store_id"]}]))
    with pytest.raises(ConfigValidationError, match="expected freshness or volume checks"):
        lakehouse.project()


# ---------------------------------------------------------------------- references
SALES = "order_id STRING, store_id STRING, amount INT, event_time TIMESTAMP"


def with_stores_and_sales(spark: SparkSession, lakehouse: Lakehouse, stores: list[str],
                          action: str = "quarantine") -> tuple[str, str]:
    """silver.sales referencing silver.stores (written here, as its run would); the
    locations of bronze.sales and silver.stores."""
    lakehouse.add_table("bronze", "stores", bronze_spec(schema="store_id STRING, name STRING",
                                                        path="landing/stores"))
    lakehouse.add_table("silver", "stores", {"source": "stores"})
    lakehouse.add_table("bronze", "sales", bronze_spec(schema=SALES, path="landing/sales"))
    lakehouse.add_table("silver", "sales", {"source": {"table": "sales",
                                                       "max_files_per_trigger": 1},
                                            "checks": [{"references": {
                                                "column": "store_id", "table": "stores"},
                                                "action": action}]})
    project = lakehouse.project()
    dims = project.table("stores", Layer.SILVER).location
    write_delta_commits(spark, dims, [[(s, f"store {s}") for s in stores]],
                        "store_id STRING, name STRING")
    return project.table("sales", Layer.BRONZE).location, dims


def sale(order_id: str, store: str | None) -> tuple[Any, ...]:
    return (order_id, store, 10, BASE)


def run_sales(spark: SparkSession, lakehouse: Lakehouse, ok: bool = True) -> TableRunSummary:
    summary = SilverJob(spark, lakehouse.project().table("sales", Layer.SILVER),
                        RunContext()).run()
    if ok:
        assert summary.status is RunStatus.SUCCEEDED, summary.error
    return summary


def test_a_row_for_a_store_the_dimension_lacks_is_quarantined_null_passes(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    bronze, _ = with_stores_and_sales(spark, lakehouse, ["s1", "s2"])
    assert [t.name for t in lakehouse.project().in_flow_order(
        [lakehouse.project().table("sales", Layer.SILVER),
         lakehouse.project().table("stores", Layer.SILVER)])] == ["stores", "sales"]
    write_delta_commits(spark, bronze, [[sale("a", "s1"), sale("b", "s3"), sale("c", None),
                                         sale("d", "s2")]], SALES)

    summary = run_sales(spark, lakehouse)

    sales = lakehouse.project().table("sales", Layer.SILVER)
    assert order_ids(spark, sales.location) == ["a", "c", "d"]
    assert summary.counts["rule:store_id_in_stores"] == 1
    quarantine = spark.read.format("delta").load(sales.companion_location("quarantine"))
    assert [(json.loads(r["_row"])["order_id"], list(r["_failed_rules"]))
            for r in quarantine.collect()] == [("b", ["store_id_in_stores"])]


def test_a_replayed_batch_judges_its_references_by_the_dimension_its_first_run_found(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    """The batch's rows commit, its quarantine does not (a crash); then the store arrives.
    The replay reads the store table at the version the first run read (noted in the batch's
    commit), so the row is quarantined as decided, not lost between the two."""
    bronze, dims = with_stores_and_sales(spark, lakehouse, ["s1"])
    sales = lakehouse.project().table("sales", Layer.SILVER)
    write_delta_commits(spark, bronze, [[sale("a", "s1")]], SALES)
    run_sales(spark, lakehouse)
    quarantine = sales.companion_location("quarantine")
    spark.sql(f"ALTER TABLE delta.`{quarantine}` ADD CONSTRAINT crash CHECK (_batch_id <> 1)")
    write_delta_commits(spark, bronze, [[sale("b", "s1"), sale("c", "s9")]], SALES)
    assert run_sales(spark, lakehouse, ok=False).status is RunStatus.FAILED
    assert order_ids(spark, sales.location) == ["a", "b"]
    spark.sql(f"ALTER TABLE delta.`{quarantine}` DROP CONSTRAINT crash")
    write_delta_commits(spark, dims, [[("s9", "store s9")]], "store_id STRING, name STRING")

    summary = run_sales(spark, lakehouse)

    assert summary.batches == 1 and summary.counts["quarantined_rows"] == 1
    assert order_ids(spark, sales.location) == ["a", "b"]
    rows = spark.read.format("delta").load(quarantine).collect()
    assert [json.loads(r["_row"])["order_id"] for r in rows] == ["c"]
    # a new batch reads the store table as it is now
    write_delta_commits(spark, bronze, [[sale("d", "s9")]], SALES)
    run_sales(spark, lakehouse)
    assert order_ids(spark, sales.location) == ["a", "b", "d"]


def test_references_are_validated_against_the_referenced_table(lakehouse: Lakehouse) -> None:
    from framework.config.loader import load_checked

    lakehouse.add_table("bronze", "stores", bronze_spec(schema="store_id STRING, name STRING",
                                                        path="landing/stores"))
    lakehouse.add_table("silver", "stores", {"source": "stores"})
    lakehouse.add_table("bronze", "sales", bronze_spec(schema=SALES, path="landing/sales"))
    for checks, message in (
        ([{"references": {"column": "store_id", "table": "stores", "key": "store"}}],
         r"checks\[0\]\.references\.key: expected a column of .*stores.*found 'store'"),
        ([{"references": {"column": "store_id", "table": "shops"}}], r"shops"),
    ):
        lakehouse.add_table("silver", "sales", {"source": "sales", "checks": checks})
        _, errors = load_checked(lakehouse.conf, lakehouse.env_name, columns=True)
        assert any(re.search(message, str(e)) for e in errors), errors


def silver_sales(spark: SparkSession, lakehouse: Lakehouse) -> list[Any]:
    sales = lakehouse.project().table("sales", Layer.SILVER)
    return sorted((r["order_id"], r["store_id"]) for r in
                  spark.read.format("delta").load(sales.location).collect())


def held_rows(spark: SparkSession, lakehouse: Lakehouse) -> list[Any]:
    held = lakehouse.project().table("sales", Layer.SILVER).companion_location("held")
    return sorted((r["order_id"], list(r["_held_by"])) for r in
                  spark.read.format("delta").load(held).collect())


def test_a_sale_before_its_store_is_held_then_released_once_even_after_a_stop(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    """Sales of s2 and s3 arrive before their stores: held. s2 arrives: the next run releases
    its sale (a stop between the release's table append and its rewrite of the held rows
    changes nothing: the next run completes it), s3's stays held; the table ends as a run
    whose stores came first. Then s3's sale, held past max_hold, goes to the quarantine."""
    bronze, dims = with_stores_and_sales(spark, lakehouse, ["s1"], action="hold")
    write_delta_commits(spark, bronze, [[sale("a", "s1"), sale("b", "s2"), sale("c", "s3")]],
                        SALES)
    first = run_sales(spark, lakehouse)
    assert (first.rows_out, first.counts["held_rows"]) == (1, 2)
    assert silver_sales(spark, lakehouse) == [("a", "s1")]
    assert held_rows(spark, lakehouse) == [("b", ["store_id_in_stores"]),
                                           ("c", ["store_id_in_stores"])]

    write_delta_commits(spark, dims, [[("s2", "store s2")]], "store_id STRING, name STRING")
    held = lakehouse.project().table("sales", Layer.SILVER).companion_location("held")
    spark.sql(f"ALTER TABLE delta.`{held}` SET TBLPROPERTIES ('delta.appendOnly' = 'true')")
    with capture_logs() as events:
        assert run_sales(spark, lakehouse, ok=False).status is RunStatus.FAILED
    assert silver_sales(spark, lakehouse) == [("a", "s1"), ("b", "s2")]  # appended, then stopped
    # the release said so before its writes (bench/chaos.py's phase 'release' opens on it)
    assert [(e["ready_rows"], e["expired_rows"], e["finishing"]) for e in events
            if e["event"] == "silver.held.releasing"] == [(1, 0, False)]
    spark.sql(f"ALTER TABLE delta.`{held}` SET TBLPROPERTIES ('delta.appendOnly' = 'false')")

    with capture_logs() as events:
        again = run_sales(spark, lakehouse)

    assert again.counts["released_rows"] == 1  # (the count of the release it completed)
    assert [(e["ready_rows"], e["finishing"]) for e in events
            if e["event"] == "silver.held.releasing"] == [(1, True)]
    assert silver_sales(spark, lakehouse) == [("a", "s1"), ("b", "s2")]  # once
    assert held_rows(spark, lakehouse) == [("c", ["store_id_in_stores"])]
    assert run_sales(spark, lakehouse).counts["released_rows"] == 0

    spec = yaml.safe_load((lakehouse.conf / "tables" / "silver" / "sales.yaml").read_text())
    spec["checks"][0]["max_hold"] = "1 second"  # (7 days by default)
    lakehouse.add_table("silver", "sales", spec)
    time.sleep(1.5)
    expired = run_sales(spark, lakehouse)
    assert expired.counts["expired_rows"] == 1 and held_rows(spark, lakehouse) == []
    quarantine = lakehouse.project().table("sales", Layer.SILVER) \
        .companion_location("quarantine")
    assert [(json.loads(r["_row"])["order_id"], sorted(r["_failed_rules"])) for r in
            spark.read.format("delta").load(quarantine).collect()] == [
        ("c", ["held_past_max_hold", "store_id_in_stores"])]


def test_a_refresh_empties_the_held_rows_with_the_table_so_none_is_released_twice(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    """A refresh rebuilds the table from its source, whose rows are held again: those held
    before go with the table, or the store's arrival would release its sale twice."""
    from tests.support import cli

    bronze, dims = with_stores_and_sales(spark, lakehouse, ["s1"], action="hold")
    write_delta_commits(spark, bronze, [[sale("a", "s1"), sale("b", "s2")]], SALES)
    run_sales(spark, lakehouse)

    assert cli(lakehouse, "refresh", "silver.sales") == 0

    assert silver_sales(spark, lakehouse) == [("a", "s1")]
    assert held_rows(spark, lakehouse) == [("b", ["store_id_in_stores"])]
    write_delta_commits(spark, dims, [[("s2", "store s2")]], "store_id STRING, name STRING")
    assert run_sales(spark, lakehouse).counts["released_rows"] == 1
    assert silver_sales(spark, lakehouse) == [("a", "s1"), ("b", "s2")]
