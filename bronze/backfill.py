"""``medallion backfill``: a historical folder of files ingested in place by the feed's own
bronze job, exactly once, beside the ongoing landing feed.

A backfill is the bronze job (:class:`~bronze.job.BronzeJob`) run as a query of its own over
the folder given (``--from``), read recursively with the feed's ``path_glob_filter``, and
never moving a file there (``clean_source: off`` for that query, failed files included):

- **its own checkpoint**, ``_checkpoints/bronze/<table>.backfill-<key>``, where the key is made
  of the folder and the ``--since``/``--until`` slice: run again, the same backfill reads only
  the files it has not read; a kill is resumed by running it again, as a run is;
- **its own batches**: the query's batch ``b`` has the key ``(backfill, b)``
  (:class:`~bronze.ledger.BatchKey`), stored as ``BACKFILL_BASE + b`` in the ledger, the
  bronze rows' ``_batch_id`` and the commits' tags, so it never meets a landing batch, and
  the landing reconciler (which settles batches up to the landing checkpoint's) never looks at
  its rows; its ledger rows say ``ingestion = 'backfill'`` with the file's path under the
  folder (``file_key``);
- **a file is the same file** in landing and in the folder when its path under each and its
  size are equal (not its modification time: copies and uploads rewrite it). A file of the
  folder the landing feed already ingested, or one an earlier backfill ingested from the same
  path, is left out (``bronze.file.skipped_known``); a landing file a backfill ingested is
  archived (or deleted, per ``clean_source``) at the next run's start without being read
  again (:mod:`bronze.deliveries`);
- ``--since``/``--until`` take the files modified in ``[since, until)``; the others are left
  out of this backfill's batches (and counted).

The run history records its batches under the backfill's own query, with ``operation``
``backfill-<key>``. Bronze's readers (silver) see its rows as any other commit.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bronze.deliveries import INGESTED, glob_regex, hidden
from bronze.filebatch import FileBatchWriter, FileSource, KnownFiles, LandingFiles
from bronze.job import BronzeJob
from bronze.ledger import BatchCounts, BatchKey, Origin, stored_in
from bronze.reconcile import Reconciler
from bronze.spec import BronzeTableSpec, CleanSource
from framework.checkpoint import batch_source_files, last_committed_batch, last_planned_batch
from framework.config.model import Table
from framework.delta import read_table
from framework.errors import JobError, UsageError
from framework.storage import Storage, from_uri, local_path
from framework.timeslice import TimeSlice

__all__ = ["Backfill", "BackfillJob", "BackfillTable"]


@dataclass(frozen=True)
class Backfill:
    """What to backfill: a folder, and optionally the slice of modification times
    ``[since, until)`` (aware datetimes)."""

    folder: str
    since: datetime | None = None
    until: datetime | None = None
    max_files: int = 500  # files per batch

    @property
    def key(self) -> str:
        """The backfill's name: the same folder and slice give the same key (and checkpoint)."""
        text = "|".join([local_path(self.folder).rstrip("/"),
                         self.since.isoformat() if self.since else "",
                         self.until.isoformat() if self.until else ""])
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def operation(self) -> str:
        return f"backfill-{self.key}"

    def takes(self, modified_ms: int) -> bool:
        """Whether a file modified at ``modified_ms`` is in the slice."""
        return TimeSlice(self.since, self.until).takes(modified_ms)


@dataclass(frozen=True)
class BackfillTable(Table):
    """A bronze table as its backfill's query sees it: the same table, another checkpoint."""

    key: str = ""

    @property
    def checkpoint(self) -> str:
        return self.env.path("_checkpoints", self.layer.value, f"{self.spec.name}.backfill-"
                                                                f"{self.key}")

    @property
    def landing_checkpoint(self) -> str:
        """The landing query's checkpoint."""
        return super().checkpoint


