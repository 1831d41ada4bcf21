"""One writer of a batch of files, whichever source planned the batch.

A file feed's batch is a set of files, written whole or not at all by :class:`FileBatchWriter`
the same way for every source of batches (a :class:`FileSource`):

- the stream's micro-batch (:class:`LandingFiles`): the files Spark's file source planned, from
  the checkpoint, less those whose bytes an earlier batch ingested (:mod:`bronze.deliveries`),
  settled as the feed's ``clean_source`` says;
- a refresh's replay of a batch of the ledger (:class:`bronze.replay.ReplayedFiles`): the files
  where they are now, each row named as the first ingestion named it, the ledger's partition
  replaced;
- a backfill's batch over a historical folder (:class:`bronze.backfill.FolderFiles`): left
  where they are.

Writing a batch:

1. files of 0 bytes, or gone since they were listed, are failed before any read;
2. the good rows are appended to the bronze table in one pass that counts (``observe``) the
   records read and those to quarantine; then malformed records, if any, to
   ``<table>_quarantine``. Reads are strict (:mod:`bronze.reading`): a file that cannot be read
   to its end fails the append before it commits; :mod:`bronze.checks` finds the file, and the
   batch is written again without it;
3. the batch's files go to the file ledger (:mod:`bronze.ledger`) with their rows in bronze and
   in quarantine, counted from what the batch committed; a failed file with its error. The rows
   are committed as they will stand once the files are settled, and then the files are moved to
   the archive (or deleted), failed ones whole to the quarantine folder (:mod:`bronze.reconcile`).

Each append is one commit tagged ``<writer>:<batch id>``: a batch replayed after a crash writes
only what is missing, and one whose ledger commit is there only finishes its moves. The writer
returns what the batch did as a :class:`Landed` outcome (:mod:`framework.microbatch`), which the
job folds into its run; it is made where the batches run (in the job's process, or on a Spark
Connect server) from :class:`FileBatches`, the small picklable description of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, StructType

from bronze.batch import METADATA_FIELDS, BatchSplit, split_batch, with_file_columns
from bronze.cdc import CDC_COLUMNS
from bronze.checks import FileChecks, stat_or_none, unreadable
from bronze.conform import refuse_schema_change, schema_change_error
from bronze.debezium import ChangeEventReader
from bronze.evolution import SchemaHistory, addable
from bronze.ledger import (
    BatchCounts,
    BatchKey,
    Origin,
    batch_counts,
    commit_rows_per_file,
    ledger_frame,
    ledger_rows,
    read_batch,
)
from bronze.reading import FeedReader
from bronze.reconcile import Reconciler
from bronze.spec import BronzeTableSpec, SchemaEvolution, SourceFormat
from framework.checkpoint import batch_source_files
from framework.config.model import Table
from framework.errors import JobError, SchemaChangeError, StorageError
from framework.job import StopSignal
from framework.logging import get_logger, timed
from framework.microbatch import Outcome, batch_commits
from framework.storage import Storage, from_uri, storage_for

__all__ = [
    "FileBatchWriter",
    "FileBatches",
    "FileSource",
    "KnownFiles",
    "Landed",
    "LandingFiles",
    "internal_columns",
    "locations",
]


@dataclass(frozen=True)
class Landed(Outcome):
    """What a batch of files did: its counts, its ledger rows (as settled), the files it
    settled (archived, deleted, quarantined...), the columns it added, and the files left out
    (ingested before, or outside a backfill's slice)."""

    counts: BatchCounts = field(default_factory=BatchCounts)
    ledger_rows: tuple[dict[str, Any], ...] = ()
    settled: Mapping[str, int] = field(default_factory=dict)
    schema_change: str | None = None
    skipped: tuple[str, ...] = ()
    outside: tuple[str, ...] = ()


def locations(table: Table) -> dict[str, str]:
    """The feed's tables by name (bronze, quarantine, ledger), each at its location: appends
    and reads go by location (through the Hive metastore a small Delta append costs seconds
    more: table lookups and metadata sync; by path well under one)."""
    return {table.full_name: table.location,
            table.qualified("quarantine"): table.companion_location("quarantine"),
            table.qualified("files"): table.companion_location("files")}


def internal_columns(spec: BronzeTableSpec) -> list[str]:
    """The bronze table's columns that are not the feed's (change, rescued, ingestion)."""
    return [*(CDC_COLUMNS if spec.cdc else ()),
            *([spec.rescued_column] if spec.rescued_column else []),
            *[f.name for f in METADATA_FIELDS]]


@dataclass(frozen=True)
class KnownFiles:
    """Files whose bytes an earlier batch ingested, taken out of each batch they are listed
    in: by path, size and modification time (``by_time``; a landing file), or by path and size
    (a backfill's folder, whose copies rewrite times), each with how it was ingested (the
    event's field ``said``)."""

    known: Mapping[tuple[Any, ...], Any] = field(default_factory=dict)
    by_time: bool = True
    said: str = "ingested_in_batch"

    def unseen(self, storage: Storage, files: dict[str, str], batch_id: int,
               log: Any) -> tuple[dict[str, str], tuple[str, ...]]:
        """The batch's files (path -> Spark's URI) without the known ones, and those left
        out (each reported): a dict lookup per file, a stat of those whose path is known."""
        paths = {key[0] for key in self.known}
        skipped: dict[str, Any] = {}
        for path in [p for p in files if p in paths]:
            try:
                info = storage.stat(path)
            except StorageError:
                continue  # gone: the batch finds it so, and fails it
            key = (path, info.size, info.modified_ms) if self.by_time else (path, info.size)
            if key in self.known:
                skipped[path] = self.known[key]
        for path, earlier in skipped.items():
            log.warning("bronze.file.skipped_known", path=path, batch_id=batch_id,
                        **{self.said: earlier})
        return {p: uri for p, uri in files.items() if p not in skipped}, tuple(skipped)


class FileSource(Protocol):
    """Where a writer's batches of files come from, and how they are settled."""

    def batch_of(self, query_batch: int) -> BatchKey:
        """The key of the query's batch: its origin and number (the lake stores
        ``key.stored``: its ledger partition, rows' ``_batch_id`` and commit tags)."""

    def planned(self, writer: FileBatchWriter, key: BatchKey
                ) -> tuple[dict[str, int], tuple[str, ...]]:
        """The batch's files (URI -> modification time in ms), and those left out of it."""

    def unseen(self, writer: FileBatchWriter, files: dict[str, str], batch_id: int
               ) -> tuple[dict[str, str], tuple[str, ...]]:
        """The files to read (path -> URI), and those left out as ingested before."""

    def file_columns(self, frame: DataFrame, batch_id: int) -> DataFrame:
        """The records with their file's columns."""

    def by_location(self, rows: dict[str, int], batch_id: int) -> dict[str, int]:
        """Rows per file, by where the files are now (from rows by ``_source_file``)."""

    def settle(self, writer: FileBatchWriter, batch_id: int, rows: list[dict[str, Any]],
               counts: BatchCounts, committed: bool) -> tuple[list[dict[str, Any]],
                                                              dict[str, int]]:
        """Commit the batch's ledger rows (unless ``committed``) and settle its files; the
        rows as they stand and the files settled."""

    def reconciler(self, spark: SparkSession, storage: Storage, table: Table,
                   log: Any) -> Reconciler:
        """What settles the files of committed batches."""


@dataclass(frozen=True)
class LandingFiles:
    """The stream's micro-batches (see the module's text)."""

    known: KnownFiles = field(default_factory=KnownFiles)

    def batch_of(self, query_batch: int) -> BatchKey:
        return BatchKey(Origin.LANDING, query_batch)

    def planned(self, writer: FileBatchWriter, key: BatchKey
                ) -> tuple[dict[str, int], tuple[str, ...]]:
        """The files Spark's file source planned for the batch, from the checkpoint."""
        return batch_source_files(writer.table.checkpoint, key.number,
                                  storage=writer.storage), ()

    def unseen(self, writer: FileBatchWriter, files: dict[str, str], batch_id: int
               ) -> tuple[dict[str, str], tuple[str, ...]]:
        return self.known.unseen(writer.storage, files, batch_id, writer.log)

    def file_columns(self, frame: DataFrame, batch_id: int) -> DataFrame:
        return with_file_columns(frame)

    def by_location(self, rows: dict[str, int], batch_id: int) -> dict[str, int]:
        return rows

    def settle(self, writer: FileBatchWriter, batch_id: int, rows: list[dict[str, Any]],
               counts: BatchCounts, committed: bool) -> tuple[list[dict[str, Any]],
                                                              dict[str, int]]:
        """Append the ledger rows as they will stand once the files are settled (unless
        ``committed``: a batch replayed after its ledger commit), then settle the files."""
        reconciler = writer.reconciler()
        if not committed:
            with timed(counts.seconds, "ledger"):
                rows = [reconciler.planned(r) for r in rows]
                if rows:
                    writer.append(ledger_frame(writer.spark, rows), writer.ledger, batch_id)
        with timed(counts.seconds, "settle"):
            writer.log.debug("bronze.files.settling", batch_id=batch_id, files=len(rows))
            settled = reconciler.settle(batch_id, rows)
        return rows, settled

    def reconciler(self, spark: SparkSession, storage: Storage, table: Table,
                   log: Any) -> Reconciler:
        spec = cast(BronzeTableSpec, table.spec)
        return Reconciler(spark, storage, checkpoint=table.checkpoint,
                          ledger=table.companion_location("files"),
                          mode=spec.source.clean_source, archive_dir=spec.archive_dir(table),
                          quarantine_dir=spec.quarantine_dir(table), log=log)


@dataclass(frozen=True)
class FileBatches:
    """What a file feed's batches need, decided before they start: the writer factory of a query
    or of a replay (``writer_id`` None: the query's, from its checkpoint). ``stop`` and
    ``storage`` are the job's on a classic session; over Spark Connect the server has neither,
    and finds its own store."""

    table: Table
    source: FileSource
    schema: StructType
    spec_columns: tuple[str, ...]
    change_types: Mapping[str, DataType] | None
    change_feed: Mapping[str, bool]
    replayable: range
    writer_id: str | None
    log_context: Mapping[str, Any]
    stop: StopSignal | None = None
    storage: Storage | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "stop": None, "storage": None}

    def __call__(self, spark: SparkSession) -> FileBatchWriter:
        return FileBatchWriter(self, spark)


