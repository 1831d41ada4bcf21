"""Bronze: landing files into a Delta table, exactly once, with nothing lost.

Each micro-batch of Spark's file stream source is handled in ``foreachBatch``:

1. files that cannot be read whole (empty, broken compression, a bad parquet footer) are found
   from the files themselves;
2. good rows are appended to the bronze table in one pass that also counts (``observe``) the
   records read and those to quarantine, in all and per source file; only if there are any,
   malformed rows and rows of unreadable files are appended to ``<table>_quarantine`` (raw
   text, reason, source file, batch id). Each commit is tagged ``<query id>:<batch id>``; a
   batch replayed after a crash looks for its tagged commits and writes only what is missing,
   so it is written once;
3. the batch's files are appended to the file ledger ``<table>_files`` (partitioned by batch),
   with their rows in bronze and in quarantine; a file none of whose records parse is marked
   failed. A replayed batch reads its rows per file back from its own commits (the tables'
   change data feed), as does a batch whose files' counts cannot be told apart.

After the query stops, :meth:`BronzeJob.finish` reconciles the landing zone: files whose batch
is committed in the checkpoint are archived (or deleted) and unreadable files moved to the
quarantine folder, and their batches' ledger rows replaced with the new statuses. Spark's own
``cleanSource`` archives a batch's files only when the next batch starts, so without this step
the last batch's files would never leave landing. The checkpoint records the last batch whose
files are all settled, so a run reads the ledger only when an earlier one left files behind.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any, ClassVar, cast
from urllib.parse import urlparse

import xxhash
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamReader, DataStreamWriter, StreamingQuery
from pyspark.sql.types import (
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from bronze.spec import BronzeTableSpec, CleanSource, SourceFormat
from framework.checkpoint import (
    batch_source_files,
    last_committed_batch,
    last_reconciled_batch,
    mark_reconciled,
)
from framework.config.model import Layer, SqlKind, Table
from framework.delta import (
    CHANGE_FEED,
    change_feed_enabled,
    create_table,
    literal_rows,
    replace_rows,
    version_rows,
)
from framework.errors import ConfigError, JobError
from framework.job import StreamingJob, timed
from framework.listener import BatchProgress
from framework.sqlcheck import EXAMPLES, parse_schema
from framework.storage import archive_target, local_path, storage_for

CORRUPT = "_corrupt_record"
SOURCE_FILE = "_source_file"
FILE_MTIME = "_file_modification_time"
FILE_SIZE = "_file_size"
INGESTED_AT = "_ingested_at"
BATCH_ID = "_batch_id"
RAW = "_raw"
REASON = "_reason"

METADATA_FIELDS = [
    StructField(SOURCE_FILE, StringType()),
    StructField(FILE_MTIME, TimestampType()),
    StructField(FILE_SIZE, LongType()),
    StructField(INGESTED_AT, TimestampType()),
    StructField(BATCH_ID, LongType()),
]
QUARANTINE_SCHEMA = StructType(
    [StructField(RAW, StringType()), StructField(REASON, StringType()), *METADATA_FIELDS]
)
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


# Files older than this, relative to the newest file seen, are not taken by Spark's file source.
MAX_FILE_AGE = "3650d"

# Statistics only on the ingestion columns: bronze is read by streams and by batch id, and
# collecting min/max of every data column costs a share of the write. The change data feed lets
# each batch's rows be read back from its own commit (see BronzeJob._batch_rows).
BRONZE_PROPERTIES = {"delta.dataSkippingStatsColumns": f"{BATCH_ID},{INGESTED_AT},{FILE_MTIME}",
                     CHANGE_FEED: "true"}


class FileStatus:
    """Ledger statuses of a landing file."""

    INGESTED = "ingested"  # its rows are committed; the file is still in landing
    ARCHIVED = "archived"
    DELETED = "deleted"
    FAILED = "failed"  # unreadable; its rows (if any) are in the quarantine table
    QUARANTINED = "quarantined"  # an unreadable file moved to the quarantine folder


@dataclass
class BatchCounts:
    """What one micro-batch held."""

    batch_id: int = -1
    records: int = 0
    good: int = 0
    quarantined: int = 0
    files: int = 0
    failed_files: int = 0
    # Where the rows per file were counted: "observed" as they were written, or read back
    # from the batch's "commits" (a replayed batch, or files whose counts could not be told
    # apart).
    counted_from: str = "observed"
    # Where the batch's time went: "write" (parsing and the bronze append), "quarantine",
    # "ledger" (the ledger append, and rows per file read back for a replayed batch).
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchSplit:
    """One micro-batch, ready to write (see :meth:`BronzeJob.split_batch`)."""

    stamped: DataFrame  # every record, with its ingestion time and batch id
    to_quarantine: Column  # true for a malformed record or a row of an unreadable file
    good: DataFrame  # the bronze rows; writing them fills ``observation``
    # Records read and records to quarantine, in all and per source file (see _per_file)
    observation: Observation

    def count(self) -> dict[str, int]:
        """The observation's figures, counted without writing (for a replayed batch whose
        append committed before the restart: it is not written again, so nothing fills the
        observation)."""
        row = self.stamped.agg(*_counts(self.to_quarantine)).first()
        assert row is not None  # an aggregate without grouping returns one row
        return row.asDict()


def _counts(to_quarantine: Column) -> list[Column]:
    return [F.count(F.lit(1)).alias("records"),
            F.count_if(to_quarantine).alias("quarantined")]


# ---------------------------------------------------------------------- readers, by format
def _text_json(job: BronzeJob, reader: DataStreamReader, schema: StructType) -> DataFrame:
    """JSON Lines read as text and parsed with from_json, so the raw line is kept for the
    quarantine and keys outside the schema can be rescued (Spark's reader drops them)."""
    spec = job.spec
    raw = reader.format("text").load(job.landing).where(F.trim("value") != "")
    with_corrupt = StructType([*schema.fields, StructField(CORRUPT, StringType())])
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, **spec.source.options}
    parsed = raw.select(
        F.from_json("value", with_corrupt, options).alias("r"), "value", "_metadata"
    )
    # A line that is not a JSON object parses to null: quarantine it too.
    corrupt = F.when(F.col("r").isNull(), F.col("value")).otherwise(F.col(f"r.{CORRUPT}"))
    columns: list[Column] = [F.col(f"r.{f.name}").alias(f.name) for f in schema.fields]
    if spec.rescued_column:
        columns.append(_rescued(schema).alias(spec.rescued_column))
    return parsed.select(*columns, corrupt.alias(CORRUPT), "_metadata")