def check_folder(table: Table, folder: str) -> None:
    """Refuse a folder the feed's own folders overlap (landing, archive, quarantine): their
    files are the landing feed's."""
    spec = table.spec
    assert isinstance(spec, BronzeTableSpec)
    mine = local_path(folder).rstrip("/")
    for what, other in (("landing folder", spec.landing_folder(table)),
                        ("archive", spec.archive_dir(table)),
                        ("quarantine folder", spec.quarantine_dir(table))):
        theirs = local_path(other).rstrip("/")
        if mine == theirs or mine.startswith(theirs + "/") or theirs.startswith(mine + "/"):
            raise UsageError(f"expected a folder of historical files apart from the feed's "
                             f"own, found {folder}, which overlaps its {what} {other}")


def known_in_folder(job: BackfillJob) -> KnownFiles:
    """The folder's files already ingested, found at the start: by the landing feed (the same
    path under landing and size) or by a backfill (the same path and size), each with how it
    was ingested. Each batch leaves them out (:class:`~bronze.filebatch.KnownFiles`)."""
    folder, files = job.folder, job.files
    listed = [f for f in files.list_files(folder) if job.lists(f.path)] \
        if files.exists(folder) else []
    if not listed:
        return KnownFiles(by_time=False, said="ingested_by")
    known: dict[tuple[Any, ...], str] = {}
    landing = local_path(job.spec.landing_folder(job.table)).rstrip("/")
    own = {local_path(f.path): f.size for f in listed}
    in_landing = {f"{landing}/{job.key_of(p)}": p for p in own}
    candidates = job.spark.createDataFrame([(p,) for p in [*own, *in_landing]], "path string")
    rows = read_table(job.spark, job.table.companion_location("files")) \
        .where(F.col("status").isin(sorted(INGESTED))
               & ~stored_in(F.col("batch_id"), Origin.UNREAD)) \
        .join(F.broadcast(candidates), "path").select("path", "size", "batch_id") \
        .collect()
    for row in rows:
        path = in_landing.get(row["path"], row["path"])
        if own.get(path) == row["size"]:
            how = "a backfill" if BatchKey.of(row["batch_id"]).origin is Origin.BACKFILL \
                else "landing"
            known[(path, int(row["size"]))] = f"{how} (batch {row['batch_id']})"
    # landing's batches planned but not committed (a run stopped): theirs to read
    checkpoint = job.landing_checkpoint
    committed = last_committed_batch(checkpoint, files)
    for batch_id in range(committed + 1, last_planned_batch(checkpoint, files) + 1):
        for uri in batch_source_files(checkpoint, batch_id, storage=files):
            path = in_landing.get(from_uri(uri))
            if path is not None:
                known[(path, own[path])] = f"landing (batch {batch_id}, pending)"
    return KnownFiles(known, by_time=False, said="ingested_by")


class InPlace(Reconciler):
    """A backfill's files stay where they are: ingested or failed, none is moved."""

    def planned(self, row: dict[str, Any]) -> dict[str, Any]:
        return dict(row)

    def settle(self, batch_id: int, rows: list[dict[str, Any]]) -> dict[str, int]:
        return {}

    def reconcile(self, run_rows: dict[int, list[dict[str, Any]]], *, read_ledger: bool
                  ) -> dict[str, int]:
        return {"files_archived": 0, "files_deleted": 0, "files_quarantined": 0,
                "files_unsettled": 0}