class FileBatchWriter:
    """Writes batches of files (see the module's text)."""

    def __init__(self, batches: FileBatches, spark: SparkSession) -> None:
        table = batches.table
        self.spark = spark
        self.table = table
        self.spec = cast(BronzeTableSpec, table.spec)
        self.source = batches.source
        self.log = get_logger(**batches.log_context)
        self.storage = batches.storage or storage_for(table.env.root, table.env, spark)
        self.stop = batches.stop
        self.schema = batches.schema
        self.spec_columns = list(batches.spec_columns)
        self.change_feed = dict(batches.change_feed)
        self.locations = locations(table)
        self.quarantine = table.qualified("quarantine")
        self.ledger = table.qualified("files")
        self.reader = FeedReader(spark, self.spec, self.storage) \
            if batches.change_types is None \
            else ChangeEventReader(spark, self.spec, self.storage, batches.change_types)
        self.history = SchemaHistory(
            spark, name=table.qualified("schemas"), location=table.companion_location("schemas"),
            bronze=table.location, internal=internal_columns(self.spec), log=self.log)
        self.commits = batch_commits(table, batches.replayable, spark, batches.writer_id)

    def reconciler(self) -> Reconciler:
        return self.source.reconciler(self.spark, self.storage, self.table, self.log)

    # ------------------------------------------------------------------ one batch
    def write(self, batch: DataFrame | None, query_batch: int) -> Landed:
        """Write one batch, every file whole or not at all."""
        key = self.source.batch_of(query_batch)
        batch_id = key.stored
        log = self.log.bind(batch_id=batch_id, origin=key.origin.value)
        if self.written(self.ledger, batch_id):
            # Replayed after its ledger commit: its rows are in, its files may still be moving.
            rows = read_batch(self.spark, self.locations[self.ledger], batch_id)
            log.info("bronze.batch.replayed", files=len(rows))
            return self._settle(batch_id, rows, batch_counts(batch_id, rows), committed=True)
        planned, outside = self.source.planned(self, key)
        files, skipped = self.source.unseen(self, {from_uri(p): p for p in planned}, batch_id)
        stats = {f: stat_or_none(self.storage, f) for f in files}
        failed = {f: why for f, info in stats.items() if (why := unreadable(info)) is not None}
        seconds: dict[str, float] = {}
        replayed = self.written(self.table.full_name, batch_id)
        log.debug("bronze.batch.started", files=len(files), unreadable_files=len(failed),
                  replayed=replayed)
        metrics, notes, failed, change = self._write_readable(batch_id, files, failed, replayed,
                                                              seconds, log)
        readable = [f for f in files if f not in failed]
        with timed(seconds, "ledger"):  # rows per file, read back from what was committed
            in_bronze = metrics["records"] - metrics["quarantined"]
            # (one file read: its bronze rows are those the write's own pass counted)
            good = {readable[0]: in_bronze} if len(readable) == 1 and in_bronze else \
                self._rows_per_file(self.table.full_name, batch_id) if in_bronze else {}
            bad = self._rows_per_file(self.quarantine, batch_id) \
                if metrics["quarantined"] else {}
            # A file none of whose records parsed: what it holds, if it is one JSON document.
            unparsed = {f: why for f in readable if bad.get(f) and not good.get(f)
                        and (why := self.reader.unparsed_file(f)) is not None}
            rows, counts = ledger_rows(
                batch_id, {f: (i.size, i.modified_ms) if i else (0, 0) for f, i in stats.items()},
                failed, good, bad, self.spec.source.format is SourceFormat.PARQUET, notes,
                unparsed)
        counts.rescued, counts.ignored = metrics.get("rescued", 0), metrics.get("ignored", 0)
        counts.seconds = seconds
        if counts.records != metrics["records"] or counts.quarantined != metrics["quarantined"]:
            raise JobError(
                self.table.full_name, f"batch {batch_id}",
                f"expected the tables to hold the {metrics['records']} records read "
                f"({metrics['quarantined']} quarantined), found {counts.good} in bronze and "
                f"{counts.quarantined} in quarantine",
            )
        landed = self._settle(batch_id, rows, counts, schema_change=change, skipped=skipped,
                              outside=outside)
        log.info("bronze.batch.committed", records=counts.records, bronze_rows=counts.good,
                 quarantined_rows=counts.quarantined, files=counts.files,
                 failed_files=counts.failed_files, rescued_rows=counts.rescued,
                 ignored_column_rows=counts.ignored, seconds=dict(counts.seconds),
                 **({"file_notes": notes} if notes else {}))
        return landed

    def _write_readable(self, batch_id: int, files: Mapping[str, str], failed: dict[str, str],
                        replayed: bool, seconds: dict[str, float], log: Any
                        ) -> tuple[dict[str, int], dict[str, str], dict[str, str], str | None]:
        """Write the batch's files that can be read whole, leaving out (``failed``, returned
        with their reasons) each file that makes the write fail; the figures written, the
        readers' notes per file, and the columns the batch added."""
        metrics = {"records": 0, "quarantined": 0}
        notes: dict[str, str] = {}
        change = None
        checks = FileChecks(self.spark, self.reader, self.schema, log)
        while readable := [f for f in files if f not in failed]:
            try:
                # (addNewColumns' pass over JSON keys reads the files: an unreadable one fails
                # it as it would fail the write)
                change = self._evolve(batch_id, readable, log) or change
                records = self.reader.read(readable, self.schema, self.spec_columns)
                if records.failed:  # files that cannot be read by name (a CSV header)
                    log.warning("bronze.files.failed", files=records.failed)
                    failed |= records.failed
                    continue
                assert records.frame is not None
                notes = records.notes
                split = split_batch(self.source.file_columns(records.frame, batch_id),
                                    self.table.name, batch_id,
                                    rescued=self.spec.rescued_column,
                                    explain=self.reader.malformed_reason())
                metrics = self._append_split(split, batch_id, readable, replayed, seconds,
                                             checks)
                break
            except SchemaChangeError:
                raise
            except Exception as exc:
                self._refuse_schema_change(exc, batch_id, log)
                if self.stop is not None and self.stop.is_set():  # (a stop may have cancelled
                    raise  # the read: the batch runs again, whole, at the next start)
                culprits = checks.failing(exc, readable, batch_id)
                if not culprits:
                    raise
                log.warning("bronze.files.failed", files=culprits)
                failed |= culprits
        return metrics, notes, failed, change

    def _append_split(self, split: BatchSplit, batch_id: int, readable: Sequence[str],
                      replayed: bool, seconds: dict[str, float], checks: FileChecks
                      ) -> dict[str, int]:
        """Append the batch's good rows, then its quarantined ones; the figures observed."""
        if self.spec.source.format is SourceFormat.PARQUET:
            checks.check_parquet(split.stamped, readable)
        with timed(seconds, "write"):
            if replayed:
                # Appended before a restart: counted in a pass of its own, not written again.
                metrics = split.count()
            else:
                self.append(split.good, self.table.full_name, batch_id)
                metrics = split.observation.get
                self.log.debug("bronze.batch.appended", batch_id=batch_id, **metrics)
        if metrics["quarantined"] and not self.written(self.quarantine, batch_id):
            with timed(seconds, "quarantine"):
                self.append(split.quarantine_rows(), self.quarantine, batch_id)
        return metrics

    def _settle(self, batch_id: int, rows: list[dict[str, Any]], counts: BatchCounts, *,
                committed: bool = False, schema_change: str | None = None,
                skipped: tuple[str, ...] = (), outside: tuple[str, ...] = ()) -> Landed:
        rows, settled = self.source.settle(self, batch_id, rows, counts, committed)
        return Landed(batch_id, counts=counts, ledger_rows=tuple(rows), settled=settled,
                      schema_change=schema_change, skipped=skipped, outside=outside)

    # ------------------------------------------------------------------ the feed's schema
    def _evolve(self, batch_id: int, files: Sequence[str], log: Any) -> str | None:
        """Before a batch is read: in ``addNewColumns``, add its new columns to the table
        (and the schema history), returning them in words; in ``failOnNewColumns``, refuse a
        CSV or Parquet file with new columns (JSON keys are refused as the batch is read)."""
        mode = self.spec.source.schema_evolution
        if not files or mode not in (SchemaEvolution.ADD_NEW_COLUMNS,
                                     SchemaEvolution.FAIL_ON_NEW_COLUMNS):
            return None
        if mode is SchemaEvolution.FAIL_ON_NEW_COLUMNS and \
                self.spec.source.format is SourceFormat.JSON:
            return None
        new = self.reader.new_columns(files, self.schema)
        if not new:
            return None
        if mode is SchemaEvolution.FAIL_ON_NEW_COLUMNS:
            path = next(iter(new.values()))[1]
            self._schema_change(batch_id, path, ", ".join(f"new column {n}" for n in new), log)
        taken = {n: t for n, (t, _) in new.items() if addable(n)}
        if len(taken) < len(new):
            log.warning("bronze.schema.not_added", columns=sorted(set(new) - set(taken)),
                        reason="a name Delta refuses (space or one of ,;{}()=): rescued")
        if not taken:
            return None
        self.schema = self.history.add_columns(taken, batch_id)
        return "added " + ", ".join(f"{n} {t.simpleString()}" for n, t in taken.items())

    def _refuse_schema_change(self, error: BaseException, batch_id: int, log: Any) -> None:
        """Raise :class:`SchemaChangeError` if ``error`` is a read refusing a new column or
        a value of another type (``failOnNewColumns``)."""
        found = schema_change_error(str(error))
        if found is not None:
            self._schema_change(batch_id, found[0], found[1], log)

    def _schema_change(self, batch_id: int, path: str, detail: str, log: Any) -> None:
        columns = ", ".join(part.removeprefix("new column ") + " STRING"
                            for part in detail.split(", ") if part.startswith("new column "))
        accept = (f"add them to source.schema in {self.table.source_file}, or run "
                  f"'medallion schema {self.table.name} --add \"{columns}\"'") if columns \
            else f"correct the file, or the column's type in {self.table.source_file}"
        refuse_schema_change(self.table.full_name, batch_id, from_uri(path), detail, accept, log)

    # ------------------------------------------------------------------ the tables
    def append(self, df: DataFrame, table: str, batch_id: int) -> None:
        """Append the batch's rows to ``table``, whose commit of this batch was looked for."""
        self.commits.append(df, self.locations[table], batch_id, checked=True)

    def written(self, table: str, batch_id: int) -> bool:
        return self.commits.written_before(self.locations[table], batch_id)

    def _rows_per_file(self, table: str, batch_id: int) -> dict[str, int]:
        """Rows of this batch of ``table`` per source file (:func:`commit_rows_per_file`), by
        where the files are now."""
        location = self.locations[table]
        version = self.commits.version(location, batch_id) if self.change_feed.get(table) \
            else None
        return self.source.by_location(
            commit_rows_per_file(self.spark, location, version, batch_id), batch_id)
