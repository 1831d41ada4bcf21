"""Silver: a typed, checked, deduplicated copy of an upstream table.

The query reads the upstream Delta table as a stream, selects, renames and casts columns
(``try_cast``: a value that does not fit is not an error but a quarantined row, named
``cast:<column>``), applies custom transforms, and deduplicates with
``withWatermark(event_time, delay).dropDuplicatesWithinWatermark(keys)``.

Dedup, plainly: a row is dropped when a row with the same keys was seen and its event time is within
``delay`` of the newest event time seen so far. The state keeps a key until the watermark (newest
event time minus ``delay``) passes the key's event time plus ``delay``, so it holds about two
delays' worth of keys and stops growing. A duplicate arriving after its key left the state passes
(it is no duplicate any more, as far as silver knows), and a row whose event time is already behind
the watermark on arrival is dropped as late (counted from the state operator's metrics).

A table with no expectation, no cast and plain appends is written by Delta's streaming sink
(exactly once by itself: it records the query id and batch id in the commit), its rows counted
by an observed metric instead of a Python call per batch. Otherwise each micro-batch is written
in ``foreachBatch`` by :mod:`silver.batch`, and its outcome folded into the run here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, cast

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter
from pyspark.sql.types import (
    BooleanType,
    DataType,
    NullType,
    StructField,
    StructType,
)

from framework.changes import SCD2_COLUMNS, log_schema, table_schema
from framework.config.model import Layer, Table
from framework.delta import (
    add_missing_columns,
    create_table,
    is_delta_table,
    read_table,
    schema_ddl,
    sql_string,
)
from framework.errors import ConfigError, JobError, TableModeError
from framework.history import BatchStatus, run_row
from framework.identifiers import quote, quote_all, quote_name
from framework.job import StreamingJob, TableRunSummary
from framework.listener import BatchProgress
from framework.microbatch import Outcome, TableBatches
from framework.quality import ensure_quality_table
from framework.sqlcheck import analysis_problem, not_event_time
from framework.staleness import initial as spec_properties
from framework.staleness import record as record_spec
from silver.batch import (
    BATCH_ID,
    CAST_ERRORS,
    QUARANTINE_SCHEMA,
    SOURCE_ROW,
    BatchWriter,
    Refined,
    batch_rules,
    change_applier,
    keyed_changes,
    quarantines,
)
from silver.held import create_held, release
from silver.snapshots import SnapshotApplier
from silver.spec import (
    SPLIT_SNAPSHOTS,
    ColumnSpec,
    SilverTableSpec,
    TableFormat,
    WriteMode,
    load_transform,
)


def _source(column: ColumnSpec) -> Column:
    return F.expr(column.expr) if column.expr else F.col(column.from_ or column.name)


def select_columns(df: DataFrame, spec: SilverTableSpec, *,
                   source_row: bool = False) -> DataFrame:
    """The spec's columns (all data columns of the source when none are listed), with the
    names of columns whose value did not fit its type in ``_cast_errors``; with
    ``source_row``, the source's row as it came too (``_source_row``: a struct, for the
    quarantine, see :mod:`silver.quarantine`)."""
    kept = [F.struct(*[F.col(quote(c)) for c in df.columns]).alias(SOURCE_ROW)] \
        if source_row else []
    if not spec.columns:
        return df.select(*[c for c in df.columns if not c.startswith("_")], *kept)
    selected: list[Column] = []
    failures: list[Column] = []
    for c in spec.columns:
        base = _source(c)
        if c.type:
            typed = base.try_cast(c.type)
            failures.append(F.when(base.isNotNull() & typed.isNull(), F.lit(f"cast:{c.name}")))
            base = typed
        selected.append(base.alias(c.name))
    if any(c.type for c in spec.columns):
        errors = F.filter(F.array(*failures), lambda x: x.isNotNull())
        selected.append(errors.alias(CAST_ERRORS))
    return df.select(*selected, *kept)


def custom_transforms(df: DataFrame, spec: SilverTableSpec, table: str) -> DataFrame:
    """``df`` through the spec's own transforms (Python functions), in their order."""
    for path in spec.transforms:
        result = load_transform(path)(df)
        if not isinstance(result, DataFrame):
            raise JobError(table, "transform", f"expected {path} to return a DataFrame, found "
                           f"{type(result).__name__}")
        df = result
    return df