@dataclass(frozen=True)
class FolderFiles(LandingFiles):
    """A backfill's batches (see the module's text): the folder's files in the slice, less those
    ingested before, with ledger rows naming their path under the folder; nothing moved."""

    backfill: Backfill = field(default_factory=lambda: Backfill(""))
    folder: str = ""

    def batch_of(self, query_batch: int) -> BatchKey:
        return BatchKey(Origin.BACKFILL, query_batch)

    def planned(self, writer: FileBatchWriter, key: BatchKey
                ) -> tuple[dict[str, int], tuple[str, ...]]:
        planned = batch_source_files(writer.table.checkpoint, key.number,
                                     storage=writer.storage)
        outside = tuple(p for p, modified in planned.items()
                        if not self.backfill.takes(modified))
        if outside:
            writer.log.info("bronze.backfill.outside_slice", batch_id=key.stored,
                            files=len(outside))
        return {p: m for p, m in planned.items() if p not in outside}, outside

    def settle(self, writer: FileBatchWriter, batch_id: int, rows: list[dict[str, Any]],
               counts: BatchCounts, committed: bool) -> tuple[list[dict[str, Any]],
                                                              dict[str, int]]:
        if not committed:
            rows = [r | {"ingestion": Origin.BACKFILL.value,
                         "file_key": key_under(self.folder, r["path"], writer.table)}
                    for r in rows]
        return super().settle(writer, batch_id, rows, counts, committed)

    def reconciler(self, spark: SparkSession, storage: Storage, table: Table,
                   log: Any) -> Reconciler:
        return in_place(spark, storage, table, log)


def in_place(spark: SparkSession, storage: Storage, table: Table, log: Any) -> Reconciler:
    """The reconciler of batches whose files stay where they are (a backfill's, a replay's)."""
    spec = cast(BronzeTableSpec, table.spec)
    return InPlace(spark, storage, checkpoint=table.checkpoint,
                   ledger=table.companion_location("files"), mode=CleanSource.OFF,
                   archive_dir=spec.archive_dir(table), quarantine_dir=spec.quarantine_dir(table),
                   log=log)


def key_under(folder: str, path: str, table: Table) -> str:
    """A file's path under a backfill's ``folder``."""
    path = local_path(path)
    if not path.startswith(folder + "/"):
        raise JobError(table.full_name, "backfill",
                       f"expected the files of {folder}, found {path} (give --from as the "
                       "store names it: an absolute path, or a full URI)")
    return path[len(folder) + 1:]


class BackfillJob(BronzeJob):
    """The feed's bronze job over a historical folder (see the module's text)."""

    def __init__(self, spark: Any, table: Table, ctx: Any, backfill: Backfill) -> None:
        self.backfill = backfill
        super().__init__(spark, BackfillTable(table.spec, table.layer, table.env,
                                              table.source_file, key=backfill.key), ctx)
        self.folder = local_path(backfill.folder).rstrip("/")
        name_filter = self.spec.source.path_glob_filter
        self._pattern = glob_regex(name_filter) if name_filter else None

    @property
    def landing_checkpoint(self) -> str:
        return cast(BackfillTable, self.table).landing_checkpoint

    def lists(self, path: str) -> bool:
        """Whether the backfill's query lists the file at ``path`` (recursively, no hidden
        names, the feed's ``path_glob_filter``)."""
        path = local_path(path)
        if not path.startswith(self.folder + "/"):
            return False
        parts = path[len(self.folder) + 1:].split("/")
        if any(hidden(p) for p in parts):
            return False
        return self._pattern is None or self._pattern.fullmatch(parts[-1]) is not None

    def key_of(self, path: str) -> str:
        """A file's path under the backfill's folder."""
        return key_under(self.folder, path, self.table)

    # ------------------------------------------------------------------ the query
    def file_source(self) -> FileSource:
        return FolderFiles(known_in_folder(self), backfill=self.backfill, folder=self.folder)

    def read(self) -> DataFrame:
        if not self.files.exists(self.folder):
            raise UsageError(f"expected the folder of files to backfill, found no "
                             f"{self.backfill.folder}")
        src = self.spec.source
        # (every file of the folder, however old beside the newest one listed)
        reader = self.spark.readStream.option("maxFileAge", "36500d") \
            .option("maxFilesPerTrigger", self.backfill.max_files) \
            .option("recursiveFileLookup", "true")
        if src.path_glob_filter:
            reader = reader.option("pathGlobFilter", src.path_glob_filter)
        return reader.format("text").load(self.backfill.folder)

    def finish(self) -> dict[str, int]:
        counts = super().finish()
        counts["files_outside_slice"] = sum(len(f) for f in self.feed.outside.values())
        return counts
