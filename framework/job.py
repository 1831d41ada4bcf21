"""The lifecycle every layer's job follows: a template method around a streaming query.

``Job.run()`` calls the steps in order, each a small protected method::

    prepare()          create the schema and the tables the job writes (idempotent)
    execute()          the work; a StreamingJob runs one streaming query:
      read()             the streaming source DataFrame
      transform(df)      pure DataFrame -> DataFrame (default: unchanged)
      write(df)          a DataStreamWriter (sink, foreachBatch...), without trigger or
                         checkpoint; started here with the table's own checkpoint, the
                         trigger policy and a query name, then awaited
    release()          always: stop what still runs (the query)
    report(summary)    what ran (the query's batches and rows)
    finish()           after the work ends: reconcile, count; returns counts for the summary

Errors in a step are re-raised as :class:`~framework.errors.JobError` naming the table and the
step. A stop request (SIGTERM/SIGINT) lets the batch in flight commit, then stops the query.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

import structlog
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from framework.checkpoint import (
    clear_unplanned_debris,
    committed_batches,
    last_committed_batch,
    last_planned_batch,
    query_id,
)
from framework.config.checks import CheckAction
from framework.config.model import Layer, Table
from framework.delta import is_delta_table
from framework.errors import JobError, MedallionError, QueryFailedError, first_line
from framework.eventtime import ALL_AVAILABLE, SPLIT_COMMITS
from framework.history import BatchRecorder, BatchStatus, RunHistory, run_row
from framework.identifiers import quote_name
from framework.jvm import is_connect
from framework.lineage import EMIT_FAILED, TableLineage
from framework.listener import BatchProgress, ProgressListener
from framework.logging import get_logger
from framework.microbatch import (
    Outcome,
    Outcomes,
    StepFunction,
    WriterFactory,
    forget_session,
    record_session,
    stop_orphaned_query,
)
from framework.quality import CheckResult, record_results, run_results
from framework.storage import storage_for
from framework.text import render_table
from framework.timeslice import TimeSlice

T = TypeVar("T")

START_ATTEMPTS = 3
WORKER_NOT_BACK = "Python worker failed to connect back"


class RunStatus(StrEnum):
    """How a table's run ended."""

    SUCCEEDED = "succeeded"
    STOPPED = "stopped"  # stopped on request at a batch boundary
    FAILED = "failed"
    SKIPPED = "skipped"  # not started: a table it reads failed, or a stop was requested
    UP_TO_DATE = "up_to_date"  # not started: nothing new since its last run (framework.pending)


@dataclass(frozen=True)
class TriggerPolicy:
    """availableNow (process what is there, then stop) or a processing-time trigger."""

    continuous: bool = False
    interval: str = "30 seconds"

    def apply(self, writer: DataStreamWriter) -> DataStreamWriter:
        if self.continuous:
            return writer.trigger(processingTime=self.interval)
        return writer.trigger(availableNow=True)


class StopSignal:
    """A stop request shared by the jobs of a run; set by SIGTERM/SIGINT or by a caller."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._forced = threading.Event()
        self.reason = ""
        self.forced_by = ""
        self._forwarding = False

    def request(self, reason: str) -> None:
        self.reason = self.reason or reason
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def force(self, reason: str) -> None:
        """A second stop request received off the jobs' thread (the runner's, while tables run
        at once): each job interrupts itself (:meth:`check_forced`) as the signalled one would."""
        self.request(reason)
        self.forced_by = reason
        self._forced.set()

    @contextlib.contextmanager
    def forwarding(self) -> Iterator[StopSignal]:
        """While inside, a second signal is passed on to the jobs (:meth:`force`) instead of
        interrupting the signalled thread: the runner's, while jobs run on threads."""
        self._forwarding = True
        try:
            yield self
        finally:
            self._forwarding = False

    def is_forced(self) -> bool:
        return self._forced.is_set()

    def check_forced(self) -> None:
        """Raise :class:`KeyboardInterrupt` (the signal's name) after :meth:`force`."""
        if self._forced.is_set():
            raise KeyboardInterrupt(self.forced_by or "SIGINT")

    @contextlib.contextmanager
    def on_signals(self, *signums: int) -> Iterator[StopSignal]:
        """Turn the signals into a stop request while inside; a second signal interrupts
        (:class:`KeyboardInterrupt`, whose text is the signal's name).

        The handler only records: Python runs it between two bytecodes of the main thread,
        which may then hold a lock (the log's, say), so the job that notices the request logs
        it (``job.stop.requested``, ``job.stop.forced``)."""
        previous = {s: signal.getsignal(s) for s in signums}

        def handler(signum: int, frame: Any) -> None:
            name = signal.Signals(signum).name
            if self.is_set() and self._forwarding:
                self.force(name)
                return
            if self.is_set():
                raise KeyboardInterrupt(name)
            self.request(name)

        for s in signums:
            signal.signal(s, handler)
        try:
            yield self
        finally:
            for s, h in previous.items():
                signal.signal(s, h)


