"""``medallion status`` from the lake's files, without Spark: what it says of each table is
what a Spark session's catalog says (rows, version, last batch, backlog), a table whose log
holds no row counts is never given a number, and it answers with no JVM on the machine while
a run holds the lake."""

from __future__ import annotations

import base64
import dataclasses
import os
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from framework.deltalog import read_state
from framework.lease import Lease
from framework.status import logged_status, table_status
from framework.storage import LocalStorage
from tests.dfs_server import serve
from tests.support import (
    BIN,
    REPO,
    Lakehouse,
    bronze_spec,
    cli,
    medallion_cmd,
    write_json_lines,
    write_order_files,
)

ACCOUNT = "medallionstest"
ADLS_ROOT = f"abfss://lake@{ACCOUNT}.dfs.core.windows.net/dev"
SALES_SCHEMA = "order_id STRING, store_id STRING, amount INT, event_time TIMESTAMP"


def _no_session() -> SparkSession:
    raise AssertionError("expected no Spark session for what the lake's files say")


def _sales_lake(lakehouse: Lakehouse) -> None:
    """Orders and stores in bronze and silver (stores as a bucketed parquet table), a mart
    over them as a view and one materialized."""
    for name, schema in (("orders", SALES_SCHEMA), ("stores", "store_id STRING, region STRING")):
        lakehouse.add_table("bronze", name, {"source": {
            "path": f"landing/{name}", "format": "json", "schema": schema}})
    lakehouse.add_table("silver", "orders", {"source": "orders"})
    lakehouse.add_table("silver", "stores", {"source": "stores", "format": "parquet",
                                              "bucket_by": ["store_id"], "buckets": 2})
    mart = {"kind": "mart", "fact": {"table": "orders", "layer": "silver"},
            "dimensions": [{"table": "stores", "on": "store_id"}]}
    lakehouse.add_table("gold", "sales_by_region", mart)
    lakehouse.add_table("gold", "sales_kept", {**mart, "materialize": True})
    landing = lakehouse.path("landing")
    for batch in range(2):
        write_json_lines(landing / "orders" / f"o{batch}.json", [
            {"order_id": f"o{batch}-{i}", "store_id": f"s{i % 3}", "amount": i,
             "event_time": "2026-11-01T10:00:00Z"} for i in range(7 + batch)])
    write_json_lines(landing / "stores" / "s.json", [
        {"store_id": f"s{i}", "region": "west" if i else "east"} for i in range(3)])


