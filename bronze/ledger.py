"""The file ledger ``<table>_files``: one row per landing file of a feed, with its batch, its
rows in bronze and in quarantine, its status and error; partitioned by batch.

Rows per file are counted from what the batch committed: a ``groupBy`` of the source file over
the rows its bronze (and quarantine) commit added, read from that commit's own files (the
tables' change data feed: :func:`framework.delta.version_rows`). An earlier version counted
them in the pass that writes the batch, with a histogram of the source files' hashes holding a
bin per file (exact, but a page of explanation). ``bench/bronze_ingest.py --plain-counts``
measured both on 1M records in 200 files, alternated in one session (medians): 12.78 s with
the histogram, 12.56 s with the plain count (5 rounds); 14.42 s and 12.86 s in a second run (3
rounds). The plain way is no slower, so it is the one kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType


class FileStatus(StrEnum):
    """Where a landing file stands."""

    INGESTED = "ingested"  # its rows are committed; the file is still in landing
    ARCHIVED = "archived"
    DELETED = "deleted"
    FAILED = "failed"  # not ingested (unreadable, or no record in it parsed): see its error
    QUARANTINED = "quarantined"  # a failed file, moved whole to the quarantine folder


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
    # Where the batch's time went: "write" (parsing and the bronze append), "quarantine",
    # "ledger" (rows per file read back from the batch's commits, the ledger append).
    seconds: dict[str, float] = field(default_factory=dict)


def ledger_rows(batch_id: int, files: Mapping[str, tuple[int, int]],
                failed: Mapping[str, str], good: Mapping[str, int], bad: Mapping[str, int],
                parquet: bool) -> tuple[list[tuple[Any, ...]], BatchCounts]:
    """The ledger rows of a batch's files (path -> size and modification time in ms), with
    their rows in bronze (``good``) and in quarantine (``bad``); a file in ``failed`` was not
    read (its reason is its error)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    counts = BatchCounts(batch_id=batch_id, files=len(files),
                         bytes=sum(size for size, _ in files.values()))
    rows = []
    for path, (size, modified_ms) in files.items():
        n_good, n_bad = good.get(path, 0), bad.get(path, 0)
        reason = failed.get(path)
        if reason is None and n_bad and not n_good:
            reason = "no record could be parsed (wrong encoding or format?)"
        if reason is None and not n_good and not n_bad and not parquet:
            reason = "no record could be read from the file"
        counts.records += n_good + n_bad
        counts.good += n_good
        counts.quarantined += n_bad
        counts.failed_files += reason is not None
        status = FileStatus.FAILED if reason else FileStatus.INGESTED
        mtime = datetime.fromtimestamp(modified_ms / 1000, UTC).replace(tzinfo=None)
        rows.append((path, size, mtime, batch_id, n_good + n_bad, n_good, n_bad, status.value,
                     reason, path, now, now))
    return rows, counts


