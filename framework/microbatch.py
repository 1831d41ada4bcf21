"""A job's micro-batch function, one code path on a classic session and over Spark Connect.

A ``foreachBatch`` function of a classic session runs in this process, on the live job. Over
Spark Connect the client pickles the function at ``start()`` and the server runs it in a Python
process of its own (``foreach_batch_worker``): whatever it captures travels by value, and what
it changes never comes back. So the function is a :class:`BatchFunction`:

- on a classic session it calls the job's batch method in place;
- over Connect it carries the job pickled *without its session*: the pickler
  (:class:`_JobPickler`) stands a token in for every object only the client can hold (the Spark
  session, loggers, locks, the streaming query, the progress listener, the run history's
  recorder), and the server's worker puts the batch's own session, a logger with the same
  context, fresh locks, or nothing in their place (:class:`_JobUnpickler`). The job is
  unpickled once per query start and kept for its batches.

What a batch did reaches the client through the checkpoint: after each batch (and after a
batch that failed) the worker writes the job's *outcome* (the attributes its layer names in
``StreamingJob.outcome_fields``: batch figures, ledger rows, the error it explains) to
``<checkpoint>/outcomes/<batch id>``, tagged with the run's token; the client reads the newest
one when Spark reports a batch, when the query fails, and when it ends
(:func:`read_outcome`). The figures are cumulative over the query's run, so the newest outcome
stands for all the run's batches before it.

The writer id a batch tags its commits with is read from the checkpoint's ``metadata`` (written
by Spark before the first batch), in both modes: nothing is handed over after ``start()``.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import pickle
import sys
import threading
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog
from pyspark import cloudpickle

from framework.errors import StorageError
from framework.logging import LogFormat, configure_logging, get_logger
from framework.storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["OUTCOMES", "SESSION_RECORD", "BatchFunction", "ClientOnly", "forget_session",
           "read_outcome", "record_session", "stop_orphaned_query", "write_outcome"]

OUTCOMES = "outcomes"  # the checkpoint's folder of batch outcomes
_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


class ClientOnly:
    """A mixin for objects that only mean something in the client's process (a listener, the
    run history's recorder): a job pickled for the server carries None in their place."""


def _is_session(obj: Any) -> bool:
    kind = type(obj)
    return kind.__name__ == "SparkSession" and kind.__module__.startswith("pyspark.sql")


def _is_query(obj: Any) -> bool:
    kind = type(obj)
    return kind.__name__ == "StreamingQuery" and kind.__module__.startswith("pyspark.sql")


class _JobPickler(cloudpickle.Pickler):
    """Pickles a job, with a token for each object only the client can hold."""

    def persistent_id(self, obj: Any) -> tuple[Any, ...] | None:
        if _is_session(obj):
            return ("spark",)
        if isinstance(obj, _LOCK_TYPES):
            return ("lock", isinstance(obj, _LOCK_TYPES[1]))
        if isinstance(obj, ClientOnly | threading.Thread | io.IOBase) or _is_query(obj):
            return ("none",)
        if type(obj).__module__.startswith("structlog") and hasattr(obj, "_context"):
            return ("log", dict(structlog.get_context(obj)))
        return None


class _JobUnpickler(pickle.Unpickler):
    """Unpickles a job on the server, with the batch's session in place of the client's."""

    def __init__(self, data: bytes, spark: SparkSession) -> None:
        super().__init__(io.BytesIO(data))
        self.spark = spark

    def persistent_load(self, pid: Any) -> Any:
        kind = pid[0]
        if kind == "spark":
            return self.spark
        if kind == "lock":
            return threading.RLock() if pid[1] else threading.Lock()
        if kind == "log":
            return get_logger(**pid[1])
        if kind == "none":
            return None
        raise pickle.UnpicklingError(f"expected a token of the job's pickler, found {pid!r}")


def dumps_job(job: Any) -> bytes:
    buffer = io.BytesIO()
    _JobPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(job)
    return buffer.getvalue()


def loads_job(data: bytes, spark: SparkSession) -> Any:
    return _JobUnpickler(data, spark).load()


class BatchFunction:
    """The ``foreachBatch`` function of a job: ``job.run_batch(method, batch, batch_id)``.

    ``remote``: the function runs on a Spark Connect server; the job is pickled now (at the
    writer's making, as the job stands after its tables are prepared), and each batch writes
    its outcome for the client, tagged with :attr:`token`."""

    def __init__(self, job: Any, method: str, *, remote: bool) -> None:
        self.method = method
        self.token = uuid.uuid4().hex if remote else None
        self.payload = dumps_job(job) if remote else None
        self._job = None if remote else job

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_job": None}

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        job = self._job
        if job is None:  # the first batch of a query run, on the server
            assert self.payload is not None
            if not structlog.is_configured():
                configure_logging(LogFormat.JSON, stream=sys.stderr)
            job = self._job = loads_job(self.payload, batch.sparkSession)
        job.run_batch(self.method, batch, batch_id, self.token)


