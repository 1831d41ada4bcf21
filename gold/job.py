"""Gold: streaming aggregates, and marts that join a fact to its dimensions.

An aggregate reads a silver table as a stream, sets the watermark on its event time and groups
by an event-time window (``window`` for tumbling and sliding windows, ``session_window``) and
the spec's keys; or, with no watermark, groups by a calendar period of its event time
(``date_trunc`` in the session's time zone, the period's end by ``timestampadd``, so a month
or a day across a change of clock is one period) or by the keys alone:

- ``output_mode: append`` writes each window once, when the watermark passes its end (for a
  session, its last event plus the gap), through Delta's streaming sink (exactly once);
- ``output_mode: update`` merges every window each batch it changes, by window and keys
  (:mod:`framework.changes`, with no sequence: the batch's row replaces the window's); the
  MERGE sets the window's current values, so a replayed batch writes the same row again.

Late rows: Spark keeps two watermarks per micro-batch, the previous batch's for late rows and
the current one for finalising windows. A row whose window ended at or before the previous
batch's watermark is excluded, counted from the state operator's metrics (``late_groups_dropped``:
after the batch's partial aggregation, so several late rows of one window and key in one batch
count once). A row a little less late still counts into its window, even one finalised in the
same batch.

Without a watermark no row is late and Spark's state keeps every group: one row per period
and keys, which a batch reads back to add its rows to. Such an aggregate is written in update
mode only (a group is never final).

Marts, the fact joined to its dimensions, are :mod:`gold.mart`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, cast

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter
from pyspark.sql.types import DateType, NullType, StructField, StructType, TimestampType

from framework.changes import ChangeApplier, KeyedChanges
from framework.config.model import Layer, Table
from framework.delta import CHANGE_FEED, create_table
from framework.errors import ConfigError
from framework.eventtime import describe_seconds, interval_seconds
from framework.identifiers import quote
from framework.job import StreamingJob
from framework.listener import BatchProgress
from framework.logging import get_logger
from framework.microbatch import Outcome
from framework.sqlcheck import grouping_problems, not_event_time
from framework.staleness import initial as spec_properties
from framework.staleness import record as record_spec
from gold.spec import AggregateSpec, CalendarUnit, OutputMode, WindowType

DEFAULT_COMMENTS = {
    "window_start": "Start of the event-time window (inclusive)",
    "window_end": "End of the event-time window (exclusive)",
    "window_date": "Date of window_start",
}


def _instant(text: str | None) -> datetime | None:
    """An instant of Spark's progress report (``2026-11-01T08:00:00.000Z``)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def planned_schema(spark: SparkSession, table: Table, inputs: Mapping[tuple[Layer, str],
                   StructType]) -> tuple[StructType | None, list[ConfigError]]:
    """An aggregate's event time, keys and aggregates resolved against its source's schema, and
    its own schema derived (``framework.layers.Planner``); None when the source's is unknown."""
    spec = cast(AggregateSpec, table.spec)
    src = spec.source
    source = inputs.get((src.layer, src.table))
    if source is None:
        return None, []
    df = spark.createDataFrame([], source)
    name = table.env.table_name(src.layer, src.table)
    columns = [("event_time", spec.event_time)] if spec.event_time else []
    columns += [(f"group_by[{i}]", key) for i, key in enumerate(spec.group_by)]
    problems = grouping_problems(df, name, columns, [
        (f"aggregates[{i}].expr", a.expr) for i, a in enumerate(spec.aggregates)])
    found = spec.event_time and not_event_time(df, spec.event_time)
    if found:
        problems.append(ConfigError(
            f"expected event_time to name a TIMESTAMP column of {name} (Spark's watermark "
            f"takes no other), found {spec.event_time} of type {found}: make it one in the "
            f'spec of {name} (type: timestamp on its column, or expr: "to_timestamp(...)")',
            key="event_time"))
    # a window the spec's own check refuses is said there, and not built here
    try:
        if not problems and spec.window_buildable:
            return aggregate_windows(df, spec).schema, problems
    except AnalysisException:  # an unknown type (an interval, say): known at run time
        return None, problems
    # Planned with what resolves; a key or aggregate that does not is a column of unknown
    # type, so the tables downstream are still checked.
    failed = {p.key for p in problems}
    fields = [StructField("window_start", TimestampType()),
              StructField("window_end", TimestampType()),
              StructField("window_date", DateType())] if spec.window else []
    fields += [df.schema[k] if f"group_by[{i}]" not in failed else StructField(k, NullType())
               for i, k in enumerate(spec.group_by)]
    fields += [df.groupBy().agg(F.expr(a.expr).alias(a.name)).schema[0]
               if f"aggregates[{i}].expr" not in failed else StructField(a.name, NullType())
               for i, a in enumerate(spec.aggregates)]
    return StructType(fields), problems


