"""Bronze: landing files into a Delta table, exactly once, each file whole or not at all.

Spark's file stream source decides which files make a micro-batch (in the order of their
modification times) and archives them one batch late (``cleanSource``). In ``foreachBatch``:

1. files of 0 bytes, or gone since they were listed, are failed before any read;
2. the good rows are appended to the bronze table in one pass that counts (``observe``) the
   records read and those to quarantine; then malformed records, if any, to
   ``<table>_quarantine``. Reads are strict (:mod:`bronze.reading`): a file that cannot be read
   to its end fails the append before it commits; :mod:`bronze.checks` finds the file, and the
   batch is written again without it;
3. the batch's files go to the file ledger (:mod:`bronze.ledger`) with their rows in bronze and
   in quarantine, counted from what the batch committed; a failed file with its error.

Each append is one commit tagged ``<query id>:<batch id>``: a batch replayed after a crash
writes only what is missing. After the query, :class:`Reconciler` archives the committed
batches' files and moves failed ones whole to the quarantine folder. File operations go
through ``framework.storage`` (the session's Hadoop file system on any store but a local disk).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter
from pyspark.sql.types import StructType

from bronze.batch import (
    BATCH_ID,
    BRONZE_PROPERTIES,
    QUARANTINE_SCHEMA,
    SOURCE_FILE,
    BatchSplit,
    bronze_schema,
    planned_schema,
    split_batch,
    with_file_columns,
)
from bronze.checks import FileChecks, rows_per_file, stat_or_none, unreadable
from bronze.ledger import (
    LEDGER_SCHEMA,
    BatchCounts,
    FileStatus,
    ledger_rows,
)
from bronze.reading import read_records
from bronze.reconcile import Reconciler, settle_file
from bronze.spec import BronzeTableSpec, CleanSource, SourceFormat
from framework.checkpoint import batch_source_files
from framework.config.model import Layer, SqlKind
from framework.delta import change_feed_enabled, create_table, literal_rows, version_rows
from framework.errors import ConfigError, JobError
from framework.job import StreamingJob
from framework.listener import BatchProgress
from framework.logging import timed
from framework.sqlcheck import EXAMPLES, parse_schema
from framework.storage import FileInfo, from_uri

__all__ = ["BronzeJob", "FileStatus", "planned_schema", "settle_file"]

# Files older than this, relative to the newest file seen, are not taken by Spark's file source.
MAX_FILE_AGE = "3650d"


class BronzeJob(StreamingJob):
    """Ingests one feed's landing files into its bronze Delta table."""

    layer: ClassVar[Layer] = Layer.BRONZE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec = cast(BronzeTableSpec, self.table.spec)
        self.landing = self.spec.landing(self.table)
        self.quarantine_table = self.table.qualified("quarantine")
        self.ledger_table = self.table.qualified("files")
        # Appends and reads go by location: through the Hive metastore a small Delta append
        # costs seconds more (table lookups and metadata sync), by path well under one.
        self.locations = {
            self.table.full_name: self.table.location,
            self.quarantine_table: self.table.companion_location("quarantine"),
            self.ledger_table: self.table.companion_location("files"),
        }
        self.change_feed: dict[str, bool] = {}  # per table written: whether its feed is on
        self.batches: list[BatchCounts] = []
        # The ledger rows this run appended, per batch, and whether a replayed batch found its
        # rows appended before a restart: what the reconciler settles without reading the
        # ledger.
        self._ledger_rows: dict[int, list[dict[str, Any]]] = {}
        self._ledger_from_before = False
        self.run_seconds: dict[str, float] = {}  # steps after the query ("reconcile")
        self._prepared = False

    # ------------------------------------------------------------------ steps
    def prepare(self) -> None:
        super().prepare()
        if not self.spec.source.schema_:
            raise ConfigError(
                "expected a schema (DDL) for the feed, found none; write one with "
                f"'medallion infer-schema {self.table.name}'",
                file=self.table.source_file,
                key="source.schema",
            )
        self.schema = self._parse_schema(self.spec.source.schema_)
        tables = {
            self.table.full_name: (bronze_schema(self.spec, self.schema), self.spec.description),
            self.quarantine_table: (QUARANTINE_SCHEMA,
                                    f"Malformed records of {self.table.name}"),
        }
        for name, (schema, comment) in tables.items():
            location = self.locations[name]
            created = create_table(self.spark, name, schema, location, comment=comment,
                                   properties=BRONZE_PROPERTIES)
            # A table made before the feed was recorded is read back whole (filtered by batch).
            self.change_feed[name] = created or change_feed_enabled(self.spark, location)
        # Partitioned by batch: the reconciler replaces a batch's rows by dropping its files.
        create_table(self.spark, self.ledger_table, LEDGER_SCHEMA,
                     self.locations[self.ledger_table], partition_by=["batch_id"],
                     comment=f"One row per landing file of {self.table.name}, with its status")
        self._prepared = True

    def read(self) -> DataFrame:
        src = self.spec.source
        folder = self.spec.landing_folder(self.table)
        if not self.files.exists(folder):
            # Spark would watch a missing folder forever and ingest nothing: a typo in the
            # path must not look like a quiet feed.
            raise JobError(self.table.full_name, "read",
                           f"expected the landing folder {folder}, found none; create it with "
                           f"'medallion init' or correct source.path in {self.table.source_file}")
        # Spark ignores a new file whose modification time is more than maxFileAge (7 days by
        # default) older than the newest file it has seen: a late delivery that keeps its
        # original time (cp -p, land --keep-times) would be skipped without a word.
        reader = self.spark.readStream.option("maxFileAge", MAX_FILE_AGE)
        if src.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", src.max_files_per_trigger)
        if src.max_bytes_per_trigger:
            reader = reader.option("maxBytesPerTrigger", src.max_bytes_per_trigger)
        if src.clean_source is CleanSource.ARCHIVE:
            reader = reader.option("cleanSource", "archive").option(
                "sourceArchiveDir", self.spec.archive_dir(self.table)
            )
        elif src.clean_source is CleanSource.DELETE:
            reader = reader.option("cleanSource", "delete")
        return read_records(self.spec, reader, self.landing, self.schema)

    def transform(self, df: DataFrame) -> DataFrame:
        return with_file_columns(df)

    def write(self, df: DataFrame) -> DataStreamWriter:
        return self.foreach_batch(df, self._process_batch)

    # ------------------------------------------------------------------ one micro-batch
    def _process_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Write one micro-batch, every file whole or not at all."""
        log = self.log.bind(batch_id=batch_id)
        files = {from_uri(p): p for p in batch_source_files(self.table.checkpoint, batch_id,
                                                              storage=self.files)}
        stats = {f: stat_or_none(self.files, f) for f in files}
        failed = {f: why for f, info in stats.items() if (why := unreadable(info)) is not None}
        checks = FileChecks(self.spark, self.spec, self.schema, log)
        seconds: dict[str, float] = {}
        replayed = self._written(self.table.full_name, batch_id)
        log.debug("bronze.batch.started", files=len(files), unreadable_files=len(failed),
                  replayed=replayed)
        metrics = {"records": 0, "quarantined": 0}
        while readable := [f for f in files if f not in failed]:
            source = batch if not failed else checks.read(readable)
            split = split_batch(source, self.table.name, batch_id)
            try:
                metrics = self._write_batch(split, batch_id, readable, replayed, seconds, checks)
                break
            except Exception as exc:
                culprits = checks.failing(exc, readable, batch_id)
                if not culprits:
                    raise
                log.warning("bronze.files.failed", files=culprits)
                failed |= culprits
        with timed(seconds, "ledger"):  # rows per file, read back from what was committed
            good = self._rows_per_file(self.table.full_name, batch_id) \
                if metrics["records"] > metrics["quarantined"] else {}
            bad = self._rows_per_file(self.quarantine_table, batch_id) \
                if metrics["quarantined"] else {}
            counts = self._record_files(batch_id, stats, failed, good, bad)
        counts.seconds = seconds
        if counts.records != metrics["records"] or counts.quarantined != metrics["quarantined"]:
            raise JobError(
                self.table.full_name, f"batch {batch_id}",
                f"expected the tables to hold the {metrics['records']} records read "
                f"({metrics['quarantined']} quarantined), found {counts.good} in bronze and "
                f"{counts.quarantined} in quarantine",
            )
        self.batches.append(counts)
        log.info("bronze.batch.committed", records=counts.records, bronze_rows=counts.good,
                 quarantined_rows=counts.quarantined, files=counts.files,
                 failed_files=counts.failed_files, seconds=seconds)

    def _write_batch(self, split: BatchSplit, batch_id: int, readable: Sequence[str],
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
                self._append(split.good, self.table.full_name, batch_id)
                metrics = split.observation.get
                self.log.debug("bronze.batch.appended", batch_id=batch_id, **metrics)
        if metrics["quarantined"] and not self._written(self.quarantine_table, batch_id):
            with timed(seconds, "quarantine"):
                self._append(split.quarantine_rows(), self.quarantine_table, batch_id)
        return metrics

    def seconds(self) -> dict[str, float]:
        """Seconds per step over this run: its batches' steps summed (see
        :class:`BatchCounts`), then the steps after the query, and the run history's
        reads and appends."""
        total: dict[str, float] = {}
        for b in self.batches:
            for step, s in b.seconds.items():
                total[step] = round(total.get(step, 0.0) + s, 3)
        return total | self.run_seconds | self.recorder.seconds

    def batch_rows(self, progress: BatchProgress) -> int:
        done = [b.records for b in self.batches if b.batch_id == progress.batch_id]
        return done[-1] if done else progress.input_rows

    def batch_figures(self, progress: BatchProgress) -> dict[str, int | None]:
        done = [b for b in self.batches if b.batch_id == progress.batch_id]
        if not done:
            return super().batch_figures(progress)
        b = done[-1]
        return {"rows_in": b.records, "rows_out": b.good, "quarantined": b.quarantined,
                "files": b.files, "bytes": b.bytes}

    def batch_seconds(self, batch_id: int) -> dict[str, float]:
        done = [b.seconds for b in self.batches if b.batch_id == batch_id]
        return done[-1] if done else {}

    def _append(self, df: DataFrame, table: str, batch_id: int) -> None:
        """Append the batch's rows to ``table``, whose commit of this batch was looked for."""
        self.commits.append(df, self.locations[table], batch_id, checked=True)

    def _written(self, table: str, batch_id: int) -> bool:
        return self.commits.written_before(self.locations[table], batch_id)

    def _record_files(self, batch_id: int, stats: Mapping[str, FileInfo | None],
                      failed: Mapping[str, str], good: Mapping[str, int], bad: Mapping[str, int]
                      ) -> BatchCounts:
        """The ledger rows of the batch's files, appended unless a run before a restart did."""
        rows, counts = ledger_rows(
            batch_id, {f: (i.size, i.modified_ms) if i else (0, 0) for f, i in stats.items()},
            failed, good, bad, self.spec.source.format is SourceFormat.PARQUET)
        if rows and self._written(self.ledger_table, batch_id):
            self._ledger_from_before = True  # the reconciler reads the ledger for its rows
        elif rows:
            self._append(literal_rows(self.spark, rows, LEDGER_SCHEMA), self.ledger_table,
                         batch_id)
            self._ledger_rows[batch_id] = [dict(zip(LEDGER_SCHEMA.names, r, strict=True))
                                           for r in rows]
        return counts

    def _rows_per_file(self, table: str, batch_id: int) -> dict[str, int]:
        """Rows of this batch of ``table`` per source file (by local path), from the rows its
        commit added (its own files, through the change data feed: reading the table whole
        rebuilds its state and lists every file, a cost that grows with the table), or else
        from the whole table. The batch's one append holds all its rows, written now or
        before a restart."""
        location = self.locations[table]
        version = self.commits.version(location, batch_id) if self.change_feed.get(table) \
            else None
        rows = version_rows(self.spark, location, version) if version is not None else \
            self.spark.read.format("delta").load(location)
        return rows_per_file(rows.where(F.col(BATCH_ID) == batch_id), SOURCE_FILE)

    # ------------------------------------------------------------------ after the query
    def finish(self) -> dict[str, int]:
        with timed(self.run_seconds, "reconcile"):
            reconciled = self.reconcile()
        records = sum(b.records for b in self.batches)
        good = sum(b.good for b in self.batches)
        quarantined = sum(b.quarantined for b in self.batches)
        balanced = records == good + quarantined
        self.log.info("bronze.run.reconciled", records_read=records, bronze_rows=good,
                      quarantined_rows=quarantined, balanced=balanced, seconds=self.seconds(),
                      **reconciled)
        if not balanced:
            raise JobError(self.table.full_name, "finish",
                           f"records read ({records}) != bronze ({good}) + quarantined "
                           f"({quarantined})")
        return {
            "rows_in": records,
            "rows_out": good,
            "records_read": records,
            "quarantined_rows": quarantined,
            "files": sum(b.files for b in self.batches),
            "failed_files": sum(b.failed_files for b in self.batches),
            **reconciled,
        }

    def reconcile(self) -> dict[str, int]:
        """Settle the landing files of the committed batches (:class:`Reconciler`): this
        run's, and what an earlier run left (read from the ledger when there may be some)."""
        return self.reconciler().reconcile(
            self._ledger_rows, read_ledger=self._ledger_from_before or not self._prepared)

    def reconciler(self) -> Reconciler:
        return Reconciler(self.spark, self.files, checkpoint=self.table.checkpoint,
                          ledger=self.locations[self.ledger_table],
                          mode=self.spec.source.clean_source,
                          archive_dir=self.spec.archive_dir(self.table),
                          quarantine_dir=self.spec.quarantine_dir(self.table), log=self.log)

    # ------------------------------------------------------------------ helpers
    def _parse_schema(self, ddl: str) -> StructType:
        try:
            return parse_schema(ddl)
        except ValueError as exc:
            raise ConfigError(
                f"expected {EXAMPLES[SqlKind.SCHEMA]}, found {ddl!r}: {exc}",
                file=self.table.source_file,
                key="source.schema",
            ) from exc

