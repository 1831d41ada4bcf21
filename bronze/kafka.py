"""Bronze from Kafka (or Event Hubs' Kafka endpoint): each record's value parsed as a JSON line,
appended exactly once with its topic, partition and offset.

Spark's Kafka source plans each micro-batch as offset ranges, logged in the checkpoint before
the batch runs; a batch run again after a crash reads the same ranges. In ``foreachBatch`` the
good rows are appended to the bronze table in one commit tagged ``<query id>:<batch id>``
(:class:`framework.delta.BatchCommits`), counted as they are written (``observe``), then the
malformed ones to ``<table>_quarantine``: a replayed batch writes only what is missing. A value
that is not a JSON object of the schema, is not UTF-8 (kept in base64), is larger than
``source.max_record_bytes``, or is absent (a tombstone) is quarantined, never dropped. A feed of
Debezium change events (``cdc``, :mod:`bronze.cdc`) is decoded by :mod:`bronze.debezium`; its
tombstones (a record without a value, after a delete) are not data: skipped, and counted
(``cdc_tombstones``) in the batch's event and the run's counts.

Each batch's start and end offsets per partition are in its ``bronze.batch.offsets`` event;
``medallion status`` shows per partition the offset bronze has reached, the latest offset of
the topic and the lag (:mod:`bronze.offsets`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery
from pyspark.sql.types import (
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from bronze.batch import quarantine_reason, split_batch
from bronze.cdc import TOMBSTONE, change_columns, row_problem, sequence_types
from bronze.conform import Conformer, refuse_schema_change, schema_change_error
from bronze.debezium import parse_change_events
from bronze.offsets import KAFKA_TIMESTAMP, KEY, OFFSET, PARTITION, TOPIC
from bronze.reading import (
    CORRUPT,
    CORRUPT_REASON,
    RAW_PREFIX,
    malformed_reason,
    parse_json_lines,
)
from bronze.streams import StreamTableSpec, kafka_package
from framework.config.model import Layer, Runtime, SqlKind
from framework.delta import create_table
from framework.errors import ConfigError, QueryFailedError, SessionError
from framework.job import RunStatus, StreamingJob
from framework.jvm import has_class
from framework.listener import BatchProgress
from framework.logging import get_logger, timed
from framework.microbatch import Outcome, TableBatches, batch_commits
from framework.session import detect_runtime
from framework.sqlcheck import EXAMPLES, parse_schema

KAFKA_SOURCE = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
INGESTED_AT = "_ingested_at"
BATCH_ID = "_batch_id"
RAW = "_raw"
REASON = "_reason"
NOT_UTF8 = "value is not UTF-8 text; _raw holds it in base64"
NO_VALUE = "no value (a tombstone or an empty record)"
TOMBSTONES = "cdc_tombstones"  # the figure of Debezium's tombstones skipped

RECORD_FIELDS = [
    StructField(TOPIC, StringType()),
    StructField(PARTITION, IntegerType()),
    StructField(OFFSET, LongType()),
    StructField(KAFKA_TIMESTAMP, TimestampType()),
    StructField(KEY, StringType()),
]
METADATA_FIELDS = [*RECORD_FIELDS, StructField(INGESTED_AT, TimestampType()),
                   StructField(BATCH_ID, LongType())]
QUARANTINE_SCHEMA = StructType(
    [StructField(RAW, StringType()), StructField(REASON, StringType()), *METADATA_FIELDS])
# Statistics on the ingestion columns only (as for file feeds): skipping by partition and
# offset finds a record, or a batch, without reading the rest.
PROPERTIES = {"delta.dataSkippingStatsColumns":
              f"{PARTITION},{OFFSET},{BATCH_ID},{INGESTED_AT},{KAFKA_TIMESTAMP}"}
# Spark's words when offsets a query has not read are gone (failOnDataLoss).
DATA_LOSS = ("data may have been lost", "data may have been missed", "are gone",
             "offset was changed", "partitions lost")


def stream_schema(spec: StreamTableSpec, records: StructType) -> StructType:
    """The bronze table's columns: the records', the change columns (``cdc``), the rescued
    column, the ingestion columns."""
    rescued = [StructField(spec.rescued_column, StringType())] if spec.rescued_column else []
    return StructType([*records.fields, *change_columns(spec.cdc), *rescued,
                       *METADATA_FIELDS])


def decode(records: DataFrame, schema: StructType, spec: StreamTableSpec,
           types: Mapping[str, DataType] | None = None) -> DataFrame:
    """Spark's Kafka rows (key, value, topic...) as the schema's columns, the rescued column,
    the internal ``_corrupt_record``/``_corrupt_reason`` and the record's Kafka columns. For
    change events (``cdc``, the sequence fields' ``types`` given), the change columns after
    the schema's, and ``_cdc_tombstone``: a record without a value is not quarantined but
    marked, to be skipped and counted."""
    src = spec.source
    text = F.col("value").cast("string")  # the bytes as they are: checked, then parsed
    utf8 = F.is_valid_utf8(text)
    lines = records.select(
        F.when(utf8, text).alias("value"),
        F.col("value").isNull().alias("_absent"),
        F.when(~utf8, F.col("value")).alias("_bytes"),  # kept only when not UTF-8
        F.col("topic").alias(TOPIC), F.col("partition").alias(PARTITION),
        F.col("offset").alias(OFFSET), F.col("timestamp").alias(KAFKA_TIMESTAMP),
        F.col("key").cast("string").alias(KEY))
    carry = ["_absent", "_bytes", *[f.name for f in RECORD_FIELDS]]
    conformer = Conformer(schema, spec.rescued_column, src.schema_evolution, src.options)
    origin = F.format_string("%s partition %d offset %d", F.col(TOPIC), F.col(PARTITION),
                             F.col(OFFSET))
    cdc = spec.cdc
    if cdc is not None:
        assert types is not None
        parsed = parse_change_events(lines, conformer, cdc, types, src.options,
                                     src.max_record_bytes, carry, origin=origin)
    else:
        parsed = parse_json_lines(lines, conformer, src.options, src.max_record_bytes, carry,
                                  origin=origin)
    absent, not_utf8 = F.col("_absent"), F.col("_bytes").isNotNull()
    b64 = F.base64(F.substring(F.col("_bytes"), 1, RAW_PREFIX * 3))
    corrupt = F.when(not_utf8, b64).when(~absent, F.col(CORRUPT))
    # A record without a value: a tombstone of change events (skipped), else quarantined.
    absent_reason = F.lit(None).cast("string") if cdc is not None else F.lit(NO_VALUE)
    reason = F.when(absent, absent_reason).when(not_utf8, F.lit(NOT_UTF8)) \
        .otherwise(F.col(CORRUPT_REASON))
    tombstone = [absent.alias(TOMBSTONE)] if cdc is not None else []
    data = [c for c in parsed.columns if c not in (CORRUPT, CORRUPT_REASON, *carry)]
    return parsed.select(*data, corrupt.alias(CORRUPT), reason.alias(CORRUPT_REASON),
                         *tombstone, *[f.name for f in RECORD_FIELDS])


@dataclass(frozen=True)
class Ingested(Outcome):
    """A batch of records written: its figures (records, quarantined...) and steps' seconds."""

    figures: Mapping[str, int] = field(default_factory=dict)
    seconds: Mapping[str, float] = field(default_factory=dict)


class RecordWriter:
    """Writes a batch of decoded records to bronze and the quarantine, one tagged commit each
    (a batch replayed after a restart is counted, not written again)."""

    def __init__(self, batches: TableBatches, spark: SparkSession) -> None:
        self.table = batches.table
        self.spec = cast(StreamTableSpec, batches.table.spec)
        self.explain = malformed_reason(self.spec.source.options)
        self.log_context = batches.log_context
        self.commits = batch_commits(batches.table, batches.replayable, spark)

    def write(self, batch: DataFrame, batch_id: int) -> Ingested:
        log = get_logger(**self.log_context, batch_id=batch_id)
        seconds: dict[str, float] = {}
        bad = F.col(CORRUPT).isNotNull() | F.col(CORRUPT_REASON).isNotNull()
        skip = (TOMBSTONES, F.col(TOMBSTONE)) if self.spec.cdc is not None else None
        split = split_batch(batch, self.table.name, batch_id, to_quarantine=bad,
                            rescued=self.spec.rescued_column, skip=skip)
        bronze, quarantine = self.table.location, self.table.companion_location("quarantine")
        with timed(seconds, "write"):
            if self.commits.written_before(bronze, batch_id):
                # Appended before a restart: counted in a pass of its own, not written again.
                metrics = split.count()
            else:
                try:
                    self.commits.append(split.good, bronze, batch_id, checked=True)
                except Exception as exc:
                    self._refuse_schema_change(exc, batch_id, log)
                    raise
                metrics = split.observation.get
        if metrics["quarantined"] and not self.commits.written_before(quarantine, batch_id):
            with timed(seconds, "quarantine"):
                self.commits.append(_quarantine_rows(split.stamped, bad, self.explain),
                                    quarantine, batch_id, checked=True)
        skipped = {TOMBSTONES: metrics[TOMBSTONES]} if skip is not None else {}
        log.info("bronze.batch.committed", records=metrics["records"],
                 bronze_rows=_bronze_rows(metrics), quarantined_rows=metrics["quarantined"],
                 seconds=seconds, **skipped)
        return Ingested(batch_id, figures=dict(metrics), seconds=seconds)

    def _refuse_schema_change(self, error: BaseException, batch_id: int, log: Any) -> None:
        """Raise :class:`SchemaChangeError` if the batch's write refused a new key or a value
        of another type (``schema_evolution: failOnNewColumns``)."""
        found = schema_change_error(str(error))
        if found is not None:
            refuse_schema_change(self.table.full_name, batch_id, found[0],
                                 found[1], f"add them to source.schema in {self.table.source_file}",
                                 log, record=True)


class StreamBronzeJob(StreamingJob):
    """Ingests one Kafka (or Event Hubs) feed into its bronze Delta table."""

    layer: ClassVar[Layer] = Layer.BRONZE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec = cast(StreamTableSpec, self.table.spec)
        self.quarantine_table = self.table.qualified("quarantine")
        self.locations = {
            self.table.full_name: self.table.location,
            self.quarantine_table: self.table.companion_location("quarantine"),
        }
        self.batches: dict[int, dict[str, Any]] = {}  # this run's, by batch id
        self.offsets_lost: list[dict[str, Any]] = []  # jumps past unread offsets

    def describe(self) -> dict[str, Any]:
        src = self.spec.source
        return super().describe() | {"source": src.format.value, "topics": src.topics(),
                                     "fail_on_data_loss": src.fail_on_data_loss}

    # ------------------------------------------------------------------ steps
    def prepare(self) -> None:
        super().prepare()
        require_kafka(self.spark)
        ddl = self.spec.source.schema_
        if not ddl:
            raise ConfigError("expected a schema (DDL) of the records' values, found none",
                              file=self.table.source_file, key="source.schema")
        try:
            self.schema = parse_schema(ddl)
        except ValueError as exc:
            raise ConfigError(f"expected {EXAMPLES[SqlKind.SCHEMA]}, found {ddl!r}: {exc}",
                              file=self.table.source_file, key="source.schema") from exc
        self.types: dict[str, DataType] | None = None
        if self.spec.cdc is not None:
            problem = row_problem(self.schema)
            if problem:
                raise ConfigError(problem, file=self.table.source_file, key="source.schema")
            try:
                self.types = sequence_types(self.spec.cdc)
            except ConfigError as exc:
                exc.file = self.table.source_file
                raise
        tables = {
            self.table.full_name: (stream_schema(self.spec, self.schema),
                                   self.spec.description),
            self.quarantine_table: (QUARANTINE_SCHEMA,
                                    f"Malformed records of {self.table.name}"),
        }
        for name, (schema, comment) in tables.items():
            create_table(self.spark, name, schema, self.locations[name], comment=comment,
                         properties=PROPERTIES)

    def read(self) -> DataFrame:
        databricks = detect_runtime() is Runtime.DATABRICKS
        options = self.spec.source.spark_options(databricks=databricks)
        return self.spark.readStream.format("kafka").options(**options).load()

    def transform(self, df: DataFrame) -> DataFrame:
        return decode(df, self.schema, self.spec, self.types)

    def write(self, df: DataFrame) -> DataStreamWriter:
        return self.foreach_step(df, TableBatches(RecordWriter, self.table, self.replayable,
                                                  self.log_context))

    def fold(self, outcome: Outcome) -> None:
        assert isinstance(outcome, Ingested)
        self.batches[outcome.batch_id] = {"batch_id": outcome.batch_id, **outcome.figures,
                                          "seconds": dict(outcome.seconds)}

    def on_batch(self, progress: BatchProgress) -> None:
        """Log the batch's offsets; note a partition whose end lies before its start: its
        offsets went back (the topic was created again), ``fail_on_data_loss`` is false, and
        Spark skipped the partition's records up to the new end."""
        start, end = _offsets(progress.start_offsets), _offsets(progress.end_offsets)
        if not end:
            return
        self.log.info("bronze.batch.offsets", batch_id=progress.batch_id,
                      start_offsets=progress.start_offsets, end_offsets=progress.end_offsets,
                      input_rows=progress.input_rows)
        lost = [{"topic": t, "partition": p, "read_up_to": start[(t, p)], "went_on_from": e}
                for (t, p), e in sorted(end.items()) if (t, p) in start and e < start[(t, p)]]
        if lost:
            self.offsets_lost.extend(lost)
            self.log.warning("bronze.kafka.offsets_lost", batch_id=progress.batch_id,
                             partitions=lost, reason="the partition's offsets went back; "
                             "its records before went_on_from are not read "
                             "(source.fail_on_data_loss is false)")

    def batch_rows(self, progress: BatchProgress) -> int:
        b = self.batches.get(progress.batch_id)
        return b["records"] if b else progress.input_rows

    def batch_figures(self, progress: BatchProgress) -> dict[str, int | None]:
        b = self.batches.get(progress.batch_id)
        if b is None:
            return super().batch_figures(progress)
        return {"rows_in": b["records"], "rows_out": _bronze_rows(b),
                "quarantined": b["quarantined"]}

    def batch_seconds(self, batch_id: int) -> dict[str, float]:
        b = self.batches.get(batch_id)
        return dict(b["seconds"]) if b else {}

    def _await(self, query: StreamingQuery) -> RunStatus:
        try:
            return super()._await(query)
        except QueryFailedError as exc:
            text = str(exc.__cause__ or exc)
            if any(words in text.lower() for words in DATA_LOSS):
                raise QueryFailedError(self.table.full_name, "stream", _data_loss(
                    text, self.spec.source.topics())) from exc
            raise

    # ------------------------------------------------------------------ after the query
    def finish(self) -> dict[str, int]:
        records = sum(b["records"] for b in self.batches.values())
        quarantined = sum(b["quarantined"] for b in self.batches.values())
        good = sum(_bronze_rows(b) for b in self.batches.values())
        # Tombstones are read but in neither table: records = bronze + quarantined + tombstones
        skipped = {TOMBSTONES: sum(b.get(TOMBSTONES, 0) for b in self.batches.values())} \
            if self.spec.cdc is not None else {}
        self.log.info("bronze.run.counted", records_read=records,
                      bronze_rows=good, quarantined_rows=quarantined,
                      offset_jumps=len(self.offsets_lost), **skipped)
        return {"rows_in": records, "rows_out": good,
                "records_read": records, "quarantined_rows": quarantined,
                "offset_jumps": len(self.offsets_lost), **skipped}


def _bronze_rows(figures: Mapping[str, Any]) -> int:
    """A batch's rows in bronze: its records but those quarantined and the tombstones."""
    return int(figures["records"] - figures["quarantined"] - figures.get(TOMBSTONES, 0))


def _quarantine_rows(stamped: DataFrame, bad: Column,
                     explain: Callable[[Column], Column] | None) -> DataFrame:
    """The malformed records: their text (or its prefix, or base64 of bytes that are not
    UTF-8) and the reason (as a file feed's: :func:`bronze.batch.quarantine_reason`)."""
    return stamped.where(bad).select(
        F.col(CORRUPT).alias(RAW), quarantine_reason(F.col(CORRUPT), explain).alias(REASON),
        *[F.col(f.name) for f in METADATA_FIELDS])


def _offsets(offsets: Mapping[str, Mapping[str, int]] | None) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in (offsets or {}).items()
            for p, o in parts.items()}


