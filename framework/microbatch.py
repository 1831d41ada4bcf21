"""A streaming job's micro-batches, one code path on a classic session and over Spark Connect.

A job does not write its micro-batches itself: it hands ``foreachBatch`` a
:class:`StepFunction` made of a *writer factory* (:data:`WriterFactory`): a small frozen,
picklable object holding what the batches need, decided before the query starts (the table, the
batches a restart may replay, the log's context). Where the batches run, the factory makes the
layer's :class:`BatchWriter` with the batch's session, once per query start, and the writer
turns each batch into a frozen :class:`Outcome` (counts, ledger rows, the error it explains):
a pure step from the batch to what it did.

On a classic session the function runs in this process, and each outcome is handed over in
memory. Over Spark Connect the client pickles the function (the factory only: no job, session,
lock or logger crosses the wire) and the server's Python worker (``foreach_batch_worker``) runs
it; each outcome is written to ``<checkpoint>/outcomes/<batch id>``, tagged with the run's token.
Either way the job takes them from one place (:meth:`Outcomes.take`) and folds them into its run
in batch order (``StreamingJob.fold``): what comes back is a type, never attribute names.

The writer id a batch tags its commits with is read from the checkpoint's ``metadata`` (written
by Spark before the first batch), in both modes: nothing is handed over after ``start()``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import io
import json
import pickle
import queue
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from framework.checkpoint import query_id
from framework.config.model import Environment, Table
from framework.delta import BatchCommits
from framework.errors import BatchFailedError, StorageError
from framework.logging import LogFormat, configure_logging
from framework.storage import Storage, storage_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["OUTCOMES", "SESSION_RECORD", "BatchWriter", "Outcome", "Outcomes", "StepFunction",
           "TableBatches", "WriterFactory", "batch_commits", "forget_session", "record_session",
           "stop_orphaned_query"]

OUTCOMES = "outcomes"  # the checkpoint's folder of batch outcomes


# ------------------------------------------------------------------ a batch's step
@dataclass(frozen=True)
class Outcome:
    """What one micro-batch did, for its job to fold into the run (a layer's outcome adds its
    figures). ``error``: why the batch failed, in words, when its writer knows better than the
    stack trace Spark wraps around the failure."""

    batch_id: int
    error: str | None = None


class BatchWriter(Protocol):
    """A layer's writer of one micro-batch: a pure step from the batch to its outcome."""

    def write(self, batch: DataFrame, batch_id: int) -> Outcome: ...


# Makes a query's batch writer from a session, where the batches run (see the module).
WriterFactory = Callable[["SparkSession"], BatchWriter]


@dataclass(frozen=True)
class TableBatches:
    """The writer factory of a table whose batches need only the table, the batches its
    checkpoint may replay, and the job's log context: makes ``writer(self, spark)``."""

    writer: Callable[[TableBatches, SparkSession], BatchWriter]
    table: Table
    replayable: range
    log_context: Mapping[str, Any]
    writer_id: str | None = None  # (None: the table's query, see batch_commits)

    def __call__(self, spark: SparkSession) -> BatchWriter:
        return self.writer(self, spark)


def batch_commits(table: Table, replayable: range, spark: SparkSession,
                  writer_id: str | None = None) -> BatchCommits:
    """The tagged appends of a writer of ``table``'s batches: as ``writer_id``, or as the
    table's query (its id, from the checkpoint, written by Spark before the first batch)."""
    commits = BatchCommits(spark)
    commits.replayable = replayable
    commits.writer_id = writer_id or query_id(
        table.checkpoint, storage_for(table.env.root, table.env, spark))
    return commits


class Outcomes:
    """Where a query's batch outcomes wait for its job: in this process on a classic session;
    over Spark Connect in ``<checkpoint>/outcomes/<batch id>``, tagged with the run's token, read
    and removed by the job (:meth:`take`; an earlier run's are removed unread)."""

    def __init__(self, checkpoint: str, env: Environment, *, remote: bool) -> None:
        self.folder = f"{checkpoint.rstrip('/')}/{OUTCOMES}"
        self.env = env
        self.token = uuid.uuid4().hex if remote else None
        self._here: queue.SimpleQueue[Outcome] = queue.SimpleQueue()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_here"}

    def put(self, outcome: Outcome) -> None:
        """Hand a batch's outcome to the job (where the batch runs)."""
        if self.token is None:
            self._here.put(outcome)
            return
        data = pickle.dumps({"token": self.token, "outcome": outcome})
        storage_for(self.folder, self.env).write_bytes(f"{self.folder}/{outcome.batch_id}", data)

    def take(self) -> list[Outcome]:
        """The outcomes put since the last call, in batch order (in the job's process)."""
        taken: list[Outcome] = []
        if self.token is None:
            with contextlib.suppress(queue.Empty):
                while True:
                    taken.append(self._here.get_nowait())
            return sorted(taken, key=lambda o: o.batch_id)
        store = storage_for(self.folder, self.env)
        if not store.exists(self.folder):
            return []
        for f in sorted(store.list_files(self.folder), key=lambda f: f.path):
            try:
                with store.open(f.path) as fh:
                    record = _OutcomeUnpickler(io.BytesIO(fh.read())).load()
            except StorageError:  # (removed since it was listed)
                continue
            if isinstance(record, dict) and record.get("token") == self.token:
                taken.append(record["outcome"])
            store.delete(f.path)  # (another token's: a run before this one, gone)
        return sorted(taken, key=lambda o: o.batch_id)


class StepFunction:
    """A query's ``foreachBatch`` function: the writer ``make`` makes (once per query start, where
    the batches run) writes each batch; its outcome, or the failure it explains, goes to
    ``outcomes``."""

    def __init__(self, make: WriterFactory, outcomes: Outcomes) -> None:
        self.make = make
        self.outcomes = outcomes
        self._writer: BatchWriter | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_writer": None}

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if self._writer is None:  # the first batch of a query run
            if self.outcomes.token is not None and not structlog.is_configured():
                configure_logging(LogFormat.JSON, stream=sys.stderr)  # (on the server)
            self._writer = self.make(batch.sparkSession)
        try:
            outcome = self._writer.write(batch, batch_id)
        except BatchFailedError as exc:
            self.outcomes.put(Outcome(batch_id, error=exc.reason))
            raise
        self.outcomes.put(outcome)


@functools.cache
def _figure_packages() -> frozenset[str]:
    """The packages whose classes an outcome may hold: the framework's and the installed
    layers' (their plugins' entry points)."""
    from importlib.metadata import entry_points

    # (framework.layers.GROUP: importing it would close a cycle through framework.job)
    return frozenset({"framework", *(ep.module.split(".")[0]
                                     for ep in entry_points(group="medallion.layers"))})


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
        if module.split(".")[0] in _figure_packages():
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

    Spark Connect keeps a session's queries running when its client is gone, until the session
    expires: a new run of the table would write the same checkpoint beside it. The session named in
    the checkpoint (:func:`record_session`) is attached by its id, its active query ``query_name``
    stopped (its batch in flight runs again from the checkpoint, as after a killed driver) and the
    session released. Returns the stopped query's id, None when nothing was running."""
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