def _rescued(schema: StructType) -> Column:
    """Top-level keys not in the schema, as a JSON object (as Auto Loader's rescued column).

    Computed next to the parsed record ``r``. A line with no more keys than it has non-null
    fields of the schema holds no other key (each such field takes a key of its own), so most
    lines skip the set difference of their keys with the schema's, a hash set built per line.
    """
    keys = F.json_object_keys("value")
    present = sum((F.col(f"r.{f.name}").isNotNull().cast("int") for f in schema.fields),
                  F.lit(0))
    known = F.array(*[F.lit(f.name) for f in schema.fields])
    extra = F.array_except(keys, known)
    as_map = F.from_json("value", "MAP<STRING, STRING>")
    kept = F.map_filter(as_map, lambda k, _v: ~F.array_contains(known, k))
    return F.when(F.size(keys) > present, F.when(F.size(extra) > 0, F.to_json(kept)))


def _csv(job: BronzeJob, reader: DataStreamReader, schema: StructType) -> DataFrame:
    """CSV with a corrupt-record column: a row with too many or too few fields, or a value
    that does not fit its type, is malformed and goes to the quarantine, not dropped."""
    with_corrupt = StructType([*schema.fields, StructField(CORRUPT, StringType())])
    options = {
        "header": "true",
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": CORRUPT,
        **job.spec.source.options,
    }
    df = reader.format("csv").schema(with_corrupt).options(**options).load(job.landing)
    columns = [F.col(f.name) for f in schema.fields]
    if job.spec.rescued_column:
        columns.append(F.lit(None).cast("string").alias(job.spec.rescued_column))
    return df.select(*columns, F.col(CORRUPT), "_metadata")


