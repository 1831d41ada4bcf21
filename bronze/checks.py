"""Which files of a micro-batch cannot be ingested whole, and why.

A file is ingested whole or not at all (DESIGN: "a file is ingested whole or quarantined
whole"). Reads are strict (see :mod:`bronze.reading`), so a file Spark cannot read to its end
fails the batch's write before anything commits. Then:

1. :func:`failing_file` finds the file in Spark's error: a read fault is ``FAILED_READ_FILE``
   with the file's path, text that is not UTF-8 fails with :data:`~bronze.reading.NOT_UTF8`
   and the path;
2. if the error names none, :func:`find_failing` reads the files again in halves, then one at
   a time, until it has the ones that fail on their own;
3. a file named by an error is read once more alone before it is given up: a fault of the
   store that does not repeat (a dropped connection) does not quarantine a sound file.

The batch is then written again without those files, and they go whole to the quarantine
folder with the error in the ledger. Two checks need no read at all (:func:`unreadable`): a
file of 0 bytes, and one gone before the batch reads it.

For parquet, the rows read from each file are compared with its footer's row count
(:func:`parquet_footer_counts`, a job that reads footers only) before the batch is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from bronze.batch import INTERNAL, SOURCE_FILE, with_file_columns
from bronze.reading import NOT_UTF8, FeedReader, literal
from bronze.spec import ledger_path
from framework.errors import StorageError, first_line
from framework.jvm import Cause, error_chain
from framework.storage import FileInfo, Storage, from_uri

READ_FAULT = "FAILED_READ_FILE"
USER_RAISED = "USER_RAISED_EXCEPTION"


def stat_or_none(storage: Storage, path: str) -> FileInfo | None:
    """The file's size and time; None for a file that is gone."""
    try:
        return storage.stat(path)
    except StorageError:
        return None


def unreadable(info: FileInfo | None) -> str | None:
    """Why a file cannot be read, from its metadata alone; None when nothing is known."""
    if info is None:
        return "the file is gone: it was deleted or moved after it was listed"
    return "empty file (0 bytes)" if info.size == 0 else None


class FileChecks:
    """Reads a feed's files again, to find those that cannot be read whole."""

    def __init__(self, spark: SparkSession, reader: FeedReader, schema: StructType,
                 log: Any) -> None:
        self.spark, self.reader, self.schema, self.log = spark, reader, schema, log

    def read(self, files: Sequence[str]) -> DataFrame | None:
        """A batch read of ``files``, as a batch reads them (with the file columns); None
        when none can be read by name."""
        frame = self.reader.read(files, self.schema).frame
        return with_file_columns(frame) if frame is not None else None

    def probe(self, files: Sequence[str]) -> None:
        """Read ``files`` to the end (the format's checks included); raises when one cannot be."""
        df = self.read(files)
        if df is not None:
            df.write.format("noop").mode("overwrite").save()

    def failing(self, error: BaseException, files: Sequence[str], batch_id: int
                ) -> dict[str, str]:
        """The files that made a batch's write fail, with the reason: the one the error
        names, if it fails again alone (a fault of the store that does not repeat is not the
        file's), else those that fail on their own (:func:`find_failing`)."""
        if stopped(error):  # (the batch was stopped: no file is to blame)
            return {}
        short = isinstance(error, ShortRead)
        named = (error.path, error.reason) if isinstance(error, ShortRead) \
            else failing_file(self.spark, error)
        if named is not None:
            path = from_uri(named[0])
            if path in files:
                if not short and reads_alone([path], self.probe):
                    self.log.warning("bronze.file.read_again", batch_id=batch_id, file=path,
                                     first_error=named[1])
                    return {}
                return {path: named[1]}
        return find_failing(files, self.probe, self.spark)

    def check_parquet(self, stamped: DataFrame, files: Sequence[str]) -> None:
        """Raise :class:`ShortRead` for a parquet file whose rows decoded (every column, as the
        write will) are not its footer's row count, before anything is written. A pass of its
        own: parquet feeds are read twice."""
        footers = parquet_footer_counts(self.spark, files)
        columns = [c for c in stamped.columns if c != SOURCE_FILE and c not in INTERNAL]
        decoded = stamped.groupBy(SOURCE_FILE).agg(F.count(F.hash(*columns)).alias("count"))
        read = {ledger_path(r[SOURCE_FILE]): int(r["count"]) for r in decoded.collect()}
        for path, rows in footers.items():
            if read.get(path, 0) != rows:
                raise ShortRead(path, f"read {read.get(path, 0)} rows, the footer says {rows}")


