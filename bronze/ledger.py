"""The file ledger ``<table>_files``: one row per landing file of a feed, with its batch, its
rows in bronze and in quarantine, its status and error; partitioned by batch.

Rows per file are counted from what the batch committed: a ``groupBy`` of the source file over
the rows its bronze (and quarantine) commit added, read from that commit's own files (the
tables' change data feed: :func:`framework.delta.version_rows`). Counting them in the pass
that writes the batch, with a histogram of the source files' hashes holding a bin per file, is
exact but takes a page of explanation, and is no faster: ``bench/bronze_ingest.py
--plain-counts`` (a flag of the version that had both), on 1M records in 200 files alternated
in one session (medians), gave 12.78 s with the histogram and 12.56 s with the plain count (5
rounds); 14.42 s and 12.86 s in a second run (3 rounds). The plain count costs a bronze run of
a million records 0.6 to 0.8 s (and 0.15 s to find the commit's version); the ledger's append
0.3 to 0.4 s. A batch that read one file (continuous ingestion on a short trigger) takes that
file's bronze rows from the count of the pass that wrote them: with the read back, ten
one-file batches took 14.0 s against a hand-written query's 9.4 s, its 0.4 s per batch most of
the difference.

A batch's rows are appended once, as they will stand once its files are settled; see
:mod:`bronze.reconcile`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from bronze.batch import BATCH_ID, SOURCE_FILE
from bronze.checks import rows_per_file
from bronze.spec import FileStatus
from framework.delta import literal_rows, read_table, version_rows

# Where a backfill's batches start in the lake's numbering: no landing query reaches it.
BACKFILL_BASE = 10**12


class Origin(StrEnum):
    """Where a bronze batch's files come from: the first part of its :class:`BatchKey`. The
    ledger's ``ingestion`` column names a file's when it is not landing's (null)."""

    LANDING = "landing"  # the feed's stream (a refresh reads its batches again under their keys)
    BACKFILL = "backfill"  # read in place from a historical folder (``medallion backfill``)
    UNREAD = "unread"  # settled without a read: deliveries set aside, copies of backfilled files


@dataclass(frozen=True, order=True)
class BatchKey:
    """A bronze batch's identity: its origin and the number its query gave it (none for the
    files settled without a read).

    The lake keeps it as one number, :attr:`stored` (the ledger's ``batch_id`` partition, the
    rows' ``_batch_id`` and the commits' tags; the run history keeps the query's own number
    under the query's id): landing's batches as numbered, a backfill's from
    :data:`BACKFILL_BASE` on, the unread files' -1. Tables written before the key keep their
    meaning, and a reader of the lake needs no other column to tell the batches apart."""

    origin: Origin
    number: int = 0

    @property
    def stored(self) -> int:
        """The key as the lake stores it."""
        if self.origin is Origin.UNREAD:
            return -1
        return self.number + (BACKFILL_BASE if self.origin is Origin.BACKFILL else 0)

    @classmethod
    def of(cls, stored: int) -> BatchKey:
        """The key of a number the lake stores (see :attr:`stored`)."""
        if stored < 0:
            return cls(Origin.UNREAD)
        if stored >= BACKFILL_BASE:
            return cls(Origin.BACKFILL, stored - BACKFILL_BASE)
        return cls(Origin.LANDING, stored)

    def __str__(self) -> str:
        if self.origin is Origin.UNREAD:
            return "files settled without a read"
        return f"{self.origin.value} batch {self.number}"


def stored_in(column: Column, origin: Origin) -> Column:
    """Whether the stored keys of ``column`` (a ``batch_id``) are of ``origin``."""
    if origin is Origin.UNREAD:
        return column < 0
    if origin is Origin.BACKFILL:
        return column >= BACKFILL_BASE
    return (column >= 0) & (column < BACKFILL_BASE)


# The ledger partition of files settled without a read.
UNREAD = BatchKey(Origin.UNREAD)


LEDGER_SCHEMA = StructType(
    [
        StructField("path", StringType()),
        StructField("size", LongType()),
        StructField("modification_time", TimestampType()),
        StructField("batch_id", LongType()),
        StructField("rows", LongType()),
        StructField("good_rows", LongType()),
        StructField("quarantined_rows", LongType()),
        StructField("status", StringType()),
        StructField("error", StringType()),
        StructField("location", StringType()),
        StructField("ingested_at", TimestampType()),
        StructField("updated_at", TimestampType()),
        # What the file's columns lacked or added, e.g. "missing columns (null): region"
        StructField("notes", StringType()),
        # How the file came: null for a landing delivery, "backfill" for a file read in place
        # by ``medallion backfill`` (its path under the folder it was read from: file_key)
        StructField("ingestion", StringType()),
        StructField("file_key", StringType()),
    ]
)