def aggregate_windows(df: DataFrame, spec: AggregateSpec) -> DataFrame:
    """``df`` grouped by the spec's window (if any) and keys into its aggregates, with the
    window's start, end and date first (the aggregate's columns)."""
    aggregates = [F.expr(a.expr).alias(a.name) for a in spec.aggregates]
    w = spec.window
    if w is None:
        return df.groupBy(*spec.group_by).agg(*aggregates)
    assert spec.event_time  # checked with the config
    window: Column
    if w.type is WindowType.CALENDAR:
        window = calendar_window(spec.event_time, cast(CalendarUnit, w.unit))
    else:
        assert spec.watermark  # checked with the config
        df = df.withWatermark(spec.event_time, spec.watermark)
        if w.type is WindowType.SESSION:
            window = F.session_window(spec.event_time, cast(str, w.gap))
        elif w.type is WindowType.SLIDING:
            window = F.window(spec.event_time, cast(str, w.duration), cast(str, w.slide))
        else:
            window = F.window(spec.event_time, cast(str, w.duration))
    grouped = df.groupBy(window.alias("window"), *spec.group_by)
    return grouped.agg(*aggregates).select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        F.to_date("window.start").alias("window_date"),
        *spec.group_by,
        *[a.name for a in spec.aggregates],
    )


def calendar_window(event_time: str, unit: CalendarUnit) -> Column:
    """The calendar period of ``event_time`` in the session's time zone, as Spark's window
    struct (``start``, ``end``): the period's first instant and the next period's."""
    start = f"date_trunc('{unit.value}', {quote(event_time)})"
    return F.expr(f"named_struct('start', {start}, "
                  f"'end', timestampadd({unit.value.upper()}, 1, {start}))")


@dataclass(frozen=True)
class Merged(Outcome):
    """A batch's windows merged into the table."""

    inserted: int = 0
    updated: int = 0


@dataclass(frozen=True)
class WindowMerge:
    """Writes a batch of an aggregate in update mode: MERGE its windows (one row per window
    and keys: the aggregate's current values) into the table at ``location``; a replayed
    batch sets the same values again. Its own writer factory (it needs no session)."""

    location: str
    merge_keys: tuple[str, ...]
    log_context: Mapping[str, Any]

    def __call__(self, spark: SparkSession) -> WindowMerge:
        return self

    def write(self, batch: DataFrame, batch_id: int) -> Merged:
        log = get_logger(**self.log_context, batch_id=batch_id)
        log.debug("gold.batch.merging")
        metrics = ChangeApplier(KeyedChanges(self.merge_keys), self.location).apply(batch)
        merged = Merged(batch_id, inserted=int(metrics.get("num_inserted_rows", 0)),
                        updated=int(metrics.get("num_updated_rows", 0)))
        log.info("gold.batch.merged", windows_inserted=merged.inserted,
                 windows_updated=merged.updated)
        return merged