@dataclass
class RunContext:
    """What all jobs of one run share."""

    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    trigger: TriggerPolicy = field(default_factory=TriggerPolicy)
    stop: StopSignal = field(default_factory=StopSignal)
    stop_grace_seconds: float = 300.0
    operation: str | None = None  # the refresh whose tables this run rebuilds (the history's)
    # a refresh of this slice's deliveries only: a job rereading its inputs reads only those
    reread_slice: TimeSlice | None = None
    # at most this many tables, none reading another, run at once (framework.runner.run_tables)
    parallel: int = 1


@dataclass
class TableRunSummary:
    """What one table's run did."""

    table: str
    layer: str
    status: RunStatus
    batches: int = 0
    first_batch: int | None = None
    last_batch: int | None = None
    rows_in: int = 0
    rows_out: int = 0
    duration_s: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        return d


@dataclass
class RunSummary:
    """What a whole run did, per table; printed for a person and written as JSON."""

    run_id: str
    env: str
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    tables: list[TableRunSummary] = field(default_factory=list)
    duration_s: float = 0.0
    stopped: bool = False  # a stop request left tables not run

    @property
    def status(self) -> RunStatus:
        statuses = {t.status for t in self.tables}
        for s in (RunStatus.FAILED, RunStatus.STOPPED):
            if s in statuses:
                return s
        return RunStatus.STOPPED if self.stopped else RunStatus.SUCCEEDED

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "env": self.env,
            "started_at": self.started_at,
            "status": self.status.value,
            "duration_s": round(self.duration_s, 3),
            "tables": [t.to_dict() for t in self.tables],
        }

    def render(self) -> str:
        """A plain-text table for a person at a terminal."""
        head = ("table", "status", "batches", "rows in", "rows out", "seconds", "counts")
        rows = [
            (
                t.table,
                t.status.value,
                str(t.batches),
                str(t.rows_in),
                str(t.rows_out),
                f"{t.duration_s:.1f}",
                " ".join(f"{k}={v}" for k, v in sorted(t.counts.items())),
            )
            for t in self.tables
        ]
        title = f"run {self.run_id} ({self.env}): {self.status.value} in {self.duration_s:.1f}s"
        notes = [f"{t.table} {t.status.value}: {t.error}" for t in self.tables if t.error]
        return "\n".join([title, render_table(head, rows, sep="  "), *notes])