def write_outcome(storage: Storage, checkpoint: str, batch_id: int, token: str,
                  fields: Mapping[str, Any]) -> None:
    """Write a batch's outcome (whole, replacing the earlier ones of the run)."""
    folder = f"{checkpoint.rstrip('/')}/{OUTCOMES}"
    data = pickle.dumps({"token": token, "batch_id": batch_id, "fields": dict(fields)})
    storage.write_bytes(f"{folder}/{batch_id}", data)
    for f in list(storage.list_files(folder)):  # the one before is kept for a slow reader
        name = f.path.rsplit("/", 1)[-1]
        if name.isdigit() and int(name) < batch_id - 1:
            storage.delete(f.path)


def read_outcome(storage: Storage, checkpoint: str, token: str) -> dict[str, Any] | None:
    """The newest outcome this run's batches wrote (its fields), None before any."""
    folder = f"{checkpoint.rstrip('/')}/{OUTCOMES}"
    for _ in range(3):  # listed, then removed by a newer one before it was read: list again
        if not storage.exists(folder):
            return None
        ids = sorted((int(n) for f in storage.list_files(folder)
                      if (n := f.path.rsplit("/", 1)[-1]).isdigit()), reverse=True)
        for batch_id in ids:
            try:
                with storage.open(f"{folder}/{batch_id}") as fh:
                    outcome = _OutcomeUnpickler(io.BytesIO(fh.read())).load()
            except StorageError:
                continue
            if isinstance(outcome, dict) and outcome.get("token") == token:
                return dict(outcome["fields"])
            return None  # the newest is another run's: this run's batches wrote none yet
    return None


class _OutcomeUnpickler(pickle.Unpickler):
    """Reads an outcome: plain data and the framework's own classes of figures (dataclasses),
    nothing else (a checkpoint file is no place to run code from)."""

    SAFE = {("collections", "Counter"), ("collections", "OrderedDict"),
            ("builtins", "set"), ("builtins", "frozenset"), ("datetime", "datetime"),
            ("datetime", "date"), ("datetime", "timezone"), ("datetime", "timedelta"),
            ("decimal", "Decimal")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.SAFE:
            return super().find_class(module, name)
        if module.split(".")[0] in ("framework", "bronze", "silver", "gold"):
            found = super().find_class(module, name)
            if dataclasses.is_dataclass(found) or (isinstance(found, type) and \
                    issubclass(found, enum.Enum)):
                return found
        raise pickle.UnpicklingError(f"expected the figures of a batch, found {module}.{name}")


# ------------------------------------------------------------------ a client that went away
SESSION_RECORD = "connect_session"  # the checkpoint's file naming the client's session


def record_session(storage: Storage, checkpoint: str, spark: SparkSession,
                   query_id: str) -> None:
    """Note in the checkpoint the Connect session whose query writes it, until it ends."""
    data = json.dumps({"session_id": spark.session_id,  # type: ignore[attr-defined]
                       "query_id": query_id}).encode("utf-8")
    storage.write_bytes(f"{checkpoint.rstrip('/')}/{SESSION_RECORD}", data)


def forget_session(storage: Storage, checkpoint: str) -> None:
    """The query ended while its client was there: nothing is left running."""
    storage.delete(f"{checkpoint.rstrip('/')}/{SESSION_RECORD}")


def stop_orphaned_query(storage: Storage, checkpoint: str, spark: SparkSession, remote: str,
                        query_name: str) -> str | None:
    """Stop the query a client that went away (killed, say) left running on the server.

    Spark Connect keeps a session's queries running when its client is gone, until the
    session expires: a new run of the table would write the same checkpoint beside it. The
    session named in the checkpoint (:func:`record_session`) is attached by its id, its active
    query of ``query_name`` stopped (its batch in flight is cut short and runs again from the
    checkpoint, as after a killed driver) and the session released. Returns the stopped
    query's id, None when nothing was running."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    path = f"{checkpoint.rstrip('/')}/{SESSION_RECORD}"
    if not storage.exists(path):
        return None
    with storage.open(path) as fh:
        record = json.loads(fh.read().decode("utf-8") or "{}")
    session_id = record.get("session_id")
    stopped = None
    if session_id and session_id != spark.session_id:  # type: ignore[attr-defined]
        sep = ";" if "/;" in remote else "/;"
        other = ConnectSession.builder.remote(
            f"{remote.rstrip('/') if sep == '/;' else remote}{sep}session_id={session_id}"
        ).create()
        try:
            for query in other.streams.active:
                if query.name == query_name:
                    query.stop()
                    stopped = str(query.id)
        finally:
            other.stop()  # releases the session on the server
    storage.delete(path)
    return stopped