class ShortRead(Exception):
    """A parquet file read fewer rows than its footer gives (found before the write)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def failing_file(spark: SparkSession, error: BaseException) -> tuple[str, str] | None:
    """The file Spark's ``error`` names, with the reason (the root cause's first line), or None."""
    chain = error_chain(error) or _python_chain(error)
    for cause in chain:
        if cause.condition.startswith(READ_FAULT):
            return str(cause.parameters.get("path")), chain[-1].summary
        if cause.condition == USER_RAISED:
            message = cause.parameters.get("errorMessage") or ""
            if message.startswith(NOT_UTF8):
                return message[len(NOT_UTF8):], "not UTF-8 text (another encoding?)"
    return None


def find_failing(files: Sequence[str], probe: Callable[[Sequence[str]], None],
                 spark: SparkSession) -> dict[str, str]:
    """The files of ``files`` that fail to read on their own (``probe`` reads some files to
    the end and raises if it cannot), with the reason: by halves, down to single files."""
    failing: dict[str, str] = {}

    def search(group: Sequence[str]) -> None:
        try:
            probe(group)
        except Exception as exc:
            if stopped(exc):  # (the read was stopped, not refused: the batch fails)
                raise
            if len(group) == 1:
                named = failing_file(spark, exc)
                failing[group[0]] = named[1] if named else first_line(exc)[:300]
                return
            half = len(group) // 2
            search(group[:half])
            search(group[half:])

    if files:
        search(list(files))
    return failing


# What an error says when the batch was stopped rather than refused by a file: its jobs
# cancelled (a query stopped, a second stop signal, the SparkContext shut down), its thread
# interrupted, the driver's JVM or the Spark Connect session gone.
STOPPED = ("SPARK_JOB_CANCELLED", "OPERATION_CANCELED", "cancelled part of cancelled job group",
           "SparkContext was shut down", "SparkContext has been shutdown",
           "InterruptedException", "ClosedByInterruptException", "Py4JNetworkError",
           "Answer from Java side is empty", "Error while receiving", "Error while sending",
           "NO_ACTIVE_SESSION", "SESSION_CLOSED", "SESSION_CHANGED", "SESSION_NOT_FOUND")


def stopped(error: BaseException) -> bool:
    """Whether ``error`` (or one of its causes) says the work was stopped (:data:`STOPPED`):
    a file read then is never blamed on the file."""
    current: BaseException | None = error
    for _ in range(20):
        if current is None:
            return False
        text = f"{type(current).__name__}: {current}"
        if any(marker in text for marker in STOPPED):
            return True
        current = current.__cause__ or current.__context__
    return False


def reads_alone(files: Sequence[str], probe: Callable[[Sequence[str]], None]) -> bool:
    """Whether ``files`` read to the end on a second try (a fault that does not repeat)."""
    try:
        probe(files)
    except Exception:
        return False
    return True


def parquet_footer_counts(spark: SparkSession, files: Sequence[str]) -> dict[str, int]:
    """Rows per file (by local path) from the files' footers: a job that reads no column data."""
    if not files:
        return {}
    rows = (spark.read.format("parquet").load([literal(f) for f in files])
            .groupBy(F.col("_metadata.file_path").alias("file")).count().collect())
    return {from_uri(r["file"]): int(r["count"]) for r in rows}


def rows_per_file(df: DataFrame, column: str) -> dict[str, int]:
    """Rows of ``df`` per source file (by the ledger's path)."""
    return {ledger_path(r[column]): int(r["count"])
            for r in df.groupBy(column).count().collect()}


CAUSED_BY = "Caused by: "


def _python_chain(error: BaseException) -> list[Cause]:
    """The Spark errors of a Spark Connect error and its causes, outermost first."""
    chain: list[Cause] = []
    current: Any = error
    while current is not None and len(chain) < 20:
        if hasattr(current, "getCondition"):
            chain.append(Cause(str(current.getCondition() or ""),
                               dict(current.getMessageParameters() or {}), _describe(current)))
        current = current.__cause__ or getattr(current, "_cause", None)
    return chain


def _describe(error: Any) -> str:
    # A Spark Connect error carries the server's stack, its causes as "Caused by:" lines: the
    # root cause is the last, as the JVM chain's last throwable is on a classic session
    trace = error.getStackTrace() if hasattr(error, "getStackTrace") else None
    causes = [line.removeprefix(CAUSED_BY) for line in str(trace or "").splitlines()
              if line.startswith(CAUSED_BY)]
    if causes:
        kind, _, text = causes[-1].partition(": ")
        kind = kind.rsplit(".", 1)[-1]
        return f"{kind}: {text.strip().splitlines()[0]}" if text.strip() else kind
    message = str(getattr(error, "_message", None) or error).strip().splitlines()
    return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
