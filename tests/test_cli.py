"""The command line and the lifecycle in-process, on the shared session: failures give exit
code 1 and an event, continuous mode keeps picking up files until stopped, status reports."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bronze.job import BronzeJob
from framework.cli import main
from framework.job import RunContext, RunStatus, TriggerPolicy
from tests.support import Lakehouse, bronze_spec, files_under, write_order_files


def _args(lakehouse: Lakehouse, *args: str) -> list[str]:
    return [*args, "--conf", str(lakehouse.conf), "--env", lakehouse.env_name]


def test_a_failing_query_exits_non_zero_and_logs_the_failure(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    write_order_files(lakehouse.path("landing", "orders"), files=1, per_file=3)
    table = lakehouse.project().table("orders")
    # The table already exists with an incompatible type: the batch's append fails.
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {lakehouse.schemas['bronze']}")
    spark.sql(f"CREATE TABLE {table.full_name} (order_id INT) USING DELTA "
              f"LOCATION '{table.location}'")
    code = main(_args(lakehouse, "run", "bronze", "--log-format", "json"))
    assert code == 1
    captured = capsys.readouterr()
    assert "failed" in captured.out and table.full_name in captured.out
    events = [json.loads(line) for line in captured.err.splitlines() if line.startswith("{")]
    failed = [e for e in events if e["event"] == "job.failed"]
    assert failed and "step 'stream' failed" in failed[0]["error"]
    # nothing was archived: the batch did not commit
    assert len(files_under(lakehouse.path("landing", "orders"))) == 1


def test_continuous_mode_picks_up_new_files_until_stopped(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    landing = lakehouse.path("landing", "orders")
    first = write_order_files(landing, files=2, per_file=5)
    table = lakehouse.project().table("orders")
    ctx = RunContext(trigger=TriggerPolicy(continuous=True, interval="1 second"))
    job = BronzeJob(spark, table, ctx)
    result: list[object] = []
    runner = threading.Thread(target=lambda: result.append(job.run()))
    runner.start()

    def wait_for(rows: int) -> None:
        deadline = time.monotonic() + 180
        while sum(b.good for b in job.batches) < rows:
            assert time.monotonic() < deadline, f"timed out waiting for {rows} rows"
            assert runner.is_alive(), result
            time.sleep(0.5)

    wait_for(len(first))
    later = write_order_files(landing, files=1, per_file=5, start=100, prefix="later")
    wait_for(len(first) + len(later))
    ctx.stop.request("test")
    runner.join(timeout=180)
    (summary,) = result
    assert summary.status is RunStatus.STOPPED  # type: ignore[attr-defined]
    assert summary.rows_out == 15  # type: ignore[attr-defined]
    assert spark.read.format("delta").load(table.location).count() == 15


def test_status_reports_rows_batches_and_backlog(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(max_files_per_trigger=1))
    landing = lakehouse.path("landing", "orders")
    write_order_files(landing, files=2, per_file=4)
    assert main(_args(lakehouse, "run", "bronze", "--log-format", "json")) == 0
    write_order_files(landing, files=3, per_file=4, start=50, prefix="waiting")
    capsys.readouterr()
    assert main(_args(lakehouse, "status", "--log-format", "json")) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines()
               if line.startswith(lakehouse.project().table("orders").full_name))
    cells = [c.strip() for c in row.split("|")]
    # rows, version, last batch, pending files and their bytes
    pending = sum(p.stat().st_size for p in lakehouse.path("landing", "orders").glob("*.json"))
    assert cells[1:] == ["True", "8", cells[3], "1", "3", str(pending)]


def test_sql_prints_a_table(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_args(lakehouse, "sql", "SELECT 1 AS one, 'x' AS two", "--log-format",
                      "json")) == 0
    assert capsys.readouterr().out.splitlines() == ["one | two", "----+----", "1   | x", "(1 row)"]


def test_land_uploads_whole_files_into_the_landing_folder_and_never_overwrites(
    lakehouse: Lakehouse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    export = tmp_path / "orders-0001.json"
    export.write_text('{"order_id": "o1"}\n')
    assert main(_args(lakehouse, "land", "orders", str(export), "--log-format", "json")) == 0
    landed = lakehouse.path("landing", "orders", "orders-0001.json")
    assert landed.read_text() == export.read_text()
    assert [p.name for p in lakehouse.path("landing", "orders").iterdir()] == [landed.name]
    assert main(_args(lakehouse, "land", "orders", str(export), "--log-format", "json")) == 1
    assert "expected no file" in capsys.readouterr().err
    assert main(_args(lakehouse, "land", "orders", str(tmp_path / "missing.json"))) == 2