class AggregateJob(StreamingJob):
    """A windowed aggregate of a silver table, written to a gold Delta table."""

    layer: ClassVar[Layer] = Layer.GOLD

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec = cast(AggregateSpec, self.table.spec)
        self.merged: dict[str, int] = {"inserted": 0, "updated": 0}
        self.merged_by_batch: dict[int, int] = {}  # windows inserted or updated

    # ------------------------------------------------------------------ steps
    def read(self) -> DataFrame:
        src = self.spec.source
        # a watermark needs whole commits (framework.eventtime); a group without one does not
        return self.read_table_stream(src.layer, src.table, max_files=src.max_files_per_trigger,
                                      whole_commits=self.spec.watermarked)

    def transform(self, df: DataFrame) -> DataFrame:
        return aggregate_windows(df, self.spec)

    def write(self, df: DataFrame) -> DataStreamWriter:
        self._create_table(df.schema)
        if self.spec.output_mode is OutputMode.APPEND:
            return self.delta_sink(df, self.spec.partition_by)
        # the value: pyspark 4.0's outputMode refuses a str subclass (an enum member)
        return self.foreach_step(df, WindowMerge(self.table.location, tuple(self.spec.merge_keys),
                                                 self.log_context),
                                 output_mode=OutputMode.UPDATE.value)

    def fold(self, outcome: Outcome) -> None:
        assert isinstance(outcome, Merged)
        self.merged["inserted"] += outcome.inserted
        self.merged["updated"] += outcome.updated
        self.merged_by_batch[outcome.batch_id] = outcome.inserted + outcome.updated

    def on_batch(self, progress: BatchProgress) -> None:
        """Warn about a batch whose event time spans more than the watermark's delay (from
        Spark's event-time statistics of the batch's rows): a window it both fills and
        finalises counts rows that, read in a later batch, would have been late."""
        low, high = _instant(progress.event_time_min), _instant(progress.event_time_max)
        if low is None or high is None or self.spec.watermark is None:
            return
        span = (high - low).total_seconds()
        if span > interval_seconds(self.spec.watermark):
            self.log.warning("gold.batch.wide_event_time", batch_id=progress.batch_id,
                             span=describe_seconds(span), watermark=self.spec.watermark,
                             input_rows=progress.input_rows,
                             reason="the batch spans more event time than the watermark: "
                                    "rows it read more than the watermark behind its newest "
                                    "were counted because they came in the same batch")

    def batch_figures(self, progress: BatchProgress) -> dict[str, int | None]:
        figures = super().batch_figures(progress)
        if progress.batch_id in self.merged_by_batch:
            figures["rows_out"] = self.merged_by_batch[progress.batch_id]
        return figures

    def finish(self) -> dict[str, int]:
        progress = self.progress
        late = sum(p.rows_dropped_by_watermark for p in progress)
        counts = {"late_groups_dropped": late,
                  "state_rows": progress[-1].state_rows if progress else 0}
        if self.spec.output_mode is OutputMode.APPEND:
            counts["rows_out"] = counts["windows_written"] = self.sink_rows(progress)
        else:
            counts["windows_inserted"] = self.merged["inserted"]
            counts["windows_updated"] = self.merged["updated"]
            counts["rows_out"] = self.merged["inserted"] + self.merged["updated"]
        self.log.info("gold.run.counted", **counts)
        return counts

    # ------------------------------------------------------------------ helpers
    def _create_table(self, schema: StructType) -> None:
        """The table with a comment on the table and on every column."""
        comments = {**DEFAULT_COMMENTS,
                    **{k: f"Group key {k}" for k in self.spec.group_by},
                    **{a.name: a.comment or f"{a.expr} over the window"
                       for a in self.spec.aggregates},
                    **self.spec.comments}
        commented = StructType([
            StructField(f.name, f.dataType, f.nullable, {"comment": comments[f.name]})
            for f in schema.fields
        ])
        # The change data feed tells a materialized mart over this table which partitions
        # changed (gold.mart); on an append it costs nothing.
        create_table(self.spark, self.table.full_name, commented, self.table.location,
                     partition_by=self.spec.partition_by, properties={CHANGE_FEED: "true"},
                     new_properties=spec_properties(self.spec.stale_parts()),
                     rebuild=self.ctx.operation is not None,
                     comment=self.spec.description or f"Windowed aggregate of "
                     f"{self.spec.upstream()[0][0].value}.{self.spec.upstream()[0][1]}")
        record_spec(self.spark, self.table.location, self.spec.stale_parts())