def test_status_from_the_files_says_what_the_catalog_says(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    _sales_lake(lakehouse)
    later = lakehouse.path("landing", "orders", "o1.json")
    held = later.rename(lakehouse.base / "o1.json")
    assert cli(lakehouse, "run", "all") == 0
    held.rename(later)  # new orders: a second version of the materialized mart
    assert cli(lakehouse, "run", "all") == 0
    write_json_lines(lakehouse.path("landing", "orders", "waiting.json"), [{"order_id": "w"}])
    project = lakehouse.project()
    for table in project.tables:
        logged, caught = logged_status(table, _no_session), table_status(spark, table)
        assert caught.kind in ("delta", "parquet", "view"), caught
        if caught.kind == "delta":
            assert logged.rows == spark.read.format("delta").load(table.location).count()
            # the log's last commit file (the session that wrote a table may give an earlier
            # version by DESCRIBE HISTORY: a mart's last ALTER TABLE is left out there)
            last = max(Path(table.location, "_delta_log").glob("*.json"))
            assert logged.version == int(last.stem) >= (caught.version or 0)
            assert logged.last_commit is not None
            assert abs(logged.last_commit.timestamp() - last.stat().st_mtime) < 2
            logged = dataclasses.replace(logged, version=caught.version,
                                         last_commit=caught.last_commit)
        if caught.kind == "view":  # its rows need a query: not counted from the files
            assert logged.rows is None and caught.rows == 15
            logged = dataclasses.replace(logged, rows=caught.rows)
        assert logged == caught
    by_name = {t.name + "@" + t.layer.value: logged_status(t, _no_session)
               for t in project.tables}
    assert (by_name["orders@bronze"].rows, by_name["orders@bronze"].pending_files) == (15, 1)
    assert (by_name["stores@silver"].kind, by_name["stores@silver"].rows) == ("parquet", 3)
    # created, then twice written and its properties set
    assert by_name["sales_kept@gold"].version == 4

    # the command: the files' figures, and --count adds the view's rows from Spark
    capsys.readouterr()
    assert cli(lakehouse, "status") == 0
    quick = _table_lines(capsys.readouterr().out)
    assert cli(lakehouse, "status", "--count") == 0
    counted = _table_lines(capsys.readouterr().out)
    view = project.table("sales_by_region").full_name
    assert quick[view][:2] == ["view", "NULL"] and counted[view][:2] == ["view", "15"]
    assert {k: v for k, v in quick.items() if k != view} == \
        {k: v for k, v in counted.items() if k != view}
    bronze = by_name["orders@bronze"]
    assert quick[bronze.table] == ["delta", "15", str(bronze.version), str(bronze.last_batch),
                                   "1", str(bronze.pending_bytes)]


def test_a_table_whose_files_hold_no_row_counts_is_never_given_a_wrong_one(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    table = lakehouse.project().table("orders")
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {lakehouse.schemas['bronze']}")
    spark.range(5).write.format("delta").save(table.location)
    spark.sql(f"CREATE TABLE {table.full_name} USING DELTA LOCATION '{table.location}'")
    # one column indexed for skipping, none: the row count is still written with each file
    spark.sql(f"ALTER TABLE {table.full_name} SET TBLPROPERTIES "
              "('delta.dataSkippingNumIndexedCols' = '0')")
    spark.range(3).write.format("delta").mode("append").save(table.location)
    state = read_state(table.location, table.env)
    assert state is not None and (state.version, state.rows) == (2, 8)
    # a file written with no statistics at all: the count is unknown, not 8
    spark.conf.set("spark.databricks.delta.stats.collect", "false")
    try:
        spark.range(4).write.format("delta").mode("append").save(table.location)
    finally:
        spark.conf.unset("spark.databricks.delta.stats.collect")
    assert spark.read.format("delta").load(table.location).count() == 12
    state = read_state(table.location, table.env)
    assert state is not None and (state.version, state.rows) == (3, None)
    status = logged_status(table, _no_session)
    assert (status.kind, status.rows, status.version) == ("delta", None, 3)
    counted = logged_status(table, lambda: spark, count=True)
    assert (counted.kind, counted.rows, counted.version) == ("delta", 12, 3)
    # rows deleted through a deletion vector are not counted
    spark.range(10).write.format("delta").option("delta.enableDeletionVectors", "true") \
        .save(str(lakehouse.base / "with_dv"))
    spark.sql(f"DELETE FROM delta.`{lakehouse.base / 'with_dv'}` WHERE id < 3")
    state = read_state(str(lakehouse.base / "with_dv"), table.env)
    assert state is not None and state.rows == 7 == \
        spark.read.format("delta").load(str(lakehouse.base / "with_dv")).count()
    capsys.readouterr()
    assert cli(lakehouse, "status") == 0
    assert _table_lines(capsys.readouterr().out)[table.full_name][:3] == ["delta", "NULL", "3"]
    assert cli(lakehouse, "status", "--count") == 0
    assert _table_lines(capsys.readouterr().out)[table.full_name][:3] == ["delta", "12", "3"]


@pytest.mark.slow
def test_status_answers_with_no_jvm_while_a_run_holds_the_lake(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    write_order_files(lakehouse.path("landing", "orders"), files=2, per_file=5)
    assert cli(lakehouse, "run", "bronze") == 0
    write_order_files(lakehouse.path("landing", "orders"), files=1, per_file=5, start=10)
    table = lakehouse.project().table("orders")
    held = Lease(LocalStorage(), str(lakehouse.root), "medallion run all").acquire()
    leases = sorted(os.listdir(lakehouse.root / "_lease"))
    try:
        env = {**lakehouse.cli_env(), "PATH": str(BIN), "JAVA_HOME": str(tmp_path / "no-java")}
        env.pop("SPARK_HOME", None)
        started = time.monotonic()
        done = subprocess.run([*medallion_cmd(), "status"], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        elapsed = time.monotonic() - started
        assert sorted(os.listdir(lakehouse.root / "_lease")) == leases  # status took none
    finally:
        held.release()
    assert done.returncode == 0, done.stderr
    caught = table_status(spark, table)  # what the catalog says
    assert (caught.rows, caught.pending_files) == (10, 1)
    assert _table_lines(done.stdout)[table.full_name] == [
        "delta", "10", str(caught.version), str(caught.last_batch), "1",
        str(caught.pending_bytes)]
    assert "java" not in done.stderr.lower() and "spark" not in done.stderr.lower()
    assert elapsed < 30, elapsed  # (about 2 s on an idle machine)


@pytest.mark.slow
def test_status_reads_a_lake_on_adls_with_the_environments_credentials(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lake made by Spark, copied as it is to an ADLS endpoint (tests/dfs_server.py):
    status reads its log (deltalake's object store, List Blobs and ranged reads), checkpoint
    and landing there, with the account key of the environment's storage settings, and no
    JVM. (The endpoint runs in a subprocess's reach only: deltalake holds this process's
    interpreter while it waits for a reply.)"""
    lakehouse.add_table("bronze", "orders", bronze_spec())
    landing = lakehouse.path("landing", "orders")
    write_order_files(landing, files=2, per_file=5)
    assert cli(lakehouse, "run", "bronze") == 0
    write_order_files(landing, files=1, per_file=5, start=10)
    table = lakehouse.project().table("orders")
    caught = table_status(spark, table)
    key = base64.b64encode(b"status-canary-key-0123456789abcd").decode()
    monkeypatch.setenv("TEST_ACCOUNT_KEY", key)
    with serve(ACCOUNT) as (dl, url):
        dl.filesystems["lake"] = {}
        for path in sorted(lakehouse.root.rglob("*")):
            if path.is_file() and path.relative_to(lakehouse.root).parts[0] != "metastore_db":
                dl.put_file("lake", f"dev/{path.relative_to(lakehouse.root).as_posix()}",
                            path.read_bytes(), datetime.fromtimestamp(path.stat().st_mtime, UTC))
        lakehouse.write_env(runtime="local", root=ADLS_ROOT, metastore=str(tmp_path / "ms"),
                            storage={"account": ACCOUNT, "auth": "account_key",
                                     "account_key": "${TEST_ACCOUNT_KEY}", "endpoint": url,
                                     "retries": 0, "retry_backoff_seconds": 0})
        env = {**lakehouse.cli_env(), "PATH": str(BIN), "JAVA_HOME": str(tmp_path / "no-java")}
        done = subprocess.run([*medallion_cmd(), "status"], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        listed = [r.query for r in dl.requests if r.query.get("comp") == "list"]
    assert done.returncode == 0, done.stderr
    assert _table_lines(done.stdout)[table.full_name] == [
        "delta", "10", str(caught.version), str(caught.last_batch), "1",
        str(caught.pending_bytes)]
    assert listed and listed[0]["prefix"] == "dev/tables/bronze/orders/_delta_log/"
    assert key not in done.stdout + done.stderr


def test_status_shows_the_rows_held_now_and_the_oldest_from_the_files_and_with_spark(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sales of two stores silver.stores lacks are held: status counts them and dates the
    oldest, read from the held table's files as Spark reads it; once one store arrives, its
    sale is released and one is left."""
    from framework.config.model import Layer
    from framework.status import HeldRows
    from tests.support import write_delta_commits
    from tests.test_quality import SALES, run_sales, sale, with_stores_and_sales

    bronze, dims = with_stores_and_sales(spark, lakehouse, ["s1"], action="hold")
    project = lakehouse.project()
    sales = project.table("sales", Layer.SILVER)
    assert logged_status(sales, _no_session).held is None  # (no held table yet)
    before = datetime.now(UTC)
    write_delta_commits(spark, bronze, [[sale("a", "s1"), sale("b", "s2")]], SALES)
    run_sales(spark, lakehouse)
    write_delta_commits(spark, bronze, [[sale("c", "s3")]], SALES)
    run_sales(spark, lakehouse)

    held = logged_status(sales, _no_session).held
    assert held is not None and held.rows == 2 and held.oldest is not None
    assert before <= held.oldest <= datetime.now(UTC)
    assert table_status(spark, sales).held == held  # what Spark reads
    assert all(logged_status(t, _no_session).held is None for t in project.tables if t != sales)
    capsys.readouterr()
    assert cli(lakehouse, "status") == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("table ")
                             and "rows held" in line))
    assert [c.strip() for c in lines[start].split("|")] == [
        "table", "rows held", "oldest held at (UTC)"]
    assert [c.strip() for c in lines[start + 2].split("|")] == [
        sales.full_name, "2", f"{held.oldest:%Y-%m-%d %H:%M:%S}"]
    assert lines[start + 3] == "(1 row)"

    write_delta_commits(spark, dims, [[("s2", "store s2")]], "store_id STRING, name STRING")
    run_sales(spark, lakehouse)
    left = logged_status(sales, _no_session).held
    assert left is not None and left.rows == 1 and left.oldest is not None
    assert left.oldest > held.oldest  # c's, held by the later run
    assert table_status(spark, sales).held == left
    write_delta_commits(spark, dims, [[("s3", "store s3")]], "store_id STRING, name STRING")
    run_sales(spark, lakehouse)
    assert logged_status(sales, _no_session).held == HeldRows(0, None)
    assert table_status(spark, sales).held == HeldRows(0, None)


def _table_lines(out: str) -> dict[str, list[str]]:
    """The table lines of ``medallion status`` by table: kind, rows, version, last batch,
    pending files and bytes."""
    return {cells[0]: cells[1:] for line in out.splitlines()
            if line.startswith("spark_catalog.")
            and (cells := [c.strip() for c in line.split("|")])}
