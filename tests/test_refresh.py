"""``medallion refresh``: a changed silver expression rebuilt with the tables downstream equals
a lake built fresh with the new spec; a refresh stopped after its checkpoints were set aside,
or with silver alone rebuilt, is completed by the next command; a rebuild that fails stays
open, losing nothing, until a run with the cause fixed completes it."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from framework.config.model import Layer, RebuildMethod
from framework.job import RunContext, RunSummary
from framework.journal import Journal, JournalState
from framework.refresh import Refresh, plan_refresh
from framework.runner import run_tables
from framework.storage import LocalStorage
from framework.timeslice import TimeSlice
from tests.support import (
    CliRun,
    Lakehouse,
    bronze_spec,
    cli,
    order,
    run_history,
    source_rows_without,
    write_json_lines,
)

AMOUNT = "quantity * 2"
# bronze's columns of when and where (and in which batch) a row was ingested
INGESTED = {"_source_file", "_file_modification_time", "_ingested_at", "_batch_id"}
GOLD = {"description": "amounts per customer and day", "source": "orders",
        "event_time": "event_time", "watermark": "1 hour",
        "window": {"type": "tumbling", "duration": "1 day"}, "group_by": ["customer_id"],
        "aggregates": [{"name": "amount", "expr": "sum(amount)"},
                       {"name": "orders", "expr": "count(*)"}],
        "output_mode": "update"}


def silver(amount: str = AMOUNT, **extra: Any) -> dict[str, Any]:
    return {"description": "orders", "source": {"table": "orders"},
            "columns": [{"name": "order_id"}, {"name": "customer_id"}, {"name": "quantity"},
                        {"name": "event_time"},
                        {"name": "amount", "expr": amount, "type": "bigint"}],
            "event_time": "event_time",
            "expectations": [{"name": "more_than_one", "rule": "quantity > 1",
                              "action": "quarantine"}, *extra.pop("expectations", [])],
            "dedup": {"keys": ["order_id"], "delay": "1 hour"}, **extra}


def lake(base: Path) -> Lakehouse:
    """Bronze orders from 3 files (an order sent twice), silver (a quarantine rule, dedup)
    and a gold aggregate of silver."""
    lakehouse = Lakehouse(base)
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver())
    lakehouse.add_table("gold", "customer_sales", GOLD)
    for f in range(3):
        write_json_lines(lakehouse.path("landing", "orders", f"part-{f}.json"),
                         [order(i) for i in range(f * 10, f * 10 + 10)] + [order(f * 10)])
    return lakehouse


@pytest.fixture(scope="module")
def fresh(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Lakehouse:
    """The lake built once from the start with the new spec (amount = quantity * 3), which a
    refreshed lake must equal."""
    lakehouse = lake(tmp_path_factory.mktemp("fresh"))
    lakehouse.add_table("silver", "orders", silver("quantity * 3"))
    assert cli(lakehouse, "run", "all") == 0
    return lakehouse


def delta(spark: SparkSession, lakehouse: Lakehouse, layer: str, name: str) -> DataFrame:
    return spark.read.format("delta").load(str(lakehouse.path("tables", layer, name)))


def version(spark: SparkSession, lakehouse: Lakehouse, layer: str, name: str) -> int:
    location = lakehouse.path("tables", layer, name)
    row = spark.sql(f"DESCRIBE HISTORY delta.`{location}` LIMIT 1").first()
    assert row is not None
    return int(row["version"])


def assert_same_tables(spark: SparkSession, a: Lakehouse, b: Lakehouse) -> None:
    """Silver, its quarantine and gold hold the same rows in ``a`` and ``b`` (the columns that
    say when or in which batch a row was written left out)."""
    for layer, name in (("silver", "orders"), ("silver", "orders_quarantine"),
                        ("gold", "customer_sales")):
        left, right = (source_rows_without(delta(spark, lake, layer, name), INGESTED)
                       for lake in (a, b))
        kept = [c for c in left.columns if c not in ("_batch_id", "_quarantined_at")]
        assert_df_equality(left.select(*kept), right.select(*kept), ignore_row_order=True,
                           ignore_nullable=True)


def closed_states(lakehouse: Lakehouse) -> list[JournalState]:
    journal = Journal(LocalStorage(), str(lakehouse.root))
    assert not (lakehouse.root / "_refresh" / "journal").exists()
    ops = sorted(p.name for p in (lakehouse.root / "_refresh" / "closed").iterdir())
    return [r.state for r in journal.closed(ops[-1])]


def test_a_changed_silver_expression_refreshed_downstream_equals_a_fresh_lake(
    spark: SparkSession, tmp_path: Path, fresh: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    a = lake(tmp_path / "a")
    assert cli(a, "run", "all") == 0
    bronze = (version(spark, a, "bronze", "orders"), delta(spark, a, "bronze", "orders").count())
    assert delta(spark, a, "silver", "orders_quarantine").count() > 0
    a.add_table("silver", "orders", silver("quantity * 3"))
    before = version(spark, a, "silver", "orders")
    capsys.readouterr()

    # validate (a process of its own, as a person runs it) names the stale rows and the
    # command; gold's own spec is unchanged
    code, out = CliRun(["validate"], a.cli_env()).finish()
    assert code == 0, out
    warned = [line for line in out.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1, warned
    assert f"{a.schemas['silver']}.orders were written under another spec" in \
        warned[0]
    assert "columns[amount] was 'quantity * 2 :: bigint', the spec now says " \
        "'quantity * 3 :: bigint'" in warned[0]
    assert warned[0].endswith("medallion refresh silver.orders --downstream")

    # gold reads silver: refused without --downstream, naming it
    assert cli(a, "refresh", "silver.orders") == 2
    err = capsys.readouterr().err
    assert f"{a.schemas['gold']}.customer_sales" in err and "--downstream" in err
    # the plan, in flow order, and nothing done
    assert cli(a, "refresh", "silver.orders", "--downstream", "--dry-run") == 0
    plan = capsys.readouterr().out
    assert plan.index(f"{a.schemas['silver']}.orders") < \
        plan.index(f"{a.schemas['gold']}.customer_sales")
    assert "orders_quarantine" in plan and "set aside until the rebuild commits" in plan
    assert version(spark, a, "silver", "orders") == before
    assert not (a.root / "_refresh").exists()

    assert cli(a, "refresh", "silver.orders", "--downstream") == 0
    assert "refresh done" in capsys.readouterr().out
    assert_same_tables(spark, a, fresh)
    assert delta(spark, a, "silver", "orders").where("amount != quantity * 3").count() == 0
    # bronze untouched; the old checkpoints gone with the journal, which closed done
    assert (version(spark, a, "bronze", "orders"),
            delta(spark, a, "bronze", "orders").count()) == bronze
    assert closed_states(a)[-1] is JournalState.DONE
    assert not list((a.root / "_refresh").glob("r-*"))
    capsys.readouterr()
    assert cli(a, "validate") == 0
    assert "warning:" not in capsys.readouterr().out  # the rebuild recorded the new spec
    # the run history names the refresh on the rows of the rebuild, and on those only
    op = sorted(p.name for p in (a.root / "_refresh" / "closed").iterdir())[-1]
    marked = {(r["table"].rsplit(".", 1)[-1], r["operation"]) for r in run_history(spark, a)}
    assert marked == {("orders", None), ("customer_sales", None), ("orders", op),
                      ("customer_sales", op)}


def stopped_after(spark: SparkSession, lakehouse: Lakehouse, step: JournalState) -> None:
    """A refresh of silver.orders and downstream, as a command killed right after recording
    ``step`` leaves it (for REBUILT: with silver alone rebuilt, gold not yet)."""
    project = lakehouse.project()
    ctx = RunContext()

    def silver_only(spark: SparkSession, project: Any, tables: Any, ctx: RunContext
                    ) -> RunSummary:
        summary = run_tables(spark, project, [t for t in tables if t.layer is Layer.SILVER],
                             ctx)
        raise SystemExit(f"killed after {summary.tables[0].table}")  # (the process dies)

    refresh = Refresh(spark, project, ctx, silver_only)
    refresh.journal.begin(*_kind_and_plan(spark, lakehouse))
    records = refresh.journal.records()
    op, plan = records[0].op, _plan(records)
    refresh._set_aside(op, plan, refresh.log)
    if step is JournalState.PLANNED:  # one checkpoint moved, its step not recorded
        return
    refresh.journal.append(JournalState.SET_ASIDE)
    if step is JournalState.SET_ASIDE:
        return
    refresh._reset(op, plan, refresh.log)
    refresh.journal.append(JournalState.RESET)
    with pytest.raises(SystemExit):
        refresh._rebuild(op, plan, refresh.log)


def _kind_and_plan(spark: SparkSession, lakehouse: Lakehouse) -> tuple[Any, dict[str, Any]]:
    from framework.journal import OperationKind

    plan = plan_refresh(spark, lakehouse.project(), ["silver.orders"], downstream=True)
    return OperationKind.REFRESH, {"plan": plan.to_json()}


def _plan(records: list[Any]) -> Any:
    from framework.refresh import RefreshPlan

    return RefreshPlan.from_json(records[0].body["plan"])


def test_a_plan_journaled_before_the_rename_of_replay_reads_as_before() -> None:
    """A refresh left open by the previous version (its slice under ``replay_slice``, a feed's
    method ``replay``) is completed as it was planned: the same slice, method and words."""
    from framework.refresh import RefreshPlan

    old = {"asked": ["bronze.orders"],
           "replay_slice": {"since": "2026-01-01T00:00:00+00:00", "until": None},
           "tables": [{"table": "spark_catalog.bronze.orders", "layer": "bronze",
                       "name": "orders", "method": "replay", "checkpoint": None,
                       "targets": [{"location": "/lake/orders", "version": 3, "rows": 10}],
                       "properties": [], "where": "(_batch_id, _source_file) IN ((2L, 'a'))"}]}
    plan = RefreshPlan.from_json(old)
    assert plan.reread_slice == TimeSlice(datetime(2026, 1, 1, tzinfo=UTC))
    assert plan.tables[0].method == RebuildMethod.REREAD.value
    assert RefreshPlan.from_json(plan.to_json()) == plan
    assert plan.render().splitlines()[1] == (
        "  spark_catalog.bronze.orders  the rows of the files delivered in "
        "[2026-01-01T00:00:00+00:00, ...) read again: orders 10 rows at version 3")


@pytest.mark.parametrize("step, resumed_by", [
    (JournalState.SET_ASIDE, "refresh"), (JournalState.RESET, "run")])
def test_a_refresh_stopped_after_any_step_is_completed_by_the_next_command(
    spark: SparkSession, tmp_path: Path, fresh: Lakehouse, step: JournalState, resumed_by: str
) -> None:
    a = lake(tmp_path / "a")
    assert cli(a, "run", "all") == 0
    a.add_table("silver", "orders", silver("quantity * 3"))
    stopped_after(spark, a, step)
    assert (a.root / "_refresh" / "journal").exists()
    if resumed_by == "run":
        assert cli(a, "run", "all") == 0
    else:
        # the same refresh asked again, stopped (SIGTERM) as it completes the open one: a
        # stop, not a failure, and still open
        run = CliRun(["refresh", "silver.orders", "--downstream"], a.cli_env())
        run.wait_for("refresh.rebuild.started")
        run.proc.send_signal(signal.SIGTERM)
        code, out = run.finish()
        assert code == 0, "".join(run.lines[-20:])
        assert "refresh stopped: the next 'medallion run' or 'medallion refresh' completes" \
            in out
        assert (a.root / "_refresh" / "journal").exists()
        # asked again: the open one is completed, then it runs once more
        assert cli(a, "refresh", "silver.orders", "--downstream") == 0
    assert_same_tables(spark, a, fresh)
    assert closed_states(a)[-1] is JournalState.DONE


def test_a_refresh_whose_rebuild_fails_stays_open_and_is_completed_once_fixed(
    spark: SparkSession, tmp_path: Path, fresh: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    a = lake(tmp_path / "a")
    assert cli(a, "run", "all") == 0
    rows = delta(spark, a, "silver", "orders").count()
    before = version(spark, a, "silver", "orders")
    # the new spec fails on the lake's rows: the rebuild of silver fails
    a.add_table("silver", "orders", silver("quantity * 3", expectations=[
        {"name": "small", "rule": "quantity < 9", "action": "fail"}]))
    capsys.readouterr()
    assert cli(a, "refresh", "silver.orders", "--downstream") == 1
    err = capsys.readouterr().err
    assert "The refresh stays open: fix the cause" in err
    # nothing lost: the former rows in the table's history, the old checkpoints aside
    journal = Journal(LocalStorage(), str(a.root))
    last = journal.last()
    assert last is not None and last.state is JournalState.RESET
    assert spark.read.format("delta").option("versionAsOf", before).load(
        str(a.path("tables", "silver", "orders"))).count() == rows
    aside = a.root / "_refresh" / last.op / "aside"
    assert sorted(p.name for p in aside.glob("*/*")) == ["customer_sales", "orders"]
    assert cli(a, "status") == 0
    assert f"refresh {last.op} is open (reset since " in capsys.readouterr().out
    # no job writes the tables while it is open: a run that cannot complete it runs nothing
    silver_version = version(spark, a, "silver", "orders")
    assert cli(a, "run", "all") == 2
    assert "expected the refresh left open to complete before the tables run" in \
        capsys.readouterr().err
    assert version(spark, a, "silver", "orders") == silver_version
    # the cause fixed, the next run completes the refresh: as a lake built with that spec
    a.add_table("silver", "orders", silver("quantity * 3"))
    assert cli(a, "run", "all") == 0
    assert_same_tables(spark, a, fresh)
    assert closed_states(a)[-1] is JournalState.DONE


def test_a_bronze_refresh_from_the_archive_gives_the_same_rows(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = lake(tmp_path / "a")
    landing = a.path("landing", "orders")
    assert cli(a, "run", "all") == 0
    # a second delivery: a malformed line (quarantined) and an empty file (failed)
    write_json_lines(landing / "part-3.json", [order(i) for i in range(40, 45)],
                     extra_lines=["{not json"])
    (landing / "part-4.json").write_bytes(b"")
    assert cli(a, "run", "all") == 0

    def table(name: str, drop: tuple[str, ...] = ("_ingested_at",)) -> DataFrame:
        df = delta(spark, a, "bronze", name)
        return df.select(*[c for c in df.columns if c not in drop])

    ledger_drop = ("ingested_at", "updated_at", "ingestion")
    before = {"orders": table("orders").collect(),
              "orders_quarantine": table("orders_quarantine").collect(),
              "orders_files": table("orders_files", ledger_drop).collect()}
    silver_before = delta(spark, a, "silver", "orders").drop("_batch_id").collect()
    assert len(before["orders_quarantine"]) == 1
    assert sorted(r["status"] for r in before["orders_files"]) == [
        "archived", "archived", "archived", "archived", "quarantined"]
    capsys.readouterr()

    assert cli(a, "refresh", "bronze.orders") == 2  # silver reads it
    assert "--downstream" in capsys.readouterr().err
    assert cli(a, "refresh", "bronze.orders", "--downstream") == 0
    for name, rows in before.items():
        now = table(name, ledger_drop if name == "orders_files" else ("_ingested_at",))
        assert_df_equality(now, spark.createDataFrame(rows, now.schema), ignore_row_order=True,
                           ignore_nullable=True)
    assert sorted(str(r["ingestion"]) for r in delta(spark, a, "bronze", "orders_files")
                  .collect()) == ["None", "refresh", "refresh", "refresh", "refresh"]
    after = delta(spark, a, "silver", "orders").drop("_batch_id")
    assert_df_equality(after, spark.createDataFrame(silver_before, after.schema),
                       ignore_row_order=True, ignore_nullable=True)
    assert closed_states(a)[-1] is JournalState.DONE
    # the archive was read, not moved; the landing feed goes on after its last batch
    assert sorted(p.name for p in (a.root / "archive" / "orders").rglob("part-*.json")) == [
        "part-0.json", "part-1.json", "part-2.json", "part-3.json"]
    write_json_lines(landing / "part-5.json", [order(i) for i in range(50, 55)])
    assert cli(a, "run", "all") == 0
    assert delta(spark, a, "bronze", "orders").count() == len(before["orders"]) + 5
    assert delta(spark, a, "bronze", "orders").where("_batch_id = 2").count() == 5

    # --since: only the files delivered from then on are read again, their rows alone replaced
    write_json_lines(landing / "part-6.json", [order(i) for i in range(60, 63)])
    cut = datetime.now(UTC)
    os.utime(landing / "part-6.json", (cut.timestamp() + 1,) * 2)
    assert cli(a, "run", "all") == 0
    whole = ("orders", "orders_quarantine", "orders_files")
    before = {name: table(name, ()).collect() for name in whole}
    silver_before = delta(spark, a, "silver", "orders").drop("_batch_id").collect()
    capsys.readouterr()
    assert cli(a, "refresh", "silver.orders", "--since", cut.isoformat()) == 2
    assert "expected feeds of files (bronze)" in capsys.readouterr().err
    assert cli(a, "refresh", "bronze.orders", "--downstream", "--since", "2100-01-01") == 2
    assert "found none in its ledger" in capsys.readouterr().err
    assert cli(a, "refresh", "bronze.orders", "--downstream", "--since", cut.isoformat()) == 0
    assert "the rows of the files delivered in [" in capsys.readouterr().out
    part6 = "_source_file LIKE '%part-6.json'"
    for name, rows in before.items():  # the others' rows as they were, ingestion times too
        now, was = table(name, ()), spark.createDataFrame(rows, table(name, ()).schema)
        key = "path LIKE '%part-6.json'" if name == "orders_files" else part6
        assert_df_equality(now.where(f"NOT ({key})"), was.where(f"NOT ({key})"),
                           ignore_row_order=True, ignore_nullable=True)
    orders_now = delta(spark, a, "bronze", "orders")
    assert orders_now.where(part6).count() == 3
    was = {r["order_id"]: r["_ingested_at"] for r in before["orders"]
           if r["_source_file"].endswith("part-6.json")}
    assert all(r["_ingested_at"] > was[r["order_id"]] for r in orders_now.where(part6).collect())
    assert_df_equality(orders_now.drop("_ingested_at"),
                       spark.createDataFrame(before["orders"], orders_now.schema)
                       .drop("_ingested_at"), ignore_row_order=True, ignore_nullable=True)
    ledger = delta(spark, a, "bronze", "orders_files").where("path LIKE '%part-6.json'").first()
    assert ledger is not None and ledger["ingestion"] == "refresh" and ledger["rows"] == 3
    after = delta(spark, a, "silver", "orders").drop("_batch_id")
    assert_df_equality(after, spark.createDataFrame(silver_before, after.schema),
                       ignore_row_order=True, ignore_nullable=True)

    # a feed whose archive lost a file is refused before anything is emptied
    next(iter((a.root / "archive" / "orders").rglob("part-0.json"))).unlink()
    version_before = version(spark, a, "bronze", "orders")
    capsys.readouterr()
    assert cli(a, "refresh", "bronze.orders", "--downstream") == 2
    assert "purged from the archive?" in capsys.readouterr().err
    assert version(spark, a, "bronze", "orders") == version_before
