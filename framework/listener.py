"""One structured event per micro-batch, from Spark's StreamingQueryListener.

The listener is installed once per SparkSession. Jobs register their query name with the
logger that carries their context (layer, table, run_id); each progress report becomes one
``stream.batch.progress`` event with that context, and is kept for the run summary.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
)

from framework.errors import message_line
from framework.jvm import JsonProgressListener, session_key
from framework.logging import get_logger


@dataclass(frozen=True)
class BatchProgress:
    """The figures of one micro-batch, as reported by Spark."""

    batch_id: int
    input_rows: int
    input_rows_per_second: float
    processed_rows_per_second: float
    duration_ms: dict[str, int]
    watermark: str | None
    event_time_min: str | None  # of the batch's rows, when the query has a watermark
    event_time_max: str | None
    state_rows: int
    state_rows_updated: int
    rows_dropped_by_watermark: int
    observed: dict[str, dict[str, Any]]
    # A Kafka source's offsets per topic and partition, at the batch's start and end
    start_offsets: dict[str, dict[str, int]] | None = None
    end_offsets: dict[str, dict[str, int]] | None = None
    timestamp: str | None = None  # the trigger's start, ISO 8601 in UTC


    @classmethod
    def from_progress(cls, p: Any) -> BatchProgress:
        ops = list(p.stateOperators or [])
        observed = {name: row.asDict() for name, row in (p.observedMetrics or {}).items()}
        return cls(
            batch_id=int(p.batchId),
            input_rows=int(p.numInputRows or 0),
            input_rows_per_second=_finite(p.inputRowsPerSecond),
            processed_rows_per_second=_finite(p.processedRowsPerSecond),
            duration_ms={k: int(v) for k, v in (p.durationMs or {}).items()},
            watermark=(p.eventTime or {}).get("watermark"),
            event_time_min=(p.eventTime or {}).get("min"),
            event_time_max=(p.eventTime or {}).get("max"),
            state_rows=sum(int(o.numRowsTotal) for o in ops),
            state_rows_updated=sum(int(o.numRowsUpdated) for o in ops),
            rows_dropped_by_watermark=sum(int(o.numRowsDroppedByWatermark) for o in ops),
            observed=observed,
            start_offsets=_partition_offsets(p.sources, "startOffset"),
            end_offsets=_partition_offsets(p.sources, "endOffset"),
            timestamp=p.timestamp,
        )

    def event_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "batch_id": self.batch_id,
            "input_rows": self.input_rows,
            "input_rows_per_second": round(self.input_rows_per_second, 1),
            "processed_rows_per_second": round(self.processed_rows_per_second, 1),
            "duration_ms": self.duration_ms.get("triggerExecution", 0),
            "durations_ms": self.duration_ms,
            "watermark": self.watermark,
            "state_rows": self.state_rows,
            "rows_dropped_by_watermark": self.rows_dropped_by_watermark,
        }
        for metrics in self.observed.values():
            fields.update(metrics)
        return fields


def _partition_offsets(sources: Any, key: str) -> dict[str, dict[str, int]] | None:
    """Offsets per topic and partition of the sources that have them (Kafka's JSON:
    ``{"topic": {"0": 42}}``); None when no source does (a file or Delta source)."""
    merged: dict[str, dict[str, int]] = {}
    for source in sources or []:
        raw = getattr(source, key, None)
        try:
            value = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            continue
        if isinstance(value, dict) and value and all(isinstance(v, dict)
                                                     for v in value.values()):
            merged.update(value)
    return merged or None


def _finite(value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 0.0
    return v if v == v and v not in (float("inf"), float("-inf")) else 0.0


class ProgressListener(JsonProgressListener):
    """Turns each query progress into one event and keeps it for the job's summary."""

    _installed: dict[str, ProgressListener] = {}
    _install_lock = threading.Lock()

    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()
        self._loggers: dict[str, Any] = {}
        self._progress: dict[str, list[BatchProgress]] = {}  # by run id
        self._terminated: set[str] = set()
        self._names: dict[str, str | None] = {}  # query run id -> query name
        self._watchers: list[Callable[[str | None, BatchProgress, int], None]] = []
        self._rows: dict[str, Callable[[BatchProgress], int]] = {}  # query name -> counter
        self._hooks: dict[str, Callable[[BatchProgress], None]] = {}  # query name -> on batch

    @classmethod
    def install(cls, spark: SparkSession) -> ProgressListener:
        """The session's listener, added on first use."""
        key = session_key(spark)  # one per session (of the JVM or the Connect server)
        with cls._install_lock:
            listener = cls._installed.get(key)
            if listener is None:
                listener = cls()
                spark.streams.addListener(listener)
                cls._installed[key] = listener
            return listener

    @classmethod
    def uninstall(cls, spark: SparkSession) -> None:
        """Remove the session's listener, if one was added."""
        with cls._install_lock:
            listener = cls._installed.pop(session_key(spark), None)
        if listener is not None:
            spark.streams.removeListener(listener)

    # ------------------------------------------------------------------ registration
    def register(self, query_name: str, log: Any,
                 rows: Callable[[BatchProgress], int] | None = None,
                 on_batch: Callable[[BatchProgress], None] | None = None) -> None:
        """Events of the query ``query_name`` carry ``log``'s bound context; ``rows`` gives a
        batch's input rows when the job knows better than Spark (it counts source rows once per
        action); ``on_batch`` gets each batch's progress (a failing call is logged, not raised)."""
        with self._cond:
            self._loggers[query_name] = log
            if rows is not None:
                self._rows[query_name] = rows
            if on_batch is not None:
                self._hooks[query_name] = on_batch

    @contextlib.contextmanager
    def watching(
        self, callback: Callable[[str | None, BatchProgress, int], None]
    ) -> Iterator[None]:
        """Call ``callback(query_name, progress, input_rows)`` for each batch reported while
        inside (the demo's progress lines); a failing callback is logged, never raised."""
        with self._cond:
            self._watchers.append(callback)
        try:
            yield
        finally:
            with self._cond:
                self._watchers.remove(callback)

    def progress(self, run_id: str) -> list[BatchProgress]:
        with self._cond:
            return list(self._progress.get(run_id, []))

    def wait_for(self, run_id: str, timeout: float = 30.0) -> bool:
        """Wait until the run's termination has been delivered to this listener.

        Listener events arrive asynchronously but in order, so once the termination is here every
        progress report of the run is too. (``lastProgress`` may name a batch that never ran, an
        idle trigger, whose progress is never posted: do not wait for that one.)"""
        deadline = time.monotonic() + timeout
        with self._cond:
            while run_id not in self._terminated:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def _log(self, name: str | None) -> Any:
        return self._loggers.get(name or "") or get_logger(query=name)

    # ------------------------------------------------------------------ Spark callbacks
    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        with self._cond:
            self._names[str(event.runId)] = event.name
        self._log(event.name).info(
            "stream.query.started", query_id=str(event.id), query_run_id=str(event.runId)
        )

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        p = event.progress
        batch = BatchProgress.from_progress(p)
        with self._cond:
            self._progress.setdefault(str(p.runId), []).append(batch)
            self._cond.notify_all()
        with self._cond:
            watchers = list(self._watchers)
            counter = self._rows.get(p.name or "")
            hook = self._hooks.get(p.name or "")
        fields = batch.event_fields()
        if counter is not None:  # the job counts its batch's rows itself (see batch_rows)
            try:
                rows = counter(batch)
            except Exception:
                rows = batch.input_rows
            if rows != batch.input_rows:
                seconds = batch.duration_ms.get("triggerExecution", 0) / 1000
                fields |= {"input_rows": rows, "processed_rows_per_second":
                           round(rows / seconds, 1) if seconds else 0.0}
        self._log(p.name).info("stream.batch.progress", **fields)
        if hook is not None:
            try:
                hook(batch)
            except Exception as exc:
                self._log(p.name).warning("stream.progress.hook_failed", error=str(exc))
        for watcher in watchers:
            try:
                watcher(p.name, batch, counter(batch) if counter else batch.input_rows)
            except Exception as exc:  # a display must not break the stream
                self._log(p.name).warning("stream.progress.watcher_failed", error=str(exc))

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        with self._cond:
            log = self._log(self._names.get(str(event.runId)))
            self._terminated.add(str(event.runId))
            self._cond.notify_all()
        if event.exception:
            log.error(
                "stream.query.failed",
                query_id=str(event.id),
                query_run_id=str(event.runId),
                error=message_line(event.exception)[:500],
                error_class=event.errorClassOnException,
            )