def planned_schema(spark: SparkSession, table: Table, inputs: Mapping[tuple[Layer, str],
                   StructType]) -> tuple[StructType | None, list[ConfigError]]:
    """The silver table's schema from its source's (``framework.layers.Planner``): each column
    resolved against the source, then each rule against the columns. A column that does not
    resolve is reported and planned of unknown type, so the rules and the tables downstream are
    still checked. None when the source's schema is unknown or a transform may change columns."""
    spec = cast(SilverTableSpec, table.spec)
    source = inputs.get((spec.source.layer, spec.source.table))
    if source is None:
        return None, []
    df = spark.createDataFrame([], source)
    name = table.env.table_name(spec.source.layer, spec.source.table)
    problems = []
    failed = []  # planned as columns of unknown type: any use of them resolves
    for i, c in enumerate(spec.columns):
        reason = analysis_problem(lambda col: df.select(_source(col)), c)
        if reason:
            key, text = ("expr", c.expr) if c.expr else ("from" if c.from_ else "name",
                                                          c.from_ or c.name)
            problems.append(ConfigError(f"expected a column or expression over the columns of "
                                        f"{name}, found {text!r}: {reason}",
                                        key=f"columns[{i}].{key}"))
            failed.append(StructField(c.name, NullType()))
        elif c.type and _not_a_type(c.type):  # the parse step reports it
            failed.append(StructField(c.name, NullType()))
    if spec.transforms:
        return None, problems
    try:
        out = select_columns(df, spec) if not failed else spark.createDataFrame(
            [], StructType([_planned_field(df, c, failed) for c in spec.columns]))
    except AnalysisException:  # a column from the source's hidden _metadata: known at run time
        return None, problems
    problems += _row_problems(spec, table, out)
    planned = StructType([f for f in out.schema.fields if f.name != CAST_ERRORS])
    changes, keyed = spec.changes, keyed_changes(spec)
    if changes and keyed and not changes.check_settings(spec.mode.value) \
            and not changes.check_columns(spec.mode.value, set(planned.names)):
        planned = table_schema(keyed, planned)
    return planned, problems


def _row_problems(spec: SilverTableSpec, table: Table, out: DataFrame) -> list[ConfigError]:
    """The problems of what is resolved against the table's rows ``out``: each rule, the
    conditions of changes (``deletes``, ``truncates``), the event time's type."""
    problems = []
    conditions = [(f"expectations[{i}].rule", "rule", e.rule)
                  for i, e in enumerate(spec.expectations)]
    if spec.changes:
        conditions += [(t.key, "condition", t.text) for t in spec.changes.sql_texts(
            spec.mode.value)]
    for key, what, text in conditions:
        reason = analysis_problem(out.selectExpr, text)
        if reason:
            problems.append(ConfigError(f"expected a {what} over the columns of "
                                        f"{table.full_name}, found {text!r}: {reason}", key=key))
            continue
        kind = out.selectExpr(text).schema.fields[0].dataType
        if not isinstance(kind, BooleanType | NullType):
            problems.append(ConfigError(f"expected a {what} that is true or false for each row "
                                        f"(a boolean), found {text!r} of type "
                                        f"{kind.simpleString()}", key=key))
    found = not_event_time(out, spec.event_time) if spec.event_time else None
    if found:
        problems.append(ConfigError(
            f"expected event_time to name a TIMESTAMP column (Spark's watermark takes no "
            f"other), found {spec.event_time} of type {found}: give its column type: "
            f'timestamp, or expr: "to_timestamp({spec.event_time})"', key="event_time"))
    return problems


