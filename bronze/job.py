"""Bronze: landing files into a Delta table, exactly once, each file whole or not at all.

Spark's file stream source decides which files make a micro-batch (in the order of their
modification times). In ``foreachBatch``:

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

Each append is one commit tagged ``<query id>:<batch id>``: a batch replayed after a crash
writes only what is missing, and one whose ledger commit is there only finishes its moves.
After the query, :class:`Reconciler` settles what is left (moves the store refused, what an
earlier run left). File operations go through ``framework.storage`` (the session's Hadoop file
system on any store but a local disk).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, cast

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter
from pyspark.sql.types import DataType, StructType

from bronze.batch import (
    BRONZE_PROPERTIES,
    METADATA_FIELDS,
    QUARANTINE_SCHEMA,
    BatchSplit,
    bronze_schema,
    records_schema,
    split_batch,
    with_file_columns,
)
from bronze.cdc import CDC_COLUMNS, row_problem, sequence_types
from bronze.checks import FileChecks, stat_or_none, unreadable
from bronze.conform import schema_change_error
from bronze.debezium import ChangeEventReader
from bronze.deliveries import Deliveries
from bronze.evolution import SchemaHistory, addable
from bronze.ledger import (
    LEDGER_SCHEMA,
    BatchCounts,
    batch_counts,
    commit_rows_per_file,
    ledger_frame,
    ledger_rows,
    read_batch,
)
from bronze.reading import FeedReader
from bronze.reconcile import Reconciler
from bronze.spec import BronzeTableSpec, SchemaEvolution, SourceFormat
from framework.checkpoint import batch_source_files, last_committed_batch
from framework.config.model import Layer
from framework.delta import add_missing_columns, change_feed_enabled, create_table
from framework.errors import ConfigError, JobError, SchemaChangeError
from framework.job import StreamingJob
from framework.listener import BatchProgress
from framework.logging import timed
from framework.storage import from_uri

__all__ = ["BronzeJob"]

# Files older than this, relative to the newest file seen, are not taken by Spark's file source.
MAX_FILE_AGE = "3650d"


class BronzeJob(StreamingJob):
    """Ingests one feed's landing files into its bronze Delta table."""

    layer: ClassVar[Layer] = Layer.BRONZE
    outcome_fields: ClassVar[tuple[str, ...]] = (
        *StreamingJob.outcome_fields, "batches", "_ledger_rows", "settled", "schema_changes",
        "deliveries.skipped")

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
        self.batches: dict[int, BatchCounts] = {}  # this run's, by batch id
        # This run's ledger rows, by batch: what the reconciler settles without a read.
        self._ledger_rows: dict[int, list[dict[str, Any]]] = {}
        self.settled: dict[str, int] = {}  # files moved by the batches: archived, ...
        self.schema_changes: dict[int, str] = {}  # batch id -> columns it added
        self.run_seconds: dict[str, float] = {}  # steps after the query ("reconcile")
        self._prepared = False

    # ------------------------------------------------------------------ steps
    def prepare(self) -> None:
        super().prepare()
        spec_schema = records_schema(self.table)
        types = self._change_types(spec_schema)
        self.schema = spec_schema
        self.spec_columns = spec_schema.names
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
        ledger = self.locations[self.ledger_table]
        if not create_table(self.spark, self.ledger_table, LEDGER_SCHEMA, ledger,
                            partition_by=["batch_id"],
                            comment=f"One row per landing file of {self.table.name}, "
                            "with its status"):
            add_missing_columns(self.spark, ledger, LEDGER_SCHEMA)
        # The feed's schema is the table's: the spec's columns, then those added since.
        internal = [*(CDC_COLUMNS if self.spec.cdc else ()),
                    *([self.spec.rescued_column] if self.spec.rescued_column else []),
                    *[f.name for f in METADATA_FIELDS]]
        self.history = SchemaHistory(
            self.spark, name=self.table.qualified("schemas"),
            location=self.table.companion_location("schemas"),
            bronze=self.table.location, internal=internal, log=self.log)
        self.history.ensure()
        self.schema = self.history.apply_spec(
            spec_schema, file=self.table.source_file,
            batch_id=last_committed_batch(self.table.checkpoint, self.files) + 1)
        self.reader = FeedReader(self.spark, self.spec, self.files) if types is None else \
            ChangeEventReader(self.spark, self.spec, self.files, types)
        self.deliveries = self._deliveries()
        self._prepared = True

    def _deliveries(self) -> Deliveries:
        """Files landed again under a name already read, settled before Spark lists landing;
        those each batch leaves out (:class:`Deliveries`)."""
        return Deliveries.at_start(self.spark, self.files, self.table,
                                   ledger=self.locations[self.ledger_table],
                                   replayable=self.commits.replayable, log=self.log)

    def _change_types(self, row: StructType) -> dict[str, DataType] | None:
        """For a feed of change events (``cdc``): the types of its sequence fields, once the
        row's columns are known not to take the change columns' names; None for another."""
        if self.spec.cdc is None:
            return None
        problem = row_problem(row)
        if problem:
            raise ConfigError(problem, file=self.table.source_file, key="source.schema")
        try:
            return sequence_types(self.spec.cdc)
        except ConfigError as exc:
            exc.file = self.table.source_file
            raise

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
        if src.path_glob_filter:
            reader = reader.option("pathGlobFilter", src.path_glob_filter)
        reader = reader.option("recursiveFileLookup", src.recursive_file_lookup)
        # The stream plans which files make each batch; its rows are never read: a batch
        # reads its files by column name with the feed's schema of that batch (FeedReader).
        return reader.format("text").load(self.landing)

    def write(self, df: DataFrame) -> DataStreamWriter:
        return self.foreach_batch(df, self._process_batch)

    # ------------------------------------------------------------------ one micro-batch
    def _process_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Write one micro-batch, every file whole or not at all."""
        log = self.log.bind(batch_id=batch_id)
        if self._written(self.ledger_table, batch_id):
            # Replayed after its ledger commit: its rows are in, its files may still be moving.
            rows = read_batch(self.spark, self.locations[self.ledger_table], batch_id)
            log.info("bronze.batch.replayed", files=len(rows))
            self._settle(batch_id, rows, batch_counts(batch_id, rows), committed=True)
            return
        files = {from_uri(p): p for p in self._source_files(batch_id)}
        files = self.deliveries.unseen(files, batch_id)  # not those an earlier batch ingested
        stats = {f: stat_or_none(self.files, f) for f in files}
        failed = {f: why for f, info in stats.items() if (why := unreadable(info)) is not None}
        seconds: dict[str, float] = {}
        checks = FileChecks(self.spark, self.reader, self.schema, log)
        replayed = self._written(self.table.full_name, batch_id)
        log.debug("bronze.batch.started", files=len(files), unreadable_files=len(failed),
                  replayed=replayed)
        metrics = {"records": 0, "quarantined": 0}
        notes: dict[str, str] = {}
        while readable := [f for f in files if f not in failed]:
            try:
                # (a pass over JSON keys for addNewColumns reads the files: one that cannot
                # be read fails it as it would fail the write)
                self._evolve(batch_id, readable, log)
                records = self.reader.read(readable, self.schema, self.spec_columns)
                if records.failed:  # files that cannot be read by name (a CSV header)
                    log.warning("bronze.files.failed", files=records.failed)
                    failed |= records.failed
                    continue
                assert records.frame is not None
                notes = records.notes
                split = split_batch(self._file_columns(records.frame), self.table.name,
                                    batch_id, rescued=self.spec.rescued_column)
                metrics = self._write_batch(split, batch_id, readable, replayed, seconds, checks)
                break
            except SchemaChangeError:
                raise
            except Exception as exc:
                self._refuse_schema_change(exc, batch_id)
                if self.ctx.stop.is_set():  # (a stop may have cancelled the read: the batch
                    raise                   # runs again, whole, at the next start)
                culprits = checks.failing(exc, readable, batch_id)
                if not culprits:
                    raise
                log.warning("bronze.files.failed", files=culprits)
                failed |= culprits
        with timed(seconds, "ledger"):  # rows per file, read back from what was committed
            in_bronze = metrics["records"] - metrics["quarantined"]
            # (one file read: its bronze rows are those the write's own pass counted)
            good = {readable[0]: in_bronze} if len(readable) == 1 and in_bronze else \
                self._rows_per_file(self.table.full_name, batch_id) if in_bronze else {}
            bad = self._rows_per_file(self.quarantine_table, batch_id) \
                if metrics["quarantined"] else {}
            rows, counts = ledger_rows(
                batch_id, {f: (i.size, i.modified_ms) if i else (0, 0) for f, i in stats.items()},
                failed, good, bad, self.spec.source.format is SourceFormat.PARQUET, notes)
        counts.rescued, counts.ignored = metrics.get("rescued", 0), metrics.get("ignored", 0)
        counts.seconds = seconds
        if counts.records != metrics["records"] or counts.quarantined != metrics["quarantined"]:
            raise JobError(
                self.table.full_name, f"batch {batch_id}",
                f"expected the tables to hold the {metrics['records']} records read "
                f"({metrics['quarantined']} quarantined), found {counts.good} in bronze and "
                f"{counts.quarantined} in quarantine",
            )
        self._settle(batch_id, rows, counts)
        log.info("bronze.batch.committed", records=counts.records, bronze_rows=counts.good,
                 quarantined_rows=counts.quarantined, files=counts.files,
                 failed_files=counts.failed_files, rescued_rows=counts.rescued,
                 ignored_column_rows=counts.ignored, seconds=dict(counts.seconds),
                 **({"file_notes": notes} if notes else {}))

    def _file_columns(self, frame: DataFrame) -> DataFrame:
        """The records with their file's columns (:func:`with_file_columns`)."""
        return with_file_columns(frame)

    def _source_files(self, batch_id: int) -> dict[str, int]:
        """The files Spark's file source planned for the batch (URI -> modification time in
        ms), from the checkpoint."""
        return batch_source_files(self.table.checkpoint, batch_id, storage=self.files)

    def _evolve(self, batch_id: int, files: Sequence[str], log: Any) -> None:
        """Before a batch is read: in ``addNewColumns``, add its new columns to the table
        (and the schema history); in ``failOnNewColumns``, refuse a CSV or Parquet file with
        new columns (JSON keys are refused as the batch is read)."""
        mode = self.spec.source.schema_evolution
        if not files or mode not in (SchemaEvolution.ADD_NEW_COLUMNS,
                                     SchemaEvolution.FAIL_ON_NEW_COLUMNS):
            return
        if mode is SchemaEvolution.FAIL_ON_NEW_COLUMNS and \
                self.spec.source.format is SourceFormat.JSON:
            return
        new = self.reader.new_columns(files, self.schema)
        if not new:
            return
        if mode is SchemaEvolution.FAIL_ON_NEW_COLUMNS:
            path = next(iter(new.values()))[1]
            self._schema_change(batch_id, path, ", ".join(f"new column {n}" for n in new))
        taken = {n: t for n, (t, _) in new.items() if addable(n)}
        if len(taken) < len(new):
            log.warning("bronze.schema.not_added", batch_id=batch_id,
                        columns=sorted(set(new) - set(taken)),
                        reason="a name Delta refuses (space or one of ,;{}()=): rescued")
        if taken:
            self.schema = self.history.add_columns(taken, batch_id)
            self.schema_changes[batch_id] = "added " + ", ".join(
                f"{n} {t.simpleString()}" for n, t in taken.items())

    def _refuse_schema_change(self, error: BaseException, batch_id: int) -> None:
        """Raise :class:`SchemaChangeError` if ``error`` is a read refusing a new column or
        a value of another type (``failOnNewColumns``)."""
        found = schema_change_error(str(error))
        if found is not None:
            self._schema_change(batch_id, found[0], found[1])

    def _schema_change(self, batch_id: int, path: str, detail: str) -> None:
        columns = ", ".join(part.removeprefix("new column ") + " STRING"
                            for part in detail.split(", ") if part.startswith("new column "))
        accept = (f"add them to source.schema in {self.table.source_file}, or run "
                  f"'medallion schema {self.table.name} --add \"{columns}\"'") if columns \
            else f"correct the file, or the column's type in {self.table.source_file}"
        self.batch_error = (f"expected the columns and types of the schema in "
                            f"{from_uri(path)}, found {detail} (schema_evolution: "
                            f"failOnNewColumns): {accept}; batch {batch_id} was not written and "
                            "is read again by the next run")
        self.log.error("bronze.schema.refused", batch_id=batch_id, file=from_uri(path),
                       change=detail)
        raise SchemaChangeError(self.table.full_name, f"batch {batch_id}", self.batch_error)

    def _settle(self, batch_id: int, rows: list[dict[str, Any]], counts: BatchCounts, *,
                committed: bool = False) -> None:
        """Append the batch's ledger rows as they will stand once its files are settled
        (unless they are ``committed``: a batch replayed after its ledger commit), then settle
        the files (:class:`Reconciler`)."""
        reconciler = self.reconciler()
        if not committed:
            with timed(counts.seconds, "ledger"):
                rows = [reconciler.planned(r) for r in rows]
                if rows:
                    self._append(ledger_frame(self.spark, rows), self.ledger_table, batch_id)
        with timed(counts.seconds, "settle"):
            self.log.debug("bronze.files.settling", batch_id=batch_id, files=len(rows))
            for name, n in reconciler.settle(batch_id, rows).items():
                self.settled[name] = self.settled.get(name, 0) + n
        self._ledger_rows[batch_id] = rows
        self.batches[batch_id] = counts

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
        for b in self.batches.values():
            for step, s in b.seconds.items():
                total[step] = round(total.get(step, 0.0) + s, 3)
        return total | self.run_seconds | self.recorder.seconds

    def batch_rows(self, progress: BatchProgress) -> int:
        b = self.batches.get(progress.batch_id)
        return b.records if b else progress.input_rows

    def batch_figures(self, progress: BatchProgress) -> dict[str, int | None]:
        b = self.batches.get(progress.batch_id)
        if b is None:
            return super().batch_figures(progress)
        return {"rows_in": b.records, "rows_out": b.good, "quarantined": b.quarantined,
                "files": b.files, "bytes": b.bytes}

    def batch_schema_change(self, batch_id: int) -> str | None:
        return self.schema_changes.get(batch_id)

    def batch_seconds(self, batch_id: int) -> dict[str, float]:
        b = self.batches.get(batch_id)
        return b.seconds if b else {}

    def _append(self, df: DataFrame, table: str, batch_id: int) -> None:
        """Append the batch's rows to ``table``, whose commit of this batch was looked for."""
        self.commits.append(df, self.locations[table], batch_id, checked=True)

    def _written(self, table: str, batch_id: int) -> bool:
        return self.commits.written_before(self.locations[table], batch_id)

    def _rows_per_file(self, table: str, batch_id: int) -> dict[str, int]:
        """Rows of this batch of ``table`` per source file (:func:`commit_rows_per_file`)."""
        location = self.locations[table]
        version = self.commits.version(location, batch_id) if self.change_feed.get(table) \
            else None
        return commit_rows_per_file(self.spark, location, version, batch_id)

    # ------------------------------------------------------------------ after the query
    def finish(self) -> dict[str, int]:
        with timed(self.run_seconds, "reconcile"):
            reconciled = self.reconcile()
        records = sum(b.records for b in self.batches.values())
        good = sum(b.good for b in self.batches.values())
        quarantined = sum(b.quarantined for b in self.batches.values())
        balanced = records == good + quarantined
        self.log.info("bronze.run.reconciled", records_read=records, bronze_rows=good,
                      quarantined_rows=quarantined, balanced=balanced, seconds=self.seconds(),
                      **reconciled)
        if not balanced:
            raise JobError(self.table.full_name, "finish",
                           f"records read ({records}) != bronze ({good}) + quarantined "
                           f"({quarantined})")
        return {"rows_in": records, "rows_out": good, "records_read": records,
                "quarantined_rows": quarantined,
                "rescued_rows": sum(b.rescued for b in self.batches.values()),
                "files": sum(b.files for b in self.batches.values()),
                "failed_files": sum(b.failed_files for b in self.batches.values()),
                "skipped_files": self.deliveries.skipped_files, **reconciled}

    def reconcile(self) -> dict[str, int]:
        """Settle the landing files of the committed batches (:class:`Reconciler`): this
        run's, and what an earlier run left (read from the ledger when there may be some)."""
        counted = self.reconciler().reconcile(self._ledger_rows, read_ledger=not self._prepared)
        return {name: n + self.settled.get(name, 0) if name != "files_unsettled" else n
                for name, n in counted.items()}

    def reconciler(self) -> Reconciler:
        return Reconciler(self.spark, self.files, checkpoint=self.table.checkpoint,
                          ledger=self.locations[self.ledger_table],
                          mode=self.spec.source.clean_source,
                          archive_dir=self.spec.archive_dir(self.table),
                          quarantine_dir=self.spec.quarantine_dir(self.table), log=self.log)
