"""The run history (``<ops>.runs``): one row per micro-batch, with the job's figures, and the
rows a stopped driver did not write recovered by the next start. Silver's rows (duplicates,
late rows, state, a failure) are checked in tests/test_silver.py; kills in every layer in
tests/test_crash.py (bench/chaos.py's history check)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from pyspark.sql import SparkSession

from bronze.job import BronzeJob
from framework.checkpoint import last_recorded_batch, mark_recorded
from framework.config.model import Layer
from framework.history import RUNS_SCHEMA
from framework.identifiers import quote_path
from framework.job import RunContext, RunStatus, TableRunSummary
from tests.support import Lakehouse, bronze_spec, order, run_history, write_json_lines


def _run(spark: SparkSession, lakehouse: Lakehouse, operation: str | None = None
         ) -> tuple[TableRunSummary, str]:
    table = lakehouse.project().table("orders", Layer.BRONZE)
    ctx = RunContext(operation=operation)
    summary = BronzeJob(spark, table, ctx).run()
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    return summary, ctx.run_id


def test_one_row_per_batch_with_the_summary_counts_and_lost_rows_recovered(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(max_files_per_trigger=1))
    landing = lakehouse.path("landing", "orders")
    files = [write_json_lines(landing / f"part-{f}.json", [order(f * 20 + i) for i in range(20)],
                              extra_lines=["{broken", "not json"] if f == 1 else ())
             for f in range(3)]
    for f, path in enumerate(files):  # read in this order: one file per batch
        os.utime(path, (time.time() - 60 + f, time.time() - 60 + f))
    sizes = [p.stat().st_size for p in files]

    summary, run_id = _run(spark, lakehouse)

    name = lakehouse.project().table("orders", Layer.BRONZE).full_name
    runs = f"spark_catalog.{lakehouse.schemas['ops']}.runs"
    assert spark.catalog.tableExists(runs)
    assert [f.name for f in spark.table(runs).schema] == RUNS_SCHEMA.names
    rows = run_history(spark, lakehouse, name)
    assert summary.batches == 3
    assert [(r["batch_id"], r["status"], r["run_id"]) for r in rows] == [
        (b, "committed", run_id) for b in range(3)]
    assert [(r["rows_in"], r["rows_out"], r["quarantined"]) for r in rows] == [
        (20, 20, 0), (22, 20, 2), (20, 20, 0)]
    assert sum(r["rows_in"] for r in rows) == summary.rows_in == 62
    assert sum(r["rows_out"] for r in rows) == summary.rows_out == 60
    assert sum(r["quarantined"] for r in rows) == summary.counts["quarantined_rows"] == 2
    assert [(r["files"], r["bytes"]) for r in rows] == [(1, size) for size in sizes]
    assert all({"addBatch", "write", "ledger"} <= set(r["durations_ms"]) for r in rows)
    query = rows[0]["query_id"]
    assert query and {r["query_id"] for r in rows} == {query}
    checkpoint = lakehouse.project().table("orders", Layer.BRONZE).checkpoint
    assert last_recorded_batch(checkpoint) == 2
    history = quote_path(str(lakehouse.path("tables", "ops", "runs")))

    # A driver stopped after committing batches 1 and 2 but before appending their rows (its
    # mark is still at batch 0): the next start reads the history for the batches after the
    # mark, writes a row for each, marked recovered, then the rows of its own batches.
    spark.sql(f"DELETE FROM {history} WHERE batch_id >= 1")
    for mark in (Path(checkpoint) / "recorded").iterdir():
        mark.unlink()
    mark_recorded(checkpoint, 0)
    write_json_lines(landing / "part-3.json", [order(100 + i) for i in range(5)])
    # (the start that recovers them completes an operation, whose rebuild wrote them)
    summary, second = _run(spark, lakehouse, operation="r-1")

    rows = run_history(spark, lakehouse, name)
    assert [(r["batch_id"], r["status"], r["run_id"], r["operation"]) for r in rows] == [
        (0, "committed", run_id, None), (1, "recovered", None, "r-1"),
        (2, "recovered", None, "r-1"), (3, "committed", second, "r-1")]
    assert rows[1]["rows_in"] is None and rows[1]["ended_at"] is not None
    assert rows[3]["rows_in"] == summary.rows_in == 5
    assert {r["query_id"] for r in rows} == {query}
    assert last_recorded_batch(checkpoint) == 3

    # Nothing new: no batch, no row
    summary, _ = _run(spark, lakehouse)
    assert summary.batches == 0
    assert len(run_history(spark, lakehouse, name)) == 4

    # A start whose last committed batch is marked does not read the history: a row deleted
    # behind the mark's back is not looked for.
    spark.sql(f"DELETE FROM {history} WHERE batch_id = 3")
    _run(spark, lakehouse)
    assert len(run_history(spark, lakehouse, name)) == 3
