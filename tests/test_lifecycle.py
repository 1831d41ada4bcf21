"""The job lifecycle under stress, with the real `medallion` command in a subprocess:
a SIGTERM stops at a batch boundary (kills: tests/test_crash.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from pyspark.sql import SparkSession

from framework.checkpoint import last_committed_batch
from tests.support import (
    REPO,
    CliRun,
    Lakehouse,
    bronze_spec,
    cli,
    write_order_files,
)

pytestmark = pytest.mark.slow

PER_FILE = 50


def _bronze(spark: SparkSession, lakehouse: Lakehouse) -> tuple[object, object]:
    table = lakehouse.project().table("orders")
    return table, spark.read.format("delta").load(table.location)


def test_sigterm_stops_at_a_batch_boundary_and_a_restart_continues(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(max_files_per_trigger=1))
    ids = write_order_files(lakehouse.path("landing", "orders"), files=4, per_file=PER_FILE)
    summary_path = lakehouse.base / "summary.json"

    run = CliRun(["run", "bronze", "--summary", str(summary_path)], lakehouse.cli_env())
    run.wait_for("bronze.batch.committed", batch_id=0)
    run.proc.send_signal(signal.SIGTERM)
    code, out = run.finish()
    assert code == 0, "".join(run.lines[-20:])
    assert "stopped" in out  # the printed summary
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "stopped"
    (table_summary,) = summary["tables"]
    assert 1 <= table_summary["batches"] < 4
    names = [e["event"] for e in run.all_events]
    assert "job.stopped" in names, names

    table, df = _bronze(spark, lakehouse)
    committed = last_committed_batch(table.checkpoint)  # type: ignore[attr-defined]
    assert 0 <= committed < 3
    per_batch = {r["_batch_id"]: r["count"] for r in df.groupBy("_batch_id").count().collect()}
    # whole batches only, contiguous from 0 (a batch cut short by the stop wrote nothing)
    assert set(per_batch.values()) == {PER_FILE}
    assert sorted(per_batch) == list(range(len(per_batch)))

    # A second signal interrupts at once: the run still stops its query, prints its summary
    # and exits non-zero; what it left is taken by the next run.
    forced = CliRun(["run", "bronze", "--summary", str(summary_path)], lakehouse.cli_env())
    forced.wait_for("job.started")
    forced.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    forced.proc.send_signal(signal.SIGTERM)
    code, out = forced.finish()
    assert code == 1, "".join(forced.lines[-20:])
    assert "interrupted by a second signal" in out  # the printed summary
    assert json.loads(summary_path.read_text())["status"] == "failed"
    names = [e["event"] for e in forced.all_events]
    assert "job.stop.forced" in names and "job.finished" in names, names

    assert cli(lakehouse, "run", "bronze") == 0  # (in this process: a JVM fewer)
    _, df = _bronze(spark, lakehouse)
    assert df.count() == len(ids) == df.select("order_id").distinct().count()
    assert sorted(r[0] for r in df.select("order_id").collect()) == sorted(ids)


def test_two_signals_interrupt_every_table_running_at_once(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    feeds = ("orders", "returns")
    ids = []
    for name in feeds:
        lakehouse.add_table("bronze", name, bronze_spec(path=f"landing/{name}",
                                                        max_files_per_trigger=1))
        ids += write_order_files(lakehouse.path("landing", name), files=4, per_file=PER_FILE,
                                 start=0 if name == "orders" else 1000)
    summary_path = lakehouse.base / "summary.json"
    run = CliRun(["run", "bronze", "--parallel", "2", "--summary", str(summary_path)],
                 lakehouse.cli_env())
    names = {lakehouse.project().table(n).full_name for n in feeds}
    committed: set[str] = set()
    while committed != names:  # both running: each has committed a batch
        committed.add(run.wait_for("bronze.batch.committed")["table"])
    run.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    run.proc.send_signal(signal.SIGTERM)
    code, _ = run.finish(timeout=120)  # (at once: no table's job is waited for)
    # A table still running at the second signal ends failed, interrupted; one whose job
    # had already stopped at its batch boundary (between two batches) ends stopped
    tables = {t["table"]: t for t in json.loads(summary_path.read_text())["tables"]}
    assert set(tables) == names
    interrupted = {n for n, t in tables.items() if t["status"] == "failed"}
    assert all(t["error"] == "interrupted by a second signal" for n, t in tables.items()
               if n in interrupted), tables
    assert all(t["status"] == "stopped" for n, t in tables.items() if n not in interrupted)
    assert code == (1 if interrupted else 0), "".join(run.lines[-20:])
    forced = {e["table"] for e in run.all_events if e["event"] == "job.stop.forced"}
    assert forced == interrupted

    # what they left is taken by the next run: every order once
    assert cli(lakehouse, "run", "bronze") == 0
    rows = [spark.read.format("delta").load(lakehouse.project().table(n).location)
            for n in feeds]
    assert sorted(r[0] for df in rows for r in df.select("order_id").collect()) == sorted(ids)


SIGNAL_DURING_A_LOG_LINE = """
import os, signal, sys
from framework.job import StopSignal
from framework.logging import configure_logging, get_logger

class Stream:  # stdout, with SIGTERM delivered in the middle of the first log line's write
    sent = 0
    def write(self, text):
        sys.stdout.write(text)
        if not Stream.sent:
            Stream.sent = 1
            os.kill(os.getpid(), signal.SIGTERM)
    def flush(self):
        sys.stdout.flush()
    def isatty(self):
        return False

configure_logging("json", "info", stream=Stream())
stop = StopSignal()
with stop.on_signals(signal.SIGTERM):
    get_logger().info("job.started")
    print("requested:", stop.reason, flush=True)
"""


def test_a_stop_signal_during_a_log_line_does_not_deadlock() -> None:
    # The handler runs on the main thread between two bytecodes, here while the log holds
    # its lock: a handler that logged would wait for that lock forever.
    done = subprocess.run([sys.executable, "-c", SIGNAL_DURING_A_LOG_LINE], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "requested: SIGTERM" in done.stdout