def _parquet(job: BronzeJob, reader: DataStreamReader, schema: StructType) -> DataFrame:
    df = reader.format("parquet").schema(schema).options(**job.spec.source.options)
    loaded = df.load(job.landing)
    columns = [F.col(f.name) for f in schema.fields]
    if job.spec.rescued_column:
        columns.append(F.lit(None).cast("string").alias(job.spec.rescued_column))
    return loaded.select(*columns, F.lit(None).cast("string").alias(CORRUPT), "_metadata")


READERS: dict[SourceFormat, Callable[[BronzeJob, DataStreamReader, StructType], DataFrame]] = {
    SourceFormat.JSON: _text_json,
    SourceFormat.CSV: _csv,
    SourceFormat.PARQUET: _parquet,
}


# ---------------------------------------------------------------------- landing files
def settle_file(storage: Any, path: str, status: str, mode: CleanSource,
                archive_dir: str, quarantine_dir: str) -> tuple[str, str | None] | None:
    """Move an ingested file to the archive (or delete it), or a failed one to the quarantine
    folder; returns its new status and location, or None if it is not there (yet).

    Safe to repeat: a file already moved (by Spark's cleanSource or an interrupted earlier
    call) is recognised at its target.
    """
    archived_at = archive_target(archive_dir, path)
    if status == FileStatus.FAILED:
        target = archive_target(quarantine_dir, path)
        source = path if storage.exists(path) else archived_at
        if storage.exists(source) and not storage.exists(target):
            storage.move(source, target)
        return (FileStatus.QUARANTINED, target) if storage.exists(target) else None
    if mode is CleanSource.ARCHIVE:
        if storage.exists(path) and not storage.exists(archived_at):
            storage.move(path, archived_at)
        return (FileStatus.ARCHIVED, archived_at) if storage.exists(archived_at) else None
    if mode is CleanSource.DELETE:
        storage.delete(path)
        return FileStatus.DELETED, None
    return None


# ---------------------------------------------------------------------- unreadable files
def unreadable_reason(storage: Any, path: str, size: int, fmt: SourceFormat) -> str | None:
    """Why a file cannot be read, from the file itself (empty, broken compression, bad
    parquet footer); None when nothing is wrong with it."""
    if size == 0:
        return "empty file (0 bytes)"
    lower = path.lower()
    if lower.endswith(".gz"):
        try:
            with storage.open(path) as fh, gzip.GzipFile(fileobj=fh) as gz:
                while gz.read(1 << 20):
                    pass
        except (OSError, EOFError, zlib.error) as exc:
            return f"unreadable gzip: {exc}"
    elif fmt is SourceFormat.PARQUET:
        with storage.open(path) as fh:
            head = fh.read(4)
            fh.seek(max(size - 4, 0))
            tail = fh.read(4)
        if head != b"PAR1" or tail != b"PAR1":
            return "not a parquet file (magic bytes missing): truncated or wrong format"
    return None


def _uri_forms(path: str) -> set[str]:
    """The ways Spark may spell a file's path: the file source's log says ``file:///x``,
    ``_metadata.file_path`` says ``file:/x``, either percent-encoded."""
    forms = {path}
    if "://" not in path or path.startswith("file:"):
        encoded = urlparse(path).path if path.startswith("file:") else path
        for p in {local_path(path), encoded}:
            forms.update({p, f"file:{p}", f"file://{p}"})
    return forms


