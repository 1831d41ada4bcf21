"""The run history: one row per micro-batch per table, in the Delta table
``<catalog>.<ops schema>.runs`` (at ``<root>/tables/ops/runs``).

Every streaming job writes it, whatever the runtime (Databricks, spark-submit, local), from its
query's progress reports (:mod:`framework.listener`): the rows are built as the reports arrive
and appended by the driver's main thread while it waits for the query (at most every
:data:`FLUSH_SECONDS`), and once more when the run ends. A mart build, which has no
micro-batches, writes one row per build.

Exactly once under replay, with nothing but appends:

- Spark reports a batch's progress once, after the batch's commit to the checkpoint. A batch
  that was planned but not committed when the driver stopped is run again by the next start,
  which reports it then; the run before wrote no row for it.
- What a stopped driver can leave undone is the append of the rows of batches it had committed.
  Each start of a table's query lists the checkpoint's committed batches (with the query's id,
  kept in the checkpoint) and appends a ``recovered`` row for each that has none: its figures
  went with the driver (null), its end is the commit's time.
- After each append the checkpoint gets a mark (``recorded/<batch>``,
  :func:`framework.checkpoint.mark_recorded`): every committed batch up to it has its row. A
  start whose last committed batch is marked reads nothing of the history; one whose mark is
  behind (the driver stopped before its append) reads the table's rows after the mark. Reading
  the history at every start cost 0.7 to 1.3 s of a bronze run of a million records
  (``bench/bronze_ingest.py``); the mark costs a listing and an empty file.

The run's last rows are appended while the job finishes (bronze's reconcile, say), on a thread of
their own (:meth:`BatchRecorder.flush_in_background`), awaited before the job returns. A run that
fails writes one more row, ``failed``, with its error and the batch in flight if one was planned
(not that batch's row: it gets its own when it commits). Writing the history never fails a job: a
failed append is logged (``history.write_failed``) and retried with the next, and what is still
missing when the driver ends is recovered by the next start.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from framework.checkpoint import last_recorded_batch, mark_recorded
from framework.config.model import Environment
from framework.delta import add_missing_columns, append, create_table, literal_rows, read_table
from framework.errors import first_line
from framework.identifiers import quote_name
from framework.listener import BatchProgress
from framework.logging import timed
from framework.storage import Storage

# Appends while a query runs are at least this far apart: each is a Delta commit.
FLUSH_SECONDS = 10.0

RUNS_SCHEMA = StructType([
    StructField("run_id", StringType(), metadata={"comment": "The run (null: recovered)"}),
    StructField("table", StringType(), False, {"comment": "catalog.schema.table"}),
    StructField("layer", StringType(), False, {"comment": "bronze, silver or gold"}),
    StructField("query_id", StringType(), metadata={
        "comment": "The streaming query's id, kept in its checkpoint"}),
    StructField("batch_id", LongType(), metadata={"comment": "The micro-batch"}),
    StructField("trigger", StringType(), metadata={"comment": "availableNow or continuous"}),
    StructField("status", StringType(), False, {
        "comment": "committed, recovered (its row was lost with a stopped driver) or failed"}),
    StructField("started_at", TimestampType(), metadata={"comment": "Trigger start (UTC)"}),
    StructField("ended_at", TimestampType(), metadata={"comment": "Batch end (UTC)"}),
    StructField("rows_in", LongType(), metadata={"comment": "Rows read"}),
    StructField("rows_out", LongType(), metadata={"comment": "Rows written to the table"}),
    StructField("quarantined", LongType(), metadata={"comment": "Rows quarantined"}),
    StructField("duplicates_dropped", LongType(), metadata={"comment": "Duplicates dropped"}),
    StructField("late_dropped", LongType(), metadata={
        "comment": "Rows (or state groups) dropped behind the watermark"}),
    StructField("files", LongType(), metadata={"comment": "Landing files read"}),
    StructField("bytes", LongType(), metadata={"comment": "Bytes of the landing files read"}),
    StructField("state_rows", LongType(), metadata={"comment": "Rows in the query's state"}),
    StructField("watermark", TimestampType(), metadata={"comment": "Event-time watermark"}),
    StructField("durations_ms", MapType(StringType(), LongType()), metadata={
        "comment": "Milliseconds per step: Spark's (addBatch, walCommit...) and the job's"}),
    StructField("error", StringType(), metadata={"comment": "Why the run failed"}),
    StructField("recorded_at", TimestampType(), metadata={"comment": "When the row was written"}),
    StructField("schema_change", StringType(), metadata={
        "comment": "How the batch changed its table's columns (added, widened)"}),
    StructField("operation", StringType(), metadata={
        "comment": "The refresh that rebuilt the table in this run (null: none)"}),
    StructField("held", LongType(), metadata={
        "comment": "Rows held for a key another table lacks (<table>_held)"}),
    StructField("released", LongType(), metadata={
        "comment": "Held rows written to the table once their keys arrived (on a row of "
                   "their own, without a batch)"}),
])

# The figures a job gives for one of its batches (others are Spark's).
FIGURES = ("rows_in", "rows_out", "quarantined", "duplicates_dropped", "files", "bytes",
           "held")


class BatchStatus(StrEnum):
    """What a row of the run history records."""

    COMMITTED = "committed"
    RECOVERED = "recovered"
    FAILED = "failed"


def executed(progress: BatchProgress) -> bool:
    """Whether a progress report is of a batch that ran (an idle trigger reports one too)."""
    return "addBatch" in progress.duration_ms or progress.input_rows > 0


def batch_row(*, run_id: str, table: str, layer: str, query_id: str | None, trigger: str,
              progress: BatchProgress, figures: Mapping[str, int | None],
              seconds: Mapping[str, float] | None = None,
              schema_change: str | None = None, operation: str | None = None
              ) -> dict[str, Any]:
    """The row of a committed batch: Spark's figures, the job's (``figures``, keys of
    :data:`FIGURES`) and the job's own steps (``seconds``), in milliseconds with Spark's."""
    started = _instant(progress.timestamp)
    total_ms = progress.duration_ms.get("triggerExecution")
    ended = datetime.fromtimestamp(started.timestamp() + total_ms / 1000, UTC) \
        if started is not None and total_ms is not None else None
    watermark = _instant(progress.watermark)
    durations = dict(progress.duration_ms) | {
        step: round(s * 1000) for step, s in (seconds or {}).items()}
    return _row(run_id=run_id, table=table, layer=layer, query_id=query_id,
                batch_id=progress.batch_id, trigger=trigger, status=BatchStatus.COMMITTED,
                started_at=started, ended_at=ended,
                rows_in=figures.get("rows_in", progress.input_rows),
                late_dropped=progress.rows_dropped_by_watermark,
                state_rows=progress.state_rows,
                watermark=watermark if watermark and watermark.timestamp() > 0 else None,
                durations_ms=durations,
                schema_change=schema_change, operation=operation,
                **{k: figures.get(k) for k in FIGURES if k != "rows_in"})


def recovered_rows(table: str, layer: str, query_id: str, committed: Mapping[int, int],
                   operation: str | None = None) -> list[dict[str, Any]]:
    """The rows of committed batches (id -> commit time in ms) whose own rows were lost;
    ``operation``: the refresh the run recovering them completes (its rebuild wrote them)."""
    return [_row(table=table, layer=layer, query_id=query_id, batch_id=b,
                 status=BatchStatus.RECOVERED, operation=operation,
                 ended_at=datetime.fromtimestamp(ms / 1000, UTC) if ms else None)
            for b, ms in sorted(committed.items())]


def run_row(*, run_id: str, table: str, layer: str, trigger: str, status: BatchStatus,
            started_at: datetime, query_id: str | None = None, batch_id: int | None = None,
            rows_out: int | None = None, error: str | None = None,
            operation: str | None = None, ended_at: datetime | None = None,
            released: int | None = None, quarantined: int | None = None) -> dict[str, Any]:
    """A row for a whole run, or for what a run did outside its batches: a mart build, a run
    that failed (``batch_id``: the batch in flight, if one was planned), the held rows a run
    released (and quarantined, held too long) before its query."""
    return _row(run_id=run_id, table=table, layer=layer, trigger=trigger, status=status,
                started_at=started_at, ended_at=ended_at or datetime.now(UTC),
                query_id=query_id, batch_id=batch_id, rows_out=rows_out, error=error,
                operation=operation, released=released, quarantined=quarantined)


def _row(**values: Any) -> dict[str, Any]:
    row = dict.fromkeys(RUNS_SCHEMA.names) | values
    row["status"] = str(row["status"])
    row["recorded_at"] = datetime.now(UTC)
    return row


def _instant(text: str | None) -> datetime | None:
    """An ISO-8601 instant as Spark reports it (``2026-01-01T00:00:00.000Z``)."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