class Job(ABC):
    """Base of every layer's job: :meth:`run` calls the steps a subclass implements and always
    ends in one summary."""

    layer: ClassVar[Layer]

    def __init__(self, spark: SparkSession, table: Table, ctx: RunContext) -> None:
        self.spark = spark
        self.table = table
        self.ctx = ctx
        self.log = get_logger(
            env=table.env.name, layer=self.layer.value, table=table.full_name, run_id=ctx.run_id
        )
        # Set once the job may have written: a failure after that still runs ``finish``.
        self.started = False
        self.check_results: list[CheckResult] = []  # the run-level checks' verdicts
        self.started_at = datetime.now(UTC)
        self.recorder = BatchRecorder(
            RunHistory(spark, table.env), self.log, run_id=ctx.run_id, table=table.full_name,
            layer=self.layer.value,
            trigger="continuous" if ctx.trigger.continuous else "availableNow",
            operation=ctx.operation)

    # ------------------------------------------------------------------ the template
    def run(self) -> TableRunSummary:
        """Run the table's job to completion (or to a stop request) and summarise it."""
        began = time.monotonic()
        self.started_at = datetime.now(UTC)
        summary = TableRunSummary(self.table.full_name, self.layer.value, RunStatus.SUCCEEDED)
        self.log.info("job.started", **self.describe())
        lineage = TableLineage.open(self.spark, self.table, self.ctx.run_id, self.ctx.operation,
                                    self.ctx.trigger.continuous, self.log)
        if lineage is not None:
            lineage.started()
        interrupted = False
        try:
            self._step("prepare", self.prepare)
            summary.status = self.execute()
        except MedallionError as exc:
            summary.status, summary.error = RunStatus.FAILED, _session_lost(exc) or str(exc)
            self.log.error("job.failed", step=getattr(exc, "step", None), error=summary.error)
        except (Exception, KeyboardInterrupt) as exc:
            # A Py4J error (JVM gone), a bug or a second signal: stopped and summarised, failed.
            interrupted = isinstance(exc, KeyboardInterrupt)
            if interrupted:
                self.log.warning("job.stop.forced", signal=str(exc) or "SIGINT")
            why = "interrupted by a second signal" if interrupted \
                else _session_lost(exc) or f"{type(exc).__name__}: {first_line(exc)}"
            summary.status, summary.error = RunStatus.FAILED, why
            self.log.error("job.failed", step="run", error=why)
        finally:
            self.release()
        # After a forced interrupt nothing more runs: the next run settles what this one left.
        if not interrupted:
            self.report(summary)
            self.recorder.flush_in_background()  # while the job finishes
        if not interrupted and (summary.status is not RunStatus.FAILED or self.started):
            try:
                summary.counts = self._step("finish", self.finish)
            except MedallionError as exc:
                summary.status, summary.error = RunStatus.FAILED, str(exc)
                self.log.error("job.failed", step="finish", error=str(exc))
            except Exception as exc:
                why = f"{type(exc).__name__}: {first_line(exc)}"
                summary.status, summary.error = RunStatus.FAILED, why
                self.log.error("job.failed", step="finish", error=why)
        summary.rows_out = summary.counts.pop("rows_out", 0)
        # Spark counts a source's rows once per action: a job reading a batch twice has its own.
        summary.rows_in = summary.counts.pop("rows_in", summary.rows_in)
        if not interrupted and summary.status is RunStatus.SUCCEEDED:
            self._check_table(summary)
        if not interrupted:
            self.recorder.wait()
            self._record(summary)
        if lineage is not None:
            # a run stopped by a second signal ends as a stopped one: ABORT
            status = RunStatus.STOPPED if interrupted else summary.status
            lineage.ended(status.value, error=summary.error, rows_in=summary.rows_in,
                          rows_out=summary.rows_out, counts=summary.counts,
                          checks=self.check_results, interrupted=interrupted)
            if lineage.failures:
                summary.counts[EMIT_FAILED] = lineage.failures
        summary.duration_s = time.monotonic() - began
        self.log.info("job.finished", **{k: v for k, v in summary.to_dict().items()
                                         if k not in ("table", "layer")})
        return summary

    @property
    def log_context(self) -> dict[str, Any]:
        """The context bound to the job's logger, for a batch writer's own."""
        return dict(structlog.get_context(self.log))

    # ------------------------------------------------------------------ steps
    def describe(self) -> dict[str, Any]:
        """Fields of the ``job.started`` event; none by default."""
        return {}

    def prepare(self) -> None:
        """Create what the job writes; the default creates the layer's schema."""
        self.spark.sql("CREATE SCHEMA IF NOT EXISTS "
                       + quote_name(f"{self.table.env.catalog}.{self.table.schema}"))

    @abstractmethod
    def execute(self) -> RunStatus:
        """Do the job's work; SUCCEEDED, or STOPPED on a stop request. A failure raises."""

    def release(self) -> None:  # noqa: B027 (an optional hook)
        """Stop what :meth:`execute` left running, whatever happened; nothing by default."""

    def report(self, summary: TableRunSummary) -> None:  # noqa: B027 (an optional hook)
        """Add what ran (batches, rows read) to the summary; nothing by default."""

    def finish(self) -> dict[str, int]:
        """After the work: reconcile and count. ``rows_in`` and ``rows_out``, if present, go
        to the summary's columns; the rest is shown as counts."""
        return {}

    def history_rows(self, summary: TableRunSummary) -> list[dict[str, Any]]:
        """The run history's rows this run still has to write (:mod:`framework.history`); by
        default one for the whole run."""
        failed = summary.status is RunStatus.FAILED
        return [run_row(run_id=self.ctx.run_id, table=self.table.full_name,
                        layer=self.layer.value, trigger=self.recorder.trigger,
                        started_at=self.started_at,
                        status=BatchStatus.FAILED if failed else BatchStatus.COMMITTED,
                        rows_out=None if failed else summary.rows_out, error=summary.error,
                        operation=self.ctx.operation)]

    def _check_table(self, summary: TableRunSummary) -> None:
        """Evaluate the spec's checks of the table as the run leaves it (freshness, volume),
        record them in ``<ops>.quality``, and fail the run on a breached ``fail`` check."""
        if not self.table.spec.run_checks():
            return
        try:
            results = run_results(self.spark, self.table, rows_out=summary.rows_out,
                                  run_id=self.ctx.run_id)
            record_results(self.spark, self.table, results, run_id=self.ctx.run_id)
        except Exception as exc:
            summary.status = RunStatus.FAILED
            summary.error = f"the table's checks could not run: {first_line(exc)}"
            self.log.error("job.failed", step="checks", error=summary.error)
            return
        self.check_results = results
        for r in results:
            if r.passed:
                self.log.info("quality.check.passed", check=r.check, found=r.observed)
                continue
            event = self.log.error if r.action is CheckAction.FAIL else self.log.warning
            event("quality.check.failed", check=r.check, kind=r.kind.value,
                  action=r.action.value, expected=r.threshold, found=r.observed)
        failing = [r.describe() for r in results if not r.passed
                   and r.action is CheckAction.FAIL]
        if failing:
            summary.status, summary.error = RunStatus.FAILED, "; ".join(failing)

    def _record(self, summary: TableRunSummary) -> None:
        """Append the run's rows to the run history; a failure is logged, not raised."""
        try:
            rows = self.history_rows(summary)
        except Exception as exc:
            self.log.warning("history.write_failed", error=first_line(exc))
            return
        if rows:
            self.recorder.append(rows)

    def _step(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``; a failure becomes a :class:`JobError` naming the table and step."""
        try:
            return fn(*args)
        except JobError:
            raise
        except Exception as exc:
            raise JobError(self.table.full_name, name, exc) from exc


class StreamingJob(Job):
    """Base of the layers' streaming jobs; subclasses implement ``read`` and ``write``."""

    def __init__(self, spark: SparkSession, table: Table, ctx: RunContext) -> None:
        super().__init__(spark, table, ctx)
        self.query_name = f"{self.layer.value}.{table.name}"
        self.listener = ProgressListener.install(spark)
        # The job's own file operations (checkpoint logs, landing files): through the
        # session's Hadoop file system, whatever the lake's scheme, with Spark's credentials.
        self.files = storage_for(table.env.root, table.env, spark)
        self.recorder.checkpoint = (table.checkpoint, self.files)
        # Why a micro-batch failed, when the job says it better than Spark's stack trace (a
        # broken expectation, say).
        self.batch_error: str | None = None
        # Batches planned but not committed when the run started: only these can have been
        # written, wholly or in part, before (framework.delta's BatchCommits).
        self.replayable = range(0)
        self.query: StreamingQuery | None = None
        # The executed micro-batches' progress, once the query has ended (see ``report``).
        self.progress: list[BatchProgress] = []
        # Where the outcomes of the query's batches wait (foreach_step)
        self.outcomes: Outcomes | None = None
        self._folding = threading.Lock()  # (the listener's thread and the job's both fold)

    def describe(self) -> dict[str, Any]:
        return {"trigger": self.recorder.trigger}

    def prepare(self) -> None:
        """Create the layer's schema and find the batches a restart may replay; append the
        run history's rows of committed batches that have none (a stopped driver's)."""
        if is_connect(self.spark):
            self._stop_orphaned_query()
        super().prepare()
        checkpoint = self.table.checkpoint
        committed = committed_batches(checkpoint, self.files)  # one listing for both uses
        planned = last_planned_batch(checkpoint, self.files)
        self.replayable = range(max(committed, default=-1) + 1, planned + 1)
        if planned < 0 and not committed:
            removed = clear_unplanned_debris(checkpoint, self.files)
            if removed:
                self.log.warning("checkpoint.debris_removed", files=removed,
                                 reason="left by a driver stopped while it planned the "
                                        "query's first batch")
        try:
            query = query_id(checkpoint, self.files) if committed else None
        except Exception as exc:
            self.log.warning("history.write_failed", error=first_line(exc))
        else:
            self.recorder.recover(query, committed)

    def execute(self) -> RunStatus:
        """Read, transform and write as one streaming query, and wait for it to end."""
        source = self._step("read", self.read)
        result = self._step("transform", self.transform, source)
        writer = self._step("write", self.write, result)
        self.query = self._start(writer)
        self.started = True
        return self._await(self.query)

    def release(self) -> None:
        self._stop_quietly(self.query)
        if self.query is not None and is_connect(self.spark):
            try:
                if not self.query.isActive:
                    forget_session(self.files, self.table.checkpoint)
            except Exception as exc:
                self.log.warning("job.stop.failed", error=first_line(exc))

    def _remote(self) -> str | None:
        """The Spark Connect server the environment names (runtime connect), None where the
        platform made the session (Databricks: its client ends with the task's session)."""
        try:
            return self.table.env.remote_url()
        except MedallionError:
            return None

    def _stop_orphaned_query(self) -> None:
        """Over Spark Connect: stop this table's query that a client gone before its end left
        running on the server (:func:`~framework.microbatch.stop_orphaned_query`)."""
        remote = self._remote()
        if remote is None:
            return
        try:
            stopped = stop_orphaned_query(self.files, self.table.checkpoint, self.spark,
                                          remote, self.query_name)
        except Exception as exc:  # the session is gone with its server: nothing runs
            self.log.info("connect.orphan.none", error=first_line(exc))
            return
        if stopped:
            self.log.warning("connect.orphan.stopped", query_id=stopped,
                             reason="left running on the server by a client that went away; "
                                    "its batch in flight runs again from the checkpoint")

    def report(self, summary: TableRunSummary) -> None:
        self._absorb_outcome()
        self.progress = self._collect(self.query)
        for p in self.progress:  # a report the listener's hook did not see
            self._on_progress(p, hooks=False)
        summary.batches = len(self.progress)
        if self.progress:
            summary.first_batch = self.progress[0].batch_id
            summary.last_batch = self.progress[-1].batch_id
        summary.rows_in = sum(p.input_rows for p in self.progress)

    @abstractmethod
    def read(self) -> DataFrame:
        """The streaming DataFrame this job consumes."""

    def read_table_stream(self, layer: Layer, name: str, *, max_files: int | None = None,
                          max_bytes: str | None = None, whole_commits: bool = False,
                          split_reason: str = SPLIT_COMMITS) -> DataFrame:
        """A stream of the configured Delta table ``layer.name``, read by its location; an
        upstream table never written is a clear error, not an empty stream.

        ``whole_commits``: the query needs whole upstream commits (it keeps a watermark, say),
        so each micro-batch reads every commit available at its start (:mod:`framework.eventtime`).
        An explicit limit still applies, warning ``split_reason`` (as ``medallion validate``)."""
        location = self.table.env.path("tables", layer.value, name)
        if not is_delta_table(self.spark, location):
            raise JobError(self.table.full_name, "read",
                           f"expected the source table {layer.value}.{name} at {location}, "
                           "found no Delta table there (run its layer first)")
        reader = self.spark.readStream.format("delta")
        if max_files:
            reader = reader.option("maxFilesPerTrigger", max_files)
        if max_bytes:
            reader = reader.option("maxBytesPerTrigger", max_bytes)
        if whole_commits and (max_files or max_bytes):
            self.log.warning("stream.read.may_split_commits", source=f"{layer.value}.{name}",
                             max_files_per_trigger=max_files, max_bytes_per_trigger=max_bytes,
                             reason=split_reason)
        elif whole_commits:
            reader = reader.option("maxBytesPerTrigger", ALL_AVAILABLE)
        return reader.load(location)

    def delta_sink(self, df: DataFrame, partition_by: Sequence[str] = ()) -> DataStreamWriter:
        """Append ``df`` to this table through Delta's streaming sink, exactly once by itself
        (it records the query id and batch id in the commit); the rows written are counted by
        an observed metric, read back with :meth:`sink_rows`."""
        from pyspark.sql import functions as F

        counted = df.observe(self._observation, F.count(F.lit(1)).alias("rows"))
        writer = counted.writeStream.format("delta").outputMode("append") \
            .option("path", self.table.location)
        return writer.partitionBy(*partition_by) if partition_by else writer

    def sink_rows(self, progress: list[BatchProgress]) -> int:
        """Rows written by :meth:`delta_sink` over the batches of ``progress``."""
        return sum(int(p.observed.get(self._observation, {}).get("rows", 0)) for p in progress)

    @property
    def _observation(self) -> str:
        return f"{self.layer.value}_{self.table.name}_written"

    def transform(self, df: DataFrame) -> DataFrame:
        """Pure DataFrame -> DataFrame; unchanged by default."""
        return df

    @abstractmethod
    def write(self, df: DataFrame) -> DataStreamWriter:
        """A writer for ``df`` (sink or foreachBatch); the base adds trigger and checkpoint."""

    def foreach_step(self, df: DataFrame, make: WriterFactory,
                     output_mode: str = "append") -> DataStreamWriter:
        """A ``foreachBatch`` writer whose batches are written by what ``make`` makes, where they
        run (here or on a Spark Connect server); outcomes come back to :meth:`fold`."""
        self.outcomes = Outcomes(self.table.checkpoint, self.table.env,
                                 remote=is_connect(self.spark))
        return df.writeStream.outputMode(output_mode).foreachBatch(
            StepFunction(make, self.outcomes))

    def fold(self, outcome: Outcome) -> None:
        """Fold a batch's outcome into the run (in batch order, once each); nothing by default."""

    def _absorb_outcome(self) -> None:
        """Take what the run's batches did: their outcomes, folded in batch order, once each
        (over Spark Connect, read from the checkpoint); the error a failed one explains."""
        if self.outcomes is None:
            return
        try:
            with self._folding:
                for outcome in self.outcomes.take():
                    if outcome.error is not None:
                        self.batch_error = outcome.error
                    else:
                        self.fold(outcome)
        except MedallionError as exc:
            self.log.warning("job.outcome.unread", error=first_line(exc))

    # ------------------------------------------------------------------ machinery
    def _start(self, writer: DataStreamWriter) -> StreamingQuery:
        writer = self.ctx.trigger.apply(writer)
        writer = writer.option("checkpointLocation", self.table.checkpoint)
        self.listener.register(self.query_name, self.log, self._batch_rows, self._on_progress)
        query = self._step("start", self._start_query, writer.queryName(self.query_name))
        self.recorder.query_id = str(query.id)
        if is_connect(self.spark) and self._remote() is not None:
            record_session(self.files, self.table.checkpoint, self.spark, str(query.id))
        self.on_started(query)
        return query

    def _start_query(self, writer: DataStreamWriter) -> StreamingQuery:
        """Start the query. A Spark Connect server starts a Python process for a foreachBatch
        query and gives it a fixed 10 s to connect back; on a loaded machine it may not, and
        the start fails before any batch: it is tried again, twice."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return writer.start()
            except Exception as exc:
                if attempt == START_ATTEMPTS or WORKER_NOT_BACK not in str(exc):
                    raise
                self.log.warning("stream.start.retried", attempt=attempt,
                                 reason="the server's Python worker for the query's batches "
                                        "did not connect back in time")
        raise AssertionError("unreachable")

    def _batch_rows(self, progress: BatchProgress) -> int:
        """:meth:`batch_rows`, once the batches' outcomes are folded."""
        self._absorb_outcome()
        return self.batch_rows(progress)

    def batch_rows(self, progress: BatchProgress) -> int:
        """A batch's input rows, for progress lines: Spark's figure unless the job reads its
        batch more than once (Spark counts the source's rows once per action)."""
        return progress.input_rows

    def on_started(self, query: StreamingQuery) -> None:
        """Called once the query has started (its id is known); nothing by default."""

    def on_batch(self, progress: BatchProgress) -> None:
        """Each micro-batch's progress, on the listener's thread; nothing by default."""

    def batch_figures(self, progress: BatchProgress) -> dict[str, int | None]:
        """The job's figures of a batch for the run history (keys of
        :data:`framework.history.FIGURES`): by default the rows read, and the rows written
        through :meth:`delta_sink`."""
        figures: dict[str, int | None] = {"rows_in": self.batch_rows(progress)}
        if self._observation in progress.observed:
            figures["rows_out"] = self.sink_rows([progress])
        return figures

    def batch_schema_change(self, batch_id: int) -> str | None:
        """How a batch changed its table's columns, for the run history; none by default."""
        return None

    def batch_seconds(self, batch_id: int) -> dict[str, float]:
        """Seconds per own step of the job in a batch, for the run history; none by default."""
        return {}

    def _on_progress(self, progress: BatchProgress, hooks: bool = True) -> None:
        """A batch's progress: its run history row, then :meth:`on_batch`."""
        self._absorb_outcome()
        if self.recorder.query_id is None:  # reported before start() returned
            self.recorder.query_id = query_id(self.table.checkpoint, self.files)
        try:
            self.recorder.add(progress, self.batch_figures, self.batch_seconds,
                              self.batch_schema_change)
        finally:
            if hooks:
                self.on_batch(progress)

    def history_rows(self, summary: TableRunSummary) -> list[dict[str, Any]]:
        """The rows of the batches not appended yet, and one for a failed run (for the batch
        in flight, when one was planned)."""
        rows = self.recorder.take()
        if summary.status is RunStatus.FAILED:
            checkpoint = self.table.checkpoint
            planned = last_planned_batch(checkpoint, self.files)
            in_flight = planned if planned > last_committed_batch(checkpoint, self.files) \
                else None
            rows.append(run_row(run_id=self.ctx.run_id, table=self.table.full_name,
                                layer=self.layer.value, trigger=self.recorder.trigger,
                                started_at=self.started_at, status=BatchStatus.FAILED,
                                query_id=self.recorder.query_id, batch_id=in_flight,
                                error=summary.error, operation=self.ctx.operation))
        return rows

    def _await(self, query: StreamingQuery) -> RunStatus:
        while True:
            self.ctx.stop.check_forced()
            if self.ctx.stop.is_set():
                self._stop_at_batch_boundary(query)
                return RunStatus.STOPPED
            try:
                if query.awaitTermination(0.25):  # type: ignore[arg-type] # seconds, float ok
                    return RunStatus.SUCCEEDED
                self.recorder.flush()
            except StreamingQueryException as exc:
                self._absorb_outcome()
                reason = self.batch_error or first_line(exc)
                raise QueryFailedError(self.table.full_name, "stream", reason) from exc

    def _stop_quietly(self, query: StreamingQuery | None) -> None:
        """Stop the query if it still runs; a JVM that is gone cannot stop it, and says so."""
        try:
            if query is not None and query.isActive:
                query.stop()
        except Exception as exc:
            self.log.warning("job.stop.failed", error=first_line(exc))

    def _stop_at_batch_boundary(self, query: StreamingQuery) -> None:
        """Let the batch in flight commit, then stop; a batch started after it is cancelled
        before it commits and re-runs from its logged offsets on the next start."""
        self.log.warning("job.stop.requested", reason=self.ctx.stop.reason)
        last = _last_batch(query)
        deadline = time.monotonic() + self.ctx.stop_grace_seconds
        while query.isActive and time.monotonic() < deadline:
            self.ctx.stop.check_forced()
            if not query.status.get("isTriggerActive", False):
                break
            if _last_batch(query) > last:
                break
            time.sleep(0.05)
        query.stop()
        self.log.info("job.stopped", reason=self.ctx.stop.reason,
                      last_batch=_last_batch(query))

    def _collect(self, query: StreamingQuery | None) -> list[BatchProgress]:
        if query is None:
            return []
        try:
            run_id = str(query.runId)
        except Exception as exc:  # the JVM is gone: no progress to read
            self.log.warning("job.progress.incomplete", error=first_line(exc))
            return []
        if not self.listener.wait_for(run_id, timeout=30):
            self.log.warning("job.progress.incomplete", query_run_id=run_id)
        # One entry per executed batch: an idle trigger reports progress too (no addBatch).
        by_batch: dict[int, BatchProgress] = {}
        for p in self.listener.progress(run_id):
            if "addBatch" in p.duration_ms or p.input_rows:
                by_batch.setdefault(p.batch_id, p)
        return [by_batch[b] for b in sorted(by_batch)]


# How a Spark Connect client learns that its session is gone on the server (restarted, say)
SESSION_GONE = ("NO_ACTIVE_SESSION", "SESSION_CHANGED", "SESSION_NOT_FOUND", "SESSION_CLOSED")


def _session_lost(error: BaseException) -> str | None:
    """The reason, in words, of a failure that is a Spark Connect session gone; else None."""
    text = str(error)
    found = next((code for code in SESSION_GONE if code in text), None)
    if found is None:
        return None
    return (f"expected the Spark Connect session to last the run, found it gone ({found}: the "
            "server restarted or ended it); what the batch in flight wrote is kept or undone "
            "by the checkpoint: run again to go on from there")


def _last_batch(query: StreamingQuery) -> int:
    """The id of the query's last reported batch, -1 before any."""
    progress: Any = query.lastProgress
    return int(progress["batchId"]) if progress else -1