def _is_one_of(paths: Iterable[str]) -> Column:
    """Whether the row's source file is one of ``paths``, however Spark spells its URI."""
    forms = {form for p in paths for form in _uri_forms(p)}
    return F.col(SOURCE_FILE).isin(sorted(forms)) if forms else F.lit(False)


def spark_xxhash64(text: str) -> int:
    """Spark's ``xxhash64`` of a string, computed here: XXH64 of its UTF-8 bytes with Spark's
    seed (42), as a signed long. Hashing a batch's file names needs no Spark job."""
    h = xxhash.xxh64_intdigest(text.encode(), seed=42)
    return h - (1 << 64) if h >= 1 << 63 else h


def _tolerance(h: float) -> float:
    """How far a histogram bin may drift from its file's hash: merging two bins of one file
    averages their positions, which is exact but for rounding."""
    return 1e-9 * max(1.0, abs(h))


def bronze_schema(spec: BronzeTableSpec, records: StructType) -> StructType:
    """The bronze table's columns: the records', the rescued column, the ingestion columns."""
    rescued = [StructField(spec.rescued_column, StringType())] if spec.rescued_column else []
    return StructType([*records.fields, *rescued, *METADATA_FIELDS])


def planned_schema(spark: SparkSession, table: Table, inputs: Mapping[tuple[Layer, str],
                   StructType]) -> tuple[StructType | None, list[ConfigError]]:
    """The bronze table's schema from its spec alone (``framework.layers.Planner``)."""
    spec = cast(BronzeTableSpec, table.spec)
    if not spec.source.schema_:
        return None, []
    try:
        records = parse_schema(spec.source.schema_)
    except ValueError:  # reported by the parse of the spec's SQL
        return None, []
    return bronze_schema(spec, records), []