class RunHistory:
    """The environment's run history table: created on first use, appended to, read."""

    _ready: set[str] = set()  # locations created in this process
    _lock = threading.Lock()

    def __init__(self, spark: SparkSession, env: Environment) -> None:
        self.spark = spark
        self.schema = f"{env.catalog}.{env.schemas.ops}"
        self.name = f"{self.schema}.runs"
        self.location = env.path("tables", "ops", "runs")

    def exists(self) -> bool:
        return bool(self.spark.catalog.tableExists(self.name))

    def ensure(self) -> None:
        """Create the schema and table unless this process did already (idempotent; another
        driver creating it at the same moment is not an error)."""
        with self._lock:
            if self.location in self._ready:
                return
            self.spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quote_name(self.schema)}")
            try:
                # By table: a start reads its own table's rows only, however long the history
                if not create_table(self.spark, self.name, RUNS_SCHEMA, self.location,
                                    partition_by=["table"],
                                    comment="One row per micro-batch per table: what it "
                                    "read, wrote, quarantined and dropped, and how long it "
                                    "took"):
                    add_missing_columns(self.spark, self.location, RUNS_SCHEMA)
            except Exception:
                if not self.exists():
                    raise
            self._ready.add(self.location)

    def append(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append ``rows`` (dicts of :data:`RUNS_SCHEMA`'s columns) in one commit."""
        if not rows:
            return
        values = [[row.get(name) for name in RUNS_SCHEMA.names] for row in rows]
        df = literal_rows(self.spark, values, RUNS_SCHEMA)
        append(df, self.location)

    def recorded_batches(self, table: str, query_id: str, since: int) -> set[int]:
        """The batches from ``since`` on of the table's query that have their row (committed
        or recovered); the table's partition only."""
        rows = (self.read().where((F.col("table") == table) & (F.col("query_id") == query_id)
                                  & (F.col("batch_id") >= since)
                                  & (F.col("status") != BatchStatus.FAILED.value))
                .select("batch_id").collect())
        return {int(r["batch_id"]) for r in rows}

    def read(self) -> DataFrame:
        return read_table(self.spark, self.location)


class BatchRecorder:
    """A streaming job's rows of the run history: made as its batches are reported (on the
    listener's thread), appended by the job's own thread (:meth:`flush`, :meth:`take`), and those
    a stopped driver lost written at the next start (:meth:`recover`). Nothing here raises (see
    the module). ``seconds["history"]`` is the time spent."""

    def __init__(self, history: RunHistory, log: Any, *, run_id: str, table: str, layer: str,
                 trigger: str, operation: str | None = None) -> None:
        self.history, self.log = history, log
        self.run_id, self.table, self.layer, self.trigger = run_id, table, layer, trigger
        self.operation = operation
        self.query_id: str | None = None
        self.seconds: dict[str, float] = {}
        # The query's checkpoint and its store, where the recorded marks go; marks are
        # written only once the start found every committed batch recorded.
        self.checkpoint: tuple[str, Storage] | None = None
        self._marking = False
        self._rows: list[dict[str, Any]] = []
        self._made: set[int] = set()
        self._lock = threading.Lock()
        self._flushed_at = time.monotonic()
        self._flushing: threading.Thread | None = None

    def recover(self, query_id: str | None, committed: Mapping[int, int]) -> None:
        """Append a ``recovered`` row for each committed batch (id -> commit time in ms) without
        one; the history is read only for the batches after the checkpoint's recorded mark."""
        self.query_id = query_id
        missing: dict[int, int] = {}
        try:
            with timed(self.seconds, "history"):
                marked = last_recorded_batch(*self.checkpoint) if self.checkpoint else -1
                unmarked = {b: ms for b, ms in committed.items() if b > marked}
                if unmarked:
                    if query_id is None:
                        return  # no id to find the rows by: nothing is marked this run
                    self.history.ensure()
                    recorded = self.history.recorded_batches(self.table, query_id,
                                                             min(unmarked))
                    missing = {b: ms for b, ms in unmarked.items() if b not in recorded}
                    if missing:
                        self.history.append(recovered_rows(self.table, self.layer, query_id,
                                                           missing, self.operation))
                    self._mark(max(committed))
                self._marking = self.checkpoint is not None
        except Exception as exc:
            self.log.warning("history.write_failed", table=self.history.name,
                             error=first_line(exc))
            return
        if missing:
            self.log.warning("history.recovered", batches=sorted(missing),
                             reason="committed before the driver stopped, without their run "
                                    "history rows")

    def add(self, progress: BatchProgress,
            figures: Callable[[BatchProgress], Mapping[str, int | None]],
            seconds: Callable[[int], Mapping[str, float]],
            schema_change: Callable[[int], str | None] | None = None) -> None:
        """The row of a reported batch (once per batch; an idle trigger has none).
        ``figures`` and ``seconds`` are called for the job's figures and steps."""
        with self._lock:
            if not executed(progress) or progress.batch_id in self._made:
                return
            self._made.add(progress.batch_id)
        row = batch_row(run_id=self.run_id, table=self.table, layer=self.layer,
                        query_id=self.query_id, trigger=self.trigger, progress=progress,
                        figures=figures(progress), seconds=seconds(progress.batch_id),
                        schema_change=schema_change(progress.batch_id) if schema_change
                        else None, operation=self.operation)
        with self._lock:
            self._rows.append(row)

    def flush(self) -> None:
        """Append the rows made so far, at most every FLUSH_SECONDS (each is a commit)."""
        if time.monotonic() - self._flushed_at < FLUSH_SECONDS:
            return
        self._flushed_at = time.monotonic()
        with self._lock:
            rows = list(self._rows)
        if rows and self.append(rows):
            with self._lock:
                del self._rows[:len(rows)]

    def flush_in_background(self) -> None:
        """Append the rows made so far on a thread of their own (see :meth:`wait`); rows
        whose append failed are kept for the next."""
        rows = self.take()
        if not rows:
            return

        def append() -> None:
            if not self.append(rows):
                with self._lock:
                    self._rows[:0] = rows

        self._flushing = threading.Thread(target=append, name="history-flush", daemon=True)
        self._flushing.start()

    def wait(self) -> None:
        """Wait for the append :meth:`flush_in_background` started, if any."""
        if self._flushing is not None:
            self._flushing.join()
            self._flushing = None

    def take(self) -> list[dict[str, Any]]:
        """The rows not appended yet, handed over (to be appended with the run's last)."""
        with self._lock:
            rows, self._rows = self._rows, []
        return rows

    def append(self, rows: Sequence[Mapping[str, Any]]) -> bool:
        """Append ``rows``, mark their last committed batch recorded; False (logged) on failure."""
        try:
            with timed(self.seconds, "history"):
                self.history.ensure()
                self.history.append(rows)
        except Exception as exc:
            self.log.warning("history.write_failed", table=self.history.name,
                             error=first_line(exc))
            return False
        batches = [r["batch_id"] for r in rows if r.get("batch_id") is not None
                   and r["status"] != BatchStatus.FAILED.value]
        if self._marking and batches:
            try:
                self._mark(max(batches))
            except Exception as exc:  # the next start reads the history instead
                self.log.warning("history.mark_failed", error=first_line(exc))
        return True

    def _mark(self, batch_id: int) -> None:
        if self.checkpoint is not None:
            mark_recorded(self.checkpoint[0], batch_id, self.checkpoint[1])