def _data_loss(error: str, topics: list[str] | None) -> str:
    """Spark's data-loss failure in words: which partitions went back from which offset to
    which (from the offsets its message lists), and what to do."""
    committed, available = (_listed_offsets(error, f"Current {which} Offsets:")
                            for which in ("Committed", "Available"))
    gone = [f"{t} partition {p} (read up to offset {committed[(t, p)]}, the latest is now "
            f"{available[(t, p)]})" for t, p in sorted(committed)
            if (t, p) in available and available[(t, p)] < committed[(t, p)]]
    named = re.findall(r"Partition (\S+?)-(\d+)'?s? offset was changed from (\d+) to (\d+)",
                       error)
    gone = gone or [f"{t} partition {p} (read up to offset {a}, the latest is now {b})"
                    for t, p, a, b in named]
    where = "; ".join(gone) or ", ".join(topics or []) or "the subscribed topics"
    return (f"expected the offsets not yet read to still be in Kafka, found them gone for "
            f"{where}: the topic was deleted and created again, or its records expired "
            "before they were read. Set source.fail_on_data_loss: false to go on from the "
            "offsets still there (the records in between are not read), or reset the "
            "table's checkpoint to read the topic again")


def _listed_offsets(error: str, label: str) -> dict[tuple[str, int], int]:
    """The offsets Spark's query error lists after ``label`` (``{source: {json}}``)."""
    for line in error.splitlines():
        if line.startswith(label):
            start = line.find(": {", len(label))
            try:
                return _offsets(json.loads(line[start + 2:].rstrip()[:-1]))
            except (ValueError, AttributeError):
                return {}
    return {}


def require_kafka(spark: SparkSession) -> None:
    """Fail with the exact ``--packages`` argument when Spark's Kafka source is missing (a
    spark-submit without it; Databricks' runtime has its own)."""
    if detect_runtime() is Runtime.DATABRICKS:
        return
    if not has_class(spark, KAFKA_SOURCE):
        raise SessionError(
            "expected Spark's Kafka source on the driver's classpath for a Kafka or Event Hubs "
            f"feed, found it missing. Add to spark-submit: --packages {kafka_package()}")
