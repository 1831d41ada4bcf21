"""Bronze: landing files into a Delta table, exactly once, each file whole or not at all.

Spark's file stream source decides which files make a micro-batch (in the order of their
modification times); each micro-batch is written in ``foreachBatch`` by the feed's file-batch
writer (:mod:`bronze.filebatch`), which a refresh's replay and a backfill drive too. Every
driver of a feed's batches shares a :class:`Feed`: the feed's tables, made before any batch, and
the run's figures, folded from each batch's outcome. After the query,
:class:`~bronze.reconcile.Reconciler` settles what is left (moves the store refused, what an
earlier run left). File operations go through ``framework.storage`` (the session's Hadoop file
system on any store but a local disk).
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter
from pyspark.sql.types import DataType, StructType

from bronze.batch import BRONZE_PROPERTIES, QUARANTINE_SCHEMA, bronze_schema, records_schema
from bronze.cdc import row_problem, sequence_types
from bronze.deliveries import Deliveries
from bronze.evolution import SchemaHistory
from bronze.filebatch import (
    FileBatches,
    FileSource,
    KnownFiles,
    Landed,
    LandingFiles,
    internal_columns,
    locations,
)
from bronze.ledger import LEDGER_SCHEMA, BatchCounts
from bronze.reconcile import Reconciler
from bronze.spec import BronzeTableSpec
from framework.checkpoint import last_committed_batch
from framework.config.model import Layer, Table
from framework.delta import add_missing_columns, change_feed_enabled, create_table
from framework.errors import ConfigError, JobError
from framework.job import StopSignal, StreamingJob
from framework.jvm import is_connect
from framework.listener import BatchProgress
from framework.logging import timed
from framework.microbatch import Outcome
from framework.storage import Storage

__all__ = ["BronzeJob", "Feed"]

# Files older than this, relative to the newest file seen, are not taken by Spark's file source.
MAX_FILE_AGE = "3650d"


class Feed:
    """A file feed's tables and its run's figures (see the module's text)."""

    def __init__(self, spark: SparkSession, table: Table, log: Any) -> None:
        self.spark, self.table, self.log = spark, table, log
        self.spec = cast(BronzeTableSpec, table.spec)
        self.locations = locations(table)
        self.change_feed: dict[str, bool] = {}  # per table written: whether its feed is on
        self.schema = StructType()
        self.types: dict[str, DataType] | None = None
        self.batches: dict[int, BatchCounts] = {}  # this run's, by batch id
        # This run's ledger rows, by batch: what the reconciler settles without a read.
        self.ledger_rows: dict[int, list[dict[str, Any]]] = {}
        self.settled: dict[str, int] = {}  # files moved by the batches: archived, ...
        self.schema_changes: dict[int, str] = {}  # batch id -> columns it added
        self.skipped: dict[int, tuple[str, ...]] = {}  # files left out: ingested before
        self.outside: dict[int, tuple[str, ...]] = {}  # files left out: outside a slice

    # ------------------------------------------------------------------ before the batches
    def prepare(self, first_batch: int) -> None:
        """Make the feed's tables (bronze, quarantine, ledger, schema history) and bring the
        table to the spec's schema, recorded as of ``first_batch``."""
        spec_schema = records_schema(self.table)
        self.types = self._change_types(spec_schema)
        self.spec_columns = spec_schema.names
        quarantine, ledger = self.table.qualified("quarantine"), self.table.qualified("files")
        tables = {
            self.table.full_name: (bronze_schema(self.spec, spec_schema), self.spec.description),
            quarantine: (QUARANTINE_SCHEMA, f"Malformed records of {self.table.name}"),
        }
        for name, (schema, comment) in tables.items():
            location = self.locations[name]
            created = create_table(self.spark, name, schema, location, comment=comment,
                                   properties=BRONZE_PROPERTIES)
            # A table made before the feed was recorded is read back whole (filtered by batch).
            self.change_feed[name] = created or change_feed_enabled(self.spark, location)
        # Partitioned by batch: the reconciler replaces a batch's rows by dropping its files.
        if not create_table(self.spark, ledger, LEDGER_SCHEMA, self.locations[ledger],
                            partition_by=["batch_id"],
                            comment=f"One row per landing file of {self.table.name}, "
                            "with its status"):
            add_missing_columns(self.spark, self.locations[ledger], LEDGER_SCHEMA)
        # The feed's schema is the table's: the spec's columns, then those added since.
        history = SchemaHistory(
            self.spark, name=self.table.qualified("schemas"),
            location=self.table.companion_location("schemas"), bronze=self.table.location,
            internal=internal_columns(self.spec), log=self.log)
        history.ensure()
        self.schema = history.apply_spec(spec_schema, file=self.table.source_file,
                                         batch_id=first_batch)

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

    def batches_of(self, source: FileSource, *, replayable: range, writer_id: str | None,
                   log_context: dict[str, Any], stop: StopSignal, storage: Storage | None
                   ) -> FileBatches:
        """The writer factory of the feed's batches from ``source`` (:mod:`bronze.filebatch`)."""
        return FileBatches(self.table, source, self.schema, tuple(self.spec_columns),
                           self.types, dict(self.change_feed), replayable, writer_id,
                           log_context, stop=stop, storage=storage)

    # ------------------------------------------------------------------ the batches' figures
    def fold(self, outcome: Landed) -> None:
        batch_id = outcome.batch_id
        self.batches[batch_id] = outcome.counts
        self.ledger_rows[batch_id] = list(outcome.ledger_rows)
        for name, n in outcome.settled.items():
            self.settled[name] = self.settled.get(name, 0) + n
        if outcome.schema_change:
            self.schema_changes[batch_id] = outcome.schema_change
        if outcome.skipped:
            self.skipped[batch_id] = outcome.skipped
        if outcome.outside:
            self.outside[batch_id] = outcome.outside

    def figures(self, batch_id: int) -> dict[str, int | None] | None:
        """A batch's figures for the run history; None for a batch not folded."""
        b = self.batches.get(batch_id)
        if b is None:
            return None
        return {"rows_in": b.records, "rows_out": b.good, "quarantined": b.quarantined,
                "files": b.files, "bytes": b.bytes}

    def seconds(self) -> dict[str, float]:
        """Seconds per step over the run's batches (see :class:`BatchCounts`)."""
        total: dict[str, float] = {}
        for b in self.batches.values():
            for step, s in b.seconds.items():
                total[step] = round(total.get(step, 0.0) + s, 3)
        return total

    # ------------------------------------------------------------------ after the batches
    def counts(self, reconciler: Reconciler, *, read_ledger: bool,
               seconds: dict[str, float]) -> dict[str, int]:
        """Settle the landing files of the committed batches (this run's, and what an earlier
        run left: read from the ledger with ``read_ledger``), check that every record read is
        in bronze or its quarantine, and count the run."""
        with timed(seconds, "reconcile"):
            reconciled = self.reconcile(reconciler, read_ledger=read_ledger)
        batches = self.batches.values()
        records = sum(b.records for b in batches)
        good = sum(b.good for b in batches)
        quarantined = sum(b.quarantined for b in batches)
        balanced = records == good + quarantined
        self.log.info("bronze.run.reconciled", records_read=records, bronze_rows=good,
                      quarantined_rows=quarantined, balanced=balanced,
                      seconds=self.seconds() | seconds, **reconciled)
        if not balanced:
            raise JobError(self.table.full_name, "finish",
                           f"records read ({records}) != bronze ({good}) + quarantined "
                           f"({quarantined})")
        return {"rows_in": records, "rows_out": good, "records_read": records,
                "quarantined_rows": quarantined, "rescued_rows": sum(b.rescued for b in batches),
                "files": sum(b.files for b in batches),
                "failed_files": sum(b.failed_files for b in batches),
                "skipped_files": sum(len(f) for f in self.skipped.values()), **reconciled}

    def reconcile(self, reconciler: Reconciler, *, read_ledger: bool) -> dict[str, int]:
        """Settle the landing files of the committed batches (:class:`Reconciler`)."""
        counted = reconciler.reconcile(self.ledger_rows, read_ledger=read_ledger)
        return {name: n + self.settled.get(name, 0) if name != "files_unsettled" else n
                for name, n in counted.items()}


class BronzeJob(StreamingJob):
    """Ingests one feed's landing files into its bronze Delta table."""

    layer: ClassVar[Layer] = Layer.BRONZE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec = cast(BronzeTableSpec, self.table.spec)
        self.landing = self.spec.landing(self.table)
        self.feed = Feed(self.spark, self.table, self.log)
        self.source: FileSource = LandingFiles()
        self.run_seconds: dict[str, float] = {}  # steps after the query ("reconcile")
        self._prepared = False

    @property
    def change_feed(self) -> dict[str, bool]:
        """Per table written: whether it records its change data feed."""
        return self.feed.change_feed

    @property
    def batches(self) -> dict[int, BatchCounts]:
        """This run's batches' counts, by batch id."""
        return self.feed.batches

    # ------------------------------------------------------------------ steps
    def prepare(self) -> None:
        super().prepare()
        self.feed.prepare(last_committed_batch(self.table.checkpoint, self.files) + 1)
        self.source = self.file_source()
        self._prepared = True

    def file_source(self) -> FileSource:
        """The stream's batches, less files landed again with bytes already ingested, found
        before Spark lists landing (:class:`~bronze.deliveries.Deliveries`)."""
        deliveries = Deliveries.at_start(self.spark, self.files, self.table,
                                         ledger=self.table.companion_location("files"),
                                         replayable=self.replayable, log=self.log)
        return LandingFiles(KnownFiles(dict(deliveries.known)))

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
        # reads its files by column name with the feed's schema of that batch.
        return reader.format("text").load(self.landing)

    def write(self, df: DataFrame) -> DataStreamWriter:
        return self.foreach_step(df, self.file_batches())

    def file_batches(self) -> FileBatches:
        """The writer factory of the query's batches."""
        replayable = range(self._stored(self.replayable.start), self._stored(self.replayable.stop))
        return self.feed.batches_of(
            self.source, replayable=replayable, writer_id=None, log_context=self.log_context,
            stop=self.ctx.stop, storage=None if is_connect(self.spark) else self.files)

    def fold(self, outcome: Outcome) -> None:
        assert isinstance(outcome, Landed)
        self.feed.fold(outcome)

    # ------------------------------------------------------------------ figures by batch
    def _stored(self, query_batch: int) -> int:
        """The number the lake stores for the query's batch (its key's, see BatchKey)."""
        return self.source.batch_of(query_batch).stored

    def _counts(self, query_batch: int) -> BatchCounts | None:
        return self.feed.batches.get(self._stored(query_batch))

    def batch_rows(self, progress: BatchProgress) -> int:
        b = self._counts(progress.batch_id)
        return b.records if b else progress.input_rows

    def batch_figures(self, progress: BatchProgress) -> dict[str, int | None]:
        figures = self.feed.figures(self._stored(progress.batch_id))
        return super().batch_figures(progress) if figures is None else figures

    def batch_schema_change(self, batch_id: int) -> str | None:
        return self.feed.schema_changes.get(self._stored(batch_id))

    def batch_seconds(self, batch_id: int) -> dict[str, float]:
        b = self._counts(batch_id)
        return b.seconds if b else {}

    # ------------------------------------------------------------------ after the query
    def finish(self) -> dict[str, int]:
        return self.feed.counts(self.reconciler(), read_ledger=not self._prepared,
                                seconds=self.run_seconds | self.recorder.seconds)

    def reconcile(self) -> dict[str, int]:
        """Settle the landing files of the committed batches: this run's, and what an earlier
        run left (read from the ledger when there may be some)."""
        return self.feed.reconcile(self.reconciler(), read_ledger=not self._prepared)

    def reconciler(self) -> Reconciler:
        return self.source.reconciler(self.spark, self.files, self.table, self.log)