@dataclass
class BatchCounts:
    """What one micro-batch held."""

    batch_id: int = -1
    records: int = 0
    good: int = 0
    quarantined: int = 0
    files: int = 0
    bytes: int = 0
    failed_files: int = 0
    rescued: int = 0  # bronze rows with a value in the rescued column
    ignored: int = 0  # records holding new columns that ``schema_evolution: none`` ignores
    # Where the batch's time went: "write" (parsing and the bronze append), "quarantine",
    # "ledger" (rows per file read back from the batch's commits, the ledger append),
    # "settle" (moving its files out of landing).
    seconds: dict[str, float] = field(default_factory=dict)


def ledger_rows(batch_id: int, files: Mapping[str, tuple[int, int]],
                failed: Mapping[str, str], good: Mapping[str, int], bad: Mapping[str, int],
                parquet: bool, notes: Mapping[str, str] | None = None,
                unparsed: Mapping[str, str] | None = None
                ) -> tuple[list[dict[str, Any]], BatchCounts]:
    """The ledger rows of a batch's files (path -> size and modification time in ms), with their
    rows in bronze (``good``) and quarantine (``bad``); a file in ``failed`` was not read (its
    reason is its error); a file in ``unparsed`` had no record parsed, for that reason (what it
    holds instead: one JSON array...)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    rows = []
    for path, (size, modified_ms) in files.items():
        n_good, n_bad = good.get(path, 0), bad.get(path, 0)
        reason = failed.get(path)
        if reason is None and n_bad and not n_good:
            reason = (unparsed or {}).get(path) or \
                "no record could be parsed (wrong encoding or format?)"
        if reason is None and not n_good and not n_bad and not parquet:
            reason = "no record could be read from the file"
        status = FileStatus.FAILED if reason else FileStatus.INGESTED
        mtime = datetime.fromtimestamp(modified_ms / 1000, UTC).replace(tzinfo=None)
        rows.append(dict(zip(LEDGER_SCHEMA.names, (
            path, size, mtime, batch_id, n_good + n_bad, n_good, n_bad, status.value, reason,
            path, now, now, (notes or {}).get(path), None, None), strict=True)))
    return rows, batch_counts(batch_id, rows)


def batch_counts(batch_id: int, rows: Sequence[Mapping[str, Any]]) -> BatchCounts:
    """What a batch held, from its ledger rows."""
    return BatchCounts(
        batch_id=batch_id,
        records=sum(r["rows"] for r in rows),
        good=sum(r["good_rows"] for r in rows),
        quarantined=sum(r["quarantined_rows"] for r in rows),
        files=len(rows),
        bytes=sum(r["size"] for r in rows),
        failed_files=sum(r["error"] is not None for r in rows))


def ledger_frame(spark: SparkSession, rows: Sequence[Mapping[str, Any]]) -> DataFrame:
    """Ledger rows (dicts) as a DataFrame of :data:`LEDGER_SCHEMA`."""
    return literal_rows(spark, [tuple(r.get(f) for f in LEDGER_SCHEMA.names) for r in rows],
                        LEDGER_SCHEMA)


def read_batch(spark: SparkSession, ledger: str, batch_id: int) -> list[dict[str, Any]]:
    """The ledger rows of one batch (its partition only)."""
    rows = read_table(spark, ledger).where(F.col("batch_id") == batch_id)
    return [r.asDict() for r in rows.collect()]


def commit_rows_per_file(spark: SparkSession, location: str, version: int | None,
                         batch_id: int) -> dict[str, int]:
    """Rows of a batch of the Delta table at ``location`` per source file (by local path),
    from the rows its commit (``version``) added: its own files, through the change data feed
    (reading the table whole rebuilds its state and lists every file, a cost that grows with
    the table); without a version, from the whole table. A batch's one append holds all its
    rows, written now or before a restart."""
    rows = version_rows(spark, location, version) if version is not None else \
        read_table(spark, location)
    return rows_per_file(rows.where(F.col(BATCH_ID) == batch_id), SOURCE_FILE)