def _not_a_type(text: str) -> bool:
    try:
        DataType.fromDDL(text)
    except Exception:
        return True
    return False


def _planned_field(df: DataFrame, column: ColumnSpec, failed: list[StructField]) -> StructField:
    """The planned field of one column when some columns failed to resolve: theirs (of
    unknown type) as planned in ``failed``, the others as Spark resolves them."""
    for f in failed:
        if f.name == column.name:
            return f
    base = _source(column)
    return df.select((base.try_cast(column.type) if column.type else base)
                     .alias(column.name)).schema.fields[0]


class SilverJob(StreamingJob):
    """Refines one upstream table into a silver table."""

    layer: ClassVar[Layer] = Layer.SILVER

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec = cast(SilverTableSpec, self.table.spec)
        self.quarantine_table = self.table.qualified("quarantine")
        self.quarantine_location = self.table.companion_location("quarantine")
        self.totals: Counter[str] = Counter()
        self.rule_totals: Counter[str] = Counter()
        self._typed = any(c.type for c in self.spec.columns)
        self.state_rows_by_batch: dict[int, int] = {}
        self.batch_counts: dict[int, dict[str, int]] = {}  # per batch: records, written...
        self.released_at: datetime | None = None  # when held rows were released, if they were
        # No rule, no cast, no watermark, plain append to Delta: Delta's streaming sink (see the
        # module's text). A table with a watermark checks each batch's event-time span instead.
        self.direct = (not batch_rules(self.spec) and not self._typed and not self.spec.dedup
                       and self.spec.mode is WriteMode.APPEND
                       and self.spec.format is TableFormat.DELTA)
        # Changes with removals or versions go through a change log (framework.changes).
        self.changes_table = self.table.qualified("changes")
        self.applier = change_applier(self.table)
        self.log_location = self.applier.log_location if self.applier else None

    # ------------------------------------------------------------------ steps
    def read(self) -> DataFrame:
        src = self.spec.source
        if isinstance(self.applier, SnapshotApplier):  # a snapshot is taken whole, from the
            # micro-batch that holds it
            return self.read_table_stream(
                src.layer, src.table, max_files=src.max_files_per_trigger,
                max_bytes=src.max_bytes_per_trigger, whole_commits=True,
                split_reason=SPLIT_SNAPSHOTS)
        return self.read_table_stream(src.layer, src.table, max_files=src.max_files_per_trigger,
                                      max_bytes=src.max_bytes_per_trigger,
                                      whole_commits=self.spec.dedup is not None)

    def transform(self, df: DataFrame) -> DataFrame:
        df = custom_transforms(self._columns(df), self.spec, self.table.full_name)
        if self.spec.dedup:
            assert self.spec.event_time is not None  # checked with the config
            df = df.withWatermark(self.spec.event_time, self.spec.dedup.delay)
            df = df.dropDuplicatesWithinWatermark(self.spec.dedup.keys)
        return df

    def write(self, df: DataFrame) -> DataStreamWriter:
        for i, e in enumerate(self.spec.expectations):  # before anything is written
            kind = df.selectExpr(e.rule).schema.fields[0].dataType
            if not isinstance(kind, BooleanType | NullType):
                raise ConfigError(f"expected a rule that is true or false for each row (a "
                                  f"boolean), found {e.rule!r} of type {kind.simpleString()}",
                                  file=self.table.source_file, key=f"expectations[{i}].rule")
        self._create_tables(StructType([f for f in df.schema.fields
                                        if f.name not in (CAST_ERRORS, SOURCE_ROW)]))
        if self.spec.holds:  # before the query: rows whose keys arrived since the last run
            self.totals.update(release(self.spark, self.table, self.spec.references,
                                       self.quarantine_location, self.log))
            self.released_at = datetime.now(UTC)
        if self.direct:
            return self.delta_sink(df, self.spec.partition_by)
        return self.foreach_step(df, TableBatches(BatchWriter, self.table, self.replayable,
                                                  self.log_context))

    def fold(self, outcome: Outcome) -> None:
        assert isinstance(outcome, Refined)
        counted = {"records": outcome.records, "written": outcome.written,
                   "quarantined": outcome.quarantined, "dropped": outcome.dropped,
                   "held": outcome.held}
        self.batch_counts[outcome.batch_id] = counted
        self.totals.update(counted, rows_at_risk=outcome.rows_at_risk)
        self.rule_totals.update(outcome.rule_counts)

    # ------------------------------------------------------------------ columns and tables
    def _columns(self, df: DataFrame) -> DataFrame:
        return select_columns(df, self.spec, source_row=self._quarantines and not self.direct)

    def _create_tables(self, schema: StructType) -> None:
        spec = self.table.spec
        rows = schema
        if self.applier:
            schema = table_schema(self.applier.changes, rows)
        # A refresh emptied the tables: made again if the spec changed their columns
        rebuild = self.ctx.operation is not None
        if self.spec.format is not TableFormat.PARQUET and not rebuild \
                and is_delta_table(self.spark, self.table.location):
            # (whether the catalog knows it or not: a table registered again over its folder)
            self._check_mode()
        if self.applier and self.log_location and not create_table(
                self.spark, self.changes_table, log_schema(self.applier.changes, rows),
                self.log_location,
                comment=f"Change log of {self.table.name}: its events, by key",
                rebuild=rebuild) and not self.spec.columns:
            # a column the source gained goes into the log too, which takes the batch's events
            add_missing_columns(self.spark, self.log_location,
                                log_schema(self.applier.changes, rows))
        if self.spec.format is TableFormat.PARQUET:
            self._create_bucketed(schema)
        elif not create_table(self.spark, self.table.full_name, schema, self.table.location,
                              partition_by=self.spec.partition_by,
                              cluster_by=self.spec.cluster_by, comment=spec.description,
                              new_properties=spec_properties(self.spec.stale_parts()),
                              rebuild=rebuild) \
                and not self.spec.columns:
            # Every source column is taken: one the source gained since (a feed's new column)
            # is added here too, nullable, at the end; earlier rows have null.
            added = add_missing_columns(self.spark, self.table.location, schema)
            if added:
                self.log.info("silver.schema.columns_added", columns=added)
        if self.spec.format is not TableFormat.PARQUET:
            # what its rows are computed with, before one is written (for medallion validate;
            # a table made now has it from its creation)
            record_spec(self.spark, self.table.location, self.spec.stale_parts())
        if self.spec.checks:
            ensure_quality_table(self.spark, self.table.env)
        if self.spec.holds:
            create_held(self.spark, self.table, schema)
        if self._quarantines and not create_table(
                self.spark, self.quarantine_table, QUARANTINE_SCHEMA, self.quarantine_location,
                comment=f"Rows of {self.table.name} that broke a quarantine rule"):
            # (one made before quarantined rows had a state and their source row)
            add_missing_columns(self.spark, self.quarantine_location, QUARANTINE_SCHEMA)

    def _check_mode(self) -> None:
        """Raises :class:`TableModeError` when the table (at its location) was written in another
        mode than its spec asks: with SCD2's versions or without, or without a change log (none, or
        one with no event, while the table has rows). Before any table is created or written."""
        existing = read_table(self.spark, self.table.location)
        versions = set(SCD2_COLUMNS) <= set(existing.columns)
        scd2 = self.applier is not None and self.applier.scd2
        found = ""
        if versions != scd2:
            found = "with SCD type 2 versions" if versions else "without SCD type 2 versions"
        elif self.log_location and (
                not is_delta_table(self.spark, self.log_location)
                or read_table(self.spark, self.log_location).isEmpty()
        ) and not existing.isEmpty():  # (the table read last: its log is rarely empty)
            found = "without a change log"
        if found:
            want = f"mode {self.spec.mode.value}" + (", with a change log" if self.log_location
                                                     else "")
            folders = [self.table.location, *([self.log_location] if self.log_location else []),
                       *([self.quarantine_location] if self._quarantines else [])]
            raise TableModeError(
                self.table.full_name, "create tables",
                f"expected a table written in {want}, found one written {found}: its rows "
                f"cannot be carried on in the new mode. Rebuild it from its source: 'medallion "
                f"refresh {self.layer.value}.{self.table.name} --downstream' (it sets its "
                f"checkpoint, {self.table.checkpoint}, aside, and empties {', '.join(folders)})")

    def _create_bucketed(self, schema: StructType) -> None:
        if self.spark.catalog.tableExists(self.table.full_name):
            return
        parts = [
            f"CREATE TABLE IF NOT EXISTS {quote_name(self.table.full_name)} ({schema_ddl(schema)}, "
            f"{quote(BATCH_ID)} BIGINT) USING parquet PARTITIONED BY ({quote(BATCH_ID)})",
            f"CLUSTERED BY ({quote_all(self.spec.bucket_by)})",
        ]
        if self.spec.sort_by:
            parts.append(f"SORTED BY ({quote_all(self.spec.sort_by)})")
        parts.append(f"INTO {self.spec.buckets} BUCKETS")
        parts.append(f"LOCATION {sql_string(self.table.location)}")
        if self.spec.description:
            parts.append(f"COMMENT {sql_string(self.spec.description)}")
        self.spark.sql(" ".join(parts))

    @property
    def _quarantines(self) -> bool:
        return quarantines(self.spec)

    def batch_figures(self, progress: BatchProgress) -> dict[str, int | None]:
        figures = super().batch_figures(progress)
        counted = self.batch_counts.get(progress.batch_id)
        records = counted["records"] if counted else figures.get("rows_out")
        if counted:
            figures |= {"rows_out": counted["written"], "quarantined": counted["quarantined"]}
            if self.spec.holds:
                figures["held"] = counted["held"]
        if self.spec.dedup and records is not None:
            figures["duplicates_dropped"] = \
                progress.input_rows - progress.rows_dropped_by_watermark - records
        return figures

    def history_rows(self, summary: TableRunSummary) -> list[dict[str, Any]]:
        """Its batches' rows, and one for the held rows the run released (or quarantined, held
        too long) before its query: a release belongs to no batch, and happens in a run that
        has none as well."""
        rows = super().history_rows(summary)
        released, expired = self.totals["released_rows"], self.totals["expired_rows"]
        if self.released_at is not None and (released or expired):
            rows.insert(0, run_row(
                run_id=self.ctx.run_id, table=self.table.full_name, layer=self.layer.value,
                trigger=self.recorder.trigger, status=BatchStatus.COMMITTED,
                started_at=self.started_at, ended_at=self.released_at, released=released,
                quarantined=expired, operation=self.ctx.operation))
        return rows

    # ------------------------------------------------------------------ after the query
    def finish(self) -> dict[str, int]:
        progress = self.progress
        rows_in = sum(p.input_rows for p in progress)
        late = sum(p.rows_dropped_by_watermark for p in progress)
        if self.direct:
            written = self.sink_rows(progress)
            self.totals.update(records=written, written=written)
        records = self.totals["records"]
        self.state_rows_by_batch = {p.batch_id: p.state_rows for p in progress}
        duplicates = rows_in - late - records if self.spec.dedup else 0
        counts = {
            "rows_in": rows_in,
            "rows_out": self.totals["written"],
            "duplicates_dropped": duplicates,
            "late_rows_dropped": late,
            "dropped_rows": self.totals["dropped"],
            "quarantined_rows": self.totals["quarantined"],
            **({"held_rows": self.totals["held"], "released_rows": self.totals["released_rows"],
                "expired_rows": self.totals["expired_rows"]} if self.spec.holds else {}),
            "state_rows": progress[-1].state_rows if progress else 0,
            **({"rows_at_risk": self.totals["rows_at_risk"]} if self.spec.dedup else {}),
            **{f"rule:{k}": v for k, v in sorted(self.rule_totals.items())},
        }
        self.log.info("silver.run.counted", **counts)
        return counts