class BronzeJob(StreamingJob):
    """Ingests one feed's landing files into its bronze Delta table."""

    layer: ClassVar[Layer] = Layer.BRONZE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec = cast(BronzeTableSpec, self.table.spec)
        self.landing = self.spec.landing(self.table)
        self.storage = storage_for(self.landing, self.table.env)
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
        # rows appended before a restart: what reconcile() settles without reading the ledger.
        self._ledger_rows: dict[int, list[dict[str, Any]]] = {}
        self._ledger_from_before = False
        self._committed_at_start: int | None = None  # the checkpoint's, when prepared
        self.run_seconds: dict[str, float] = {}  # steps after the query ("reconcile")
        self._started = threading.Event()

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
            self.quarantine_table: (QUARANTINE_SCHEMA, "Malformed records and rows of "
                                                       f"unreadable files of {self.table.name}"),
        }
        for name, (schema, comment) in tables.items():
            location = self.locations[name]
            created = create_table(self.spark, name, schema, location, comment=comment,
                                   properties=BRONZE_PROPERTIES)
            # A table made before the feed was recorded is read back whole (filtered by batch).
            self.change_feed[name] = created or change_feed_enabled(self.spark, location)
        # Partitioned by batch: reconcile() replaces a batch's rows by dropping its files.
        create_table(self.spark, self.ledger_table, LEDGER_SCHEMA,
                     self.locations[self.ledger_table], partition_by=["batch_id"],
                     comment=f"One row per landing file of {self.table.name}, with its status")
        self._committed_at_start = self.replayable.start - 1

    def read(self) -> DataFrame:
        src = self.spec.source
        reader = self.spark.readStream.option("recursiveFileLookup", src.recursive_file_lookup)
        # A corrupt file must not fail the stream: it is detected per batch and quarantined.
        reader = reader.option("ignoreCorruptFiles", "true")
        # Spark ignores a new file whose modification time is more than maxFileAge (7 days by
        # default) older than the newest file it has seen: a late delivery that keeps its
        # original time (cp -p, land --keep-times) would be skipped without a word.
        reader = reader.option("maxFileAge", MAX_FILE_AGE)
        if src.path_glob_filter:
            reader = reader.option("pathGlobFilter", src.path_glob_filter)
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
        folder = self.spec.landing_folder(self.table)
        if not self.storage.exists(folder):
            # Spark would watch a missing folder forever and ingest nothing: a typo in the
            # path must not look like a quiet feed.
            raise JobError(self.table.full_name, "read",
                           f"expected the landing folder {folder}, found none; create it with "
                           f"'medallion init' or correct source.path in {self.table.source_file}")
        return READERS[src.format](self, reader, self.schema)

    def transform(self, df: DataFrame) -> DataFrame:
        meta = F.col("_metadata")
        return df.select(
            *[c for c in df.columns if c != "_metadata"],
            meta.file_path.alias(SOURCE_FILE),
            meta.file_modification_time.alias(FILE_MTIME),
            meta.file_size.alias(FILE_SIZE),
        )

    def write(self, df: DataFrame) -> DataStreamWriter:
        return df.writeStream.foreachBatch(self._process_batch)

    def on_started(self, query: StreamingQuery) -> None:
        self._started.set()

    # ------------------------------------------------------------------ one micro-batch
    def _process_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Write one micro-batch: one pass over the data when nothing needs quarantining."""
        self._started.wait()
        log = self.log.bind(batch_id=batch_id)
        spark = batch.sparkSession
        files = {
            local_path(p): p for p in batch_source_files(self.table.checkpoint, batch_id,
                                                          env=self.table.env)
        }
        broken = self._broken_files(files)  # found from the files themselves, before writing
        split = self.split_batch(batch, batch_id, broken, len(files))
        seconds: dict[str, float] = {}
        with timed(seconds, "write"):
            replayed = self._written(self.table.full_name, batch_id)
            if replayed:
                # Appended before a restart: counted in a pass of its own, not written again.
                metrics = split.count()
            else:
                self._append(split.good, self.table.full_name, batch_id)
                metrics = split.observation.get
        if metrics["quarantined"] and not self._written(self.quarantine_table, batch_id):
            with timed(seconds, "quarantine"):
                self._append(self._quarantine_rows(split, broken), self.quarantine_table,
                             batch_id)
        with timed(seconds, "ledger"):
            per_file = None if replayed else self._per_file(metrics, files)
            counted_from = "observed" if per_file else "commits"
            if per_file is None:  # read back from what the batch committed
                per_file = self._rows_per_file(self.table.full_name, batch_id, files), (
                    self._rows_per_file(self.quarantine_table, batch_id, files)
                    if metrics["quarantined"] else {})
            counts = self._record_files(spark, batch_id, files, broken, *per_file)
        counts.seconds, counts.counted_from = seconds, counted_from
        if counts.records != metrics["records"] or counts.quarantined != metrics["quarantined"]:
            raise JobError(
                self.table.full_name, f"batch {batch_id}",
                f"expected the tables to hold the {metrics['records']} records read "
                f"({metrics['quarantined']} quarantined), found {counts.good} in bronze and "
                f"{counts.quarantined} in quarantine",
            )
        self.batches.append(counts)
        log.info(
            "bronze.batch.committed",
            records=counts.records,
            bronze_rows=counts.good,
            quarantined_rows=counts.quarantined,
            files=counts.files,
            failed_files=counts.failed_files,
            rows_per_file_counted_from=counted_from,
            seconds=seconds,
        )

    def split_batch(self, batch: DataFrame, batch_id: int, broken: Iterable[str],
                    files: int) -> BatchSplit:
        """The batch stamped with its ingestion time and id, and its bronze rows: those neither
        malformed nor from a file in ``broken``, counted as they are written, in all and per
        source file (the batch has ``files`` files)."""
        stamped = batch.withColumn(INGESTED_AT, F.current_timestamp()).withColumn(
            BATCH_ID, F.lit(batch_id).cast("long")
        )
        to_quarantine = F.col(CORRUPT).isNotNull() | _is_one_of(broken)
        observation = Observation(f"bronze_{self.table.name}_{batch_id}")
        # Rows per file, counted in the same pass: a histogram with a bin per file is exact
        # (see _per_file), and costs a lookup among the files' bins per row.
        source, bins = F.xxhash64(SOURCE_FILE).cast("double"), F.lit(max(files, 2))
        observed = stamped.observe(
            observation,
            *_counts(to_quarantine),
            F.histogram_numeric(source, bins).alias("per_file"),
            F.histogram_numeric(F.when(to_quarantine, source), bins).alias("quarantined_per_file"),
        )
        good = observed.where(~to_quarantine).drop(CORRUPT)
        return BatchSplit(stamped, to_quarantine, good, observation)

    def seconds(self) -> dict[str, float]:
        """Seconds per step over this run: its batches' steps summed (see
        :class:`BatchCounts`), then the steps after the query."""
        total: dict[str, float] = {}
        for b in self.batches:
            for step, s in b.seconds.items():
                total[step] = round(total.get(step, 0.0) + s, 3)
        return total | self.run_seconds

    def batch_rows(self, progress: BatchProgress) -> int:
        done = [b.records for b in self.batches if b.batch_id == progress.batch_id]
        return done[-1] if done else progress.input_rows

    def _broken_files(self, files: dict[str, str]) -> dict[str, str]:
        """Files that cannot be read whole (empty, broken compression, bad parquet footer)."""
        broken: dict[str, str] = {}
        for path in files:
            size = self.storage.stat(path).size
            reason = unreadable_reason(self.storage, path, size, self.spec.source.format)
            if reason:
                broken[path] = reason
        return broken

    def _quarantine_rows(self, split: BatchSplit, broken: dict[str, str]) -> DataFrame:
        df = split.stamped
        reason: Column = F.lit("malformed record: does not parse against the schema")
        for path, why in broken.items():
            reason = F.when(_is_one_of([path]), F.lit(f"unreadable file: {why}")).otherwise(reason)
        meta = {f.name for f in QUARANTINE_SCHEMA}
        data_cols = [c for c in df.columns if c not in meta and c != CORRUPT]
        raw = F.coalesce(F.col(CORRUPT), F.to_json(F.struct(*data_cols)))
        return df.where(split.to_quarantine).select(
            raw.alias(RAW),
            reason.alias(REASON),
            *[F.col(f.name) for f in QUARANTINE_SCHEMA.fields[2:]],
        )

    def _append(self, df: DataFrame, table: str, batch_id: int) -> None:
        """Append the batch's rows to ``table``, whose commit of this batch was looked for."""
        self.append_batch(df, self.locations[table], batch_id, checked=True)

    def _written(self, table: str, batch_id: int) -> bool:
        return self.written_before(self.locations[table], batch_id)

    def _per_file(self, metrics: dict[str, Any], files: dict[str, str]
                  ) -> tuple[dict[str, int], dict[str, int]] | None:
        """Rows per file (by local path), in bronze and in quarantine, from the batch's
        observed histograms of its source files' hashes; None when they cannot be told apart,
        and the rows are then counted from what the batch committed.

        A histogram (``histogram_numeric``) keeps a bin per distinct value until it holds more
        values than bins; merging the histograms of two tasks that read parts of one file
        joins that file's two bins first (they are nearest, at distance zero). With a bin per
        file, every bin is one file and its height the file's exact row count.
        """
        forms = {form: local for local, original in files.items()
                 for form in _uri_forms(original) | _uri_forms(local)}
        if not forms:
            return {}, {}
        by_hash = sorted((float(spark_xxhash64(f)), local) for f, local in forms.items())
        for (h1, f1), (h2, f2) in pairwise(by_hash):
            if f1 != f2 and h2 - h1 <= _tolerance(h2) * 1000:
                return None  # two files' hashes too close to tell their bins apart

        positions = [h for h, _ in by_hash]

        def decode(bins: list[Any] | None) -> dict[str, int] | None:
            counts: dict[str, int] = {}
            for b in bins or []:
                x, y = float(b["x"]), float(b["y"])
                i = bisect_left(positions, x)  # the nearest hash is at i - 1 or i
                h, local = min(by_hash[max(i - 1, 0):i + 1], key=lambda c: abs(c[0] - x))
                if abs(h - x) > _tolerance(h):
                    return None  # a bin of no file of this batch
                counts[local] = counts.get(local, 0) + round(y)
            return counts

        rows, bad = decode(metrics.get("per_file")), decode(metrics.get("quarantined_per_file"))
        if (rows is None or bad is None or sum(rows.values()) != metrics["records"]
                or sum(bad.values()) != metrics["quarantined"]):
            return None
        return {f: n - bad.get(f, 0) for f, n in rows.items()}, bad

    def _record_files(
        self,
        spark: Any,
        batch_id: int,
        files: dict[str, str],
        broken: dict[str, str],
        good: dict[str, int],
        bad: dict[str, int],
    ) -> BatchCounts:
        """The ledger rows of the batch's files, with their rows in bronze (``good``) and in
        quarantine (``bad``), appended unless a run before a restart did."""
        now = datetime.now(UTC).replace(tzinfo=None)
        counts = BatchCounts(batch_id=batch_id, files=len(files))
        rows = []
        for path in files:
            info = self.storage.stat(path)
            n_good, n_bad = good.get(path, 0), bad.get(path, 0)
            reason = broken.get(path)
            if reason is None and n_bad and not n_good:
                reason = "no record could be parsed (wrong encoding or format?)"
            if (reason is None and not n_good and not n_bad
                    and self.spec.source.format is not SourceFormat.PARQUET):
                reason = "no record could be read from the file"
            counts.records += n_good + n_bad
            counts.good += n_good
            counts.quarantined += n_bad
            counts.failed_files += reason is not None
            status = FileStatus.FAILED if reason else FileStatus.INGESTED
            mtime = datetime.fromtimestamp(info.modified_ms / 1000, UTC).replace(tzinfo=None)
            rows.append((path, info.size, mtime, batch_id, n_good + n_bad, n_good, n_bad, status,
                         reason, path, now, now))
        if rows and self._written(self.ledger_table, batch_id):
            self._ledger_from_before = True  # reconcile() reads the ledger for its rows
        elif rows:
            self._append(literal_rows(spark, rows, LEDGER_SCHEMA), self.ledger_table, batch_id)
            self._ledger_rows[batch_id] = [dict(zip(LEDGER_SCHEMA.names, r, strict=True))
                                           for r in rows]
        return counts

    def _rows_per_file(self, table: str, batch_id: int, files: Iterable[str]) -> dict[str, int]:
        """Rows of this batch per source file (by local path), read back from what was written."""
        rows = (
            self._batch_rows(table, batch_id)
            .where((F.col(BATCH_ID) == batch_id) & _is_one_of(files))
            .groupBy(SOURCE_FILE)
            .count()
            .collect()
        )
        return {local_path(r[SOURCE_FILE]): int(r["count"]) for r in rows}

    def _batch_rows(self, table: str, batch_id: int) -> DataFrame:
        """What holds this batch's rows of ``table``: the rows its commit added, read from that
        commit's files (the change data feed), or else the whole table.

        Reading the table whole makes Delta rebuild its state and list every file, a cost that
        grows with the table and dominates a small batch; one commit's files are found from the
        commit alone. An append is one commit, so the batch's rows are all in it, whether it
        was written now or before a restart.
        """
        location = self.locations[table]
        if self.change_feed.get(table):
            version = self.batch_version(location, batch_id)
            if version is not None:
                return version_rows(self.spark, location, version)
        return self.spark.read.format("delta").load(location)

    # ------------------------------------------------------------------ after the query
    def finish(self, progress: list[BatchProgress]) -> dict[str, int]:
        with timed(self.run_seconds, "reconcile"):
            reconciled = self.reconcile()
        records = sum(b.records for b in self.batches)
        good = sum(b.good for b in self.batches)
        quarantined = sum(b.quarantined for b in self.batches)
        balanced = records == good + quarantined
        self.log.info(
            "bronze.run.reconciled",
            records_read=records,
            bronze_rows=good,
            quarantined_rows=quarantined,
            balanced=balanced,
            seconds=self.seconds(),
            **reconciled,
        )
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
        """Archive, delete or quarantine the files of committed batches not yet cleaned.

        The files are those of this run's batches and, when an earlier run did not settle all
        of its own (it stopped before, or a file was missing), those left in the ledger. Each
        batch whose files moved has its ledger rows replaced in one commit. Safe to repeat: a
        file already moved (by Spark's cleanSource or an interrupted earlier reconcile) is
        recognised at its target and only its ledger status is brought up to date.
        """
        checkpoint, env = self.table.checkpoint, self.table.env
        committed = last_committed_batch(checkpoint, env)
        mode = self.spec.source.clean_source
        pending = ({FileStatus.FAILED} if mode is CleanSource.OFF
                   else {FileStatus.INGESTED, FileStatus.FAILED})
        batches = {b: rows for b, rows in self._ledger_rows.items() if b <= committed}
        if (self._committed_at_start is None or self._ledger_from_before
                or last_reconciled_batch(checkpoint, env, failed_only=mode is CleanSource.OFF)
                < self._committed_at_start):
            batches |= self._unsettled_batches(committed, pending, skip=batches)
        archive_dir = self.spec.archive_dir(self.table)
        quarantine_dir = self.spec.quarantine_dir(self.table)
        now = datetime.now(UTC).replace(tzinfo=None)
        counted = {"files_archived": 0, "files_deleted": 0, "files_quarantined": 0}
        changed: list[int] = []
        unsettled = 0
        for batch_id, rows in sorted(batches.items()):
            for row in rows:
                if row["status"] not in pending:
                    continue
                settled = settle_file(self.storage, row["path"], row["status"], mode,
                                      archive_dir, quarantine_dir)
                if settled is None:
                    unsettled += 1
                    continue
                row["status"], row["location"] = settled
                row["updated_at"] = now
                counted[f"files_{row['status']}"] += 1
                if not changed or changed[-1] != batch_id:
                    changed.append(batch_id)
        if changed:
            df = literal_rows(
                self.spark,
                [tuple(r[f] for f in LEDGER_SCHEMA.names) for b in changed for r in batches[b]],
                LEDGER_SCHEMA)
            replace_rows(df, self.locations[self.ledger_table],
                         f"batch_id IN ({', '.join(map(str, changed))})")
        if not unsettled and committed >= 0:
            mark_reconciled(checkpoint, committed, env, failed_only=mode is CleanSource.OFF)
        self.log.info("bronze.landing.reconciled", committed_batch=committed,
                      unsettled_files=unsettled, **counted)
        return counted

    def _unsettled_batches(self, committed: int, pending: set[str], skip: Iterable[int]
                           ) -> dict[int, list[dict[str, Any]]]:
        """Every ledger row of the committed batches (not in ``skip``) that have a file in a
        ``pending`` status, by batch."""
        ledger = self.spark.read.format("delta").load(self.locations[self.ledger_table])
        ledger = ledger.where((F.col("batch_id") <= committed)
                              & ~F.col("batch_id").isin(list(skip)))
        ids = [r["batch_id"] for r in ledger.where(F.col("status").isin(sorted(pending)))
               .select("batch_id").distinct().collect()]
        batches: dict[int, list[dict[str, Any]]] = {}
        if ids:
            for row in ledger.where(F.col("batch_id").isin(ids)).collect():
                batches.setdefault(row["batch_id"], []).append(row.asDict())
        return batches

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

