"""One micro-batch of a feed as bronze writes it: its rows stamped with the ingestion columns,
split into bronze rows and quarantine rows, counted in the pass that writes them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from bronze.cdc import TOMBSTONE, change_columns
from bronze.conform import CORRUPT, CORRUPT_REASON, DROPPED
from bronze.malformed import MALFORMED
from bronze.spec import BronzeTableSpec
from framework.config.model import SqlKind, Table
from framework.delta import CHANGE_FEED
from framework.errors import ConfigError
from framework.sqlcheck import EXAMPLES, parse_schema

SOURCE_FILE = "_source_file"
FILE_MTIME = "_file_modification_time"
FILE_SIZE = "_file_size"
INGESTED_AT = "_ingested_at"
BATCH_ID = "_batch_id"
RAW = "_raw"
REASON = "_reason"
# the readers' columns that bronze does not keep
INTERNAL = (CORRUPT, CORRUPT_REASON, DROPPED, TOMBSTONE)

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

# Statistics only on the ingestion columns: bronze is read by streams and by batch id, and
# collecting min/max of every data column costs a share of the write. The change data feed lets
# each batch's rows be read back from its own commit (bronze.ledger.commit_rows_per_file).
BRONZE_PROPERTIES = {"delta.dataSkippingStatsColumns": f"{BATCH_ID},{INGESTED_AT},{FILE_MTIME}",
                     CHANGE_FEED: "true"}


def bronze_schema(spec: BronzeTableSpec, records: StructType) -> StructType:
    """The bronze table's columns: the records', the change columns (``cdc``), the rescued
    column, the ingestion columns."""
    rescued = [StructField(spec.rescued_column, StringType())] if spec.rescued_column else []
    return StructType([*records.fields, *change_columns(spec.cdc), *rescued,
                       *METADATA_FIELDS])


def records_schema(table: Table) -> StructType:
    """The schema of the feed's records (``source.schema``), or a clear error: none, or DDL
    that does not parse."""
    spec = cast(BronzeTableSpec, table.spec)
    if not spec.source.schema_:
        raise ConfigError("expected a schema (DDL) for the feed, found none; write one with "
                          f"'medallion infer-schema {table.name}'",
                          file=table.source_file, key="source.schema")
    try:
        return parse_schema(spec.source.schema_)
    except ValueError as exc:
        raise ConfigError(f"expected {EXAMPLES[SqlKind.SCHEMA]}, found "
                          f"{spec.source.schema_!r}: {exc}",
                          file=table.source_file, key="source.schema") from exc


def file_name(uri: Column) -> Column:
    """A file's URI as Spark's ``_metadata`` gives it, as the file ledger's ``path`` names it
    (:func:`framework.storage.from_uri`, in Spark): percent-escapes decoded (``a%23b`` ->
    ``a#b``; a ``+`` stays one), a local file as a plain path (``file:///p`` -> ``/p``), a
    path without authority as ``s:///p``."""
    decoded = F.url_decode(F.replace(uri, F.lit("+"), F.lit("%2B")))
    local = F.regexp_replace(decoded, r"^file:(//)?(?=/)", "")
    return F.regexp_replace(local, r"^([A-Za-z0-9]+):/(?!/)", "$1:///")


def with_file_columns(df: DataFrame) -> DataFrame:
    """The records with their source file's path (as the ledger names it), modification time
    and size (from Spark's hidden ``_metadata``) in place of ``_metadata``."""
    meta = F.col("_metadata")
    return df.select(
        *[c for c in df.columns if c != "_metadata"],
        file_name(meta.file_path).alias(SOURCE_FILE),
        meta.file_modification_time.alias(FILE_MTIME),
        meta.file_size.alias(FILE_SIZE),
    )


@dataclass(frozen=True)
class BatchSplit:
    """One micro-batch, ready to write (see :func:`split_batch`)."""

    stamped: DataFrame  # every record, with its ingestion time and batch id
    to_quarantine: Column  # true for a malformed record
    good: DataFrame  # the bronze rows; writing them fills ``observation``
    observation: Observation  # records read, to quarantine... (see _counts)
    rescued: str | None = None  # the rescued column, whose non-null values are counted
    skip: tuple[str, Column] | None = None  # records neither written nor quarantined, counted
    # why a malformed record is, from its raw text (null: the generic reason, MALFORMED)
    explain: Callable[[Column], Column] | None = None

    def count(self) -> dict[str, int]:
        """The observation's figures, counted without writing (a replayed batch whose append
        committed before the restart)."""
        row = self.stamped.agg(*_counts(self.to_quarantine, self.stamped.columns,
                                        self.rescued, self.skip)).first()
        assert row is not None  # an aggregate without grouping returns one row
        return row.asDict()

    def quarantine_rows(self) -> DataFrame:
        """The malformed records, with their raw text and the reason."""
        df = self.stamped
        meta = {f.name for f in QUARANTINE_SCHEMA}
        data_cols = [c for c in df.columns if c not in meta and c not in INTERNAL]
        raw = F.coalesce(F.col(CORRUPT), F.to_json(F.struct(*data_cols)))
        reason = quarantine_reason(raw, self.explain)
        return df.where(self.to_quarantine).select(
            raw.alias(RAW), reason.alias(REASON),
            *[F.col(f.name) for f in QUARANTINE_SCHEMA.fields[2:]],
        )


def quarantine_reason(raw: Column, explain: Callable[[Column], Column] | None = None
                      ) -> Column:
    """A quarantined record's reason: the reader's (a record too large...), else what
    ``explain`` finds in its raw text (:func:`bronze.reading.malformed_reason`), else
    :data:`MALFORMED`. Every reason of a malformed record starts with ``malformed record: ``."""
    explained = [explain(raw)] if explain is not None else []
    return F.coalesce(F.col(CORRUPT_REASON), *explained, F.lit(MALFORMED))


def split_batch(batch: DataFrame, name: str, batch_id: int,
                to_quarantine: Column | None = None, rescued: str | None = None,
                skip: tuple[str, Column] | None = None,
                explain: Callable[[Column], Column] | None = None) -> BatchSplit:
    """The batch stamped with its ingestion time and id, and its bronze rows (not to quarantine:
    by default the malformed ones), counted as they are written. ``skip`` (a name and a
    condition) marks records that are not data (Debezium's tombstones): neither written nor
    quarantined, counted under the name. ``explain`` says why a malformed record is, from its
    text (see :func:`quarantine_reason`)."""
    stamped = batch.withColumn(INGESTED_AT, F.current_timestamp()).withColumn(
        BATCH_ID, F.lit(batch_id).cast("long")
    )
    if to_quarantine is None:
        to_quarantine = F.col(CORRUPT).isNotNull()
    observation = Observation(f"bronze_{name}_{batch_id}")
    observed = stamped.observe(observation, *_counts(to_quarantine, stamped.columns, rescued,
                                                     skip))
    kept = ~to_quarantine if skip is None else ~to_quarantine & ~skip[1]
    good = observed.where(kept).drop(*INTERNAL)
    return BatchSplit(stamped, to_quarantine, good, observation, rescued, skip, explain)


def _counts(to_quarantine: Column, columns: list[str], rescued: str | None = None,
            skip: tuple[str, Column] | None = None) -> list[Column]:
    """Records read, to quarantine, with a rescued value, and holding new columns that
    ``schema_evolution: none`` ignores."""
    counts = [F.count(F.lit(1)).alias("records"),
              F.count_if(to_quarantine).alias("quarantined")]
    if rescued and rescued in columns:
        counts.append(F.count_if(F.col(rescued).isNotNull() & ~to_quarantine).alias("rescued"))
    if DROPPED in columns:
        counts.append(F.count_if(F.col(DROPPED).isNotNull()).alias("ignored"))
    if skip is not None:
        counts.append(F.count_if(skip[1]).alias(skip[0]))
    return counts
