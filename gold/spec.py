"""The gold table spec: an aggregate of a silver table (by event-time window, by calendar
period, or by its keys alone), or a mart joining a fact to its dimensions.

An aggregate (``conf/tables/gold/store_sales.yaml``)::

    kind: aggregate                     # the default
    description: Revenue per store and hour.
    source: orders                      # silver.orders; or {table: ..., layer: gold}
    event_time: event_time
    watermark: "2 hours"                # rows later than this are dropped (and counted)
    window: {type: tumbling, duration: "1 hour"}
    # or {type: sliding, duration: "1 hour", slide: "15 minutes"}
    # or {type: session, gap: "30 minutes"}
    # or {type: calendar, unit: month}: day, week (from Monday), month, quarter or year, in the
    #    lake's time zone; no watermark, nothing is late, output_mode update
    # or no window: one row per group of group_by, no watermark, output_mode update
    group_by: [store_id]
    aggregates:
      - {name: orders, expr: "count(*)", comment: Orders in the window}
      - {name: revenue, expr: "sum(amount)", comment: Sum of order amounts}
    output_mode: append                 # finalised windows only; update: MERGE as they change
    partition_by: [store_id]            # any output column; window_date is always there
    comments: {store_id: The store}     # column comments for the catalog

Every aggregate table with a window has the columns ``window_start``, ``window_end`` and
``window_date`` (the date of ``window_start``), then the group keys, then the aggregates; one
without a window has the group keys and the aggregates.

A mart (``conf/tables/gold/store_sales_by_region.yaml``) is a catalog view: the fact joined to
its dimensions, evaluated when queried, so a filter on a dimension column prunes the fact's
partitions (dynamic partition pruning) and the answer is never stale::

    kind: mart
    fact: store_sales                   # gold.store_sales; or {table: ..., layer: silver}
    dimensions:                         # none: the fact alone, filtered or grouped
      - {table: stores, on: [store_id], columns: [region, city]}   # silver.stores
      # keys named differently on each side: {fact column: dimension column}
      - {table: airports, on: {dest: faa}, columns: [city]}
    where: "region = 'west'"            # optional: a filter on the joined rows
    group_by: [region]                  # optional, with aggregates: one row per group
    aggregates:
      - {name: revenue, expr: "sum(revenue)"}
    materialize: false                  # true: a Delta table, rebuilt incrementally each run
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveInt, field_validator, model_validator

from framework.columns import Column, Columns, TimeKind, time_kind
from framework.config.checks import Freshness, FreshnessBy, RunCheck, TableCheck, Volume
from framework.config.model import (
    Inputs,
    Layer,
    ProjectConfig,
    Rebuild,
    RebuildMethod,
    SqlKind,
    SqlText,
    Stored,
    Table,
    TableSpec,
)
from framework.config.types import Identifier, Model
from framework.errors import ConfigError, MissingKeyError
from framework.eventtime import check_interval, split_commits_advice
from framework.layers import Kinds

WINDOW_COLUMNS = ("window_start", "window_end", "window_date")
WINDOW_TYPES = ("timestamp", "timestamp", "date")


def _interval(value: str | None, positive: bool = True) -> str | None:
    return value if value is None else check_interval(value, positive=positive)


BUILT_FROM = "medallion.mart.built_from"  # table property: {table: Delta version} last built


class Kind(StrEnum):
    AGGREGATE = "aggregate"  # a streaming aggregate
    MART = "mart"  # a view joining a fact to dimensions


class WindowType(StrEnum):
    TUMBLING = "tumbling"
    SLIDING = "sliding"
    SESSION = "session"
    CALENDAR = "calendar"  # a calendar period: no watermark, nothing is late


class CalendarUnit(StrEnum):
    """A calendar window's period, in the lake's time zone (``spark.sql.session.timeZone``)."""

    DAY = "day"
    WEEK = "week"  # from Monday
    MONTH = "month"
    QUARTER = "quarter"
    YEAR = "year"


class OutputMode(StrEnum):
    APPEND = "append"  # a window is written once, when the watermark passes its end
    UPDATE = "update"  # a window is merged every batch it changes


class JoinType(StrEnum):
    INNER = "inner"
    LEFT = "left"


class WindowSpec(Model):
    """An event-time window: tumbling (duration), sliding (duration, slide), session (gap), or
    a calendar period (unit)."""

    type: WindowType
    duration: str | None = None
    slide: str | None = None
    gap: str | None = None
    unit: CalendarUnit | None = None

    @field_validator("duration", "slide", "gap")
    @classmethod
    def _intervals(cls, value: str | None) -> str | None:
        return _interval(value)

    @model_validator(mode="after")
    def _fields_of_type(self) -> WindowSpec:
        wanted = {WindowType.TUMBLING: {"duration"}, WindowType.SLIDING: {"duration", "slide"},
                  WindowType.SESSION: {"gap"}, WindowType.CALENDAR: {"unit"}}[self.type]
        given = {k for k in ("duration", "slide", "gap", "unit") if getattr(self, k) is not None}
        if given != wanted:
            raise ValueError(f"expected {', '.join(sorted(wanted))} for a {self.type.value} "
                             f"window, found {', '.join(sorted(given)) or 'none'}")
        return self

    @property
    def watermarked(self) -> bool:
        """An event-time window, closed by a watermark (not a calendar period)."""
        return self.type is not WindowType.CALENDAR

    def describe(self) -> str:
        return " ".join(f"{k} {v}" for k, v in (
            ("type", self.type.value), ("duration", self.duration), ("slide", self.slide),
            ("gap", self.gap), ("unit", self.unit and self.unit.value)) if v)


class Aggregate(Model):
    """One output column: an aggregate SQL expression (``sum(amount)``)."""

    name: Identifier
    expr: str = Field(min_length=1)
    comment: str = ""


class TableRef(Model):
    """Another configured table, by short name and layer."""

    table: Identifier
    layer: Layer
    max_files_per_trigger: PositiveInt | None = None


class Dimension(Model):
    """A dimension joined to the fact on ``on``: a column both have (``store_id``), several
    (``[store_id, day]``), or fact columns mapped to the dimension's (``{dest: faa}``);
    ``columns`` are added to the mart (default: all but the keys and ``_`` columns).

    A dimension kept as SCD type 2 (``mode: scd2`` in silver: a row per version) joins each
    fact row to the key's current version, or with ``as_of: <fact column>`` to the version
    valid at that column's value (``__start_at <= value < __end_at``)."""

    table: Identifier
    layer: Layer = Layer.SILVER
    on: dict[Identifier, Identifier] = Field(min_length=1)
    columns: list[Identifier] = Field(default_factory=list)
    how: JoinType = JoinType.INNER
    as_of: Identifier | None = None

    @model_validator(mode="before")
    @classmethod
    def _yaml_on(cls, data: Any) -> Any:
        # YAML 1.1 reads a bare ``on`` key as the boolean true.
        if isinstance(data, dict) and True in data and "on" not in data:
            data = {("on" if k is True else k): v for k, v in data.items()}
        return data

    @field_validator("on", mode="before")
    @classmethod
    def _keys(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {value: value}
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return {v: v for v in value}
        return value

    @property
    def fact_keys(self) -> list[str]:
        return list(self.on)

    @property
    def dim_keys(self) -> list[str]:
        """The dimension's own join columns."""
        return list(self.on.values())


def _with_layer(value: Any, layer: Layer) -> Any:
    """A short table reference (``orders``) or a mapping without a layer, in ``layer``."""
    if isinstance(value, str):
        return {"table": value, "layer": layer}
    if isinstance(value, dict):
        return {"layer": layer, **value}
    return value


class GoldSpec(TableSpec):
    """What both kinds of gold table have: the spec's kind, and optionally a grouping into
    aggregates."""

    layer: ClassVar[Layer] = Layer.GOLD

    kind: Kind
    group_by: list[Identifier] = Field(default_factory=list)
    aggregates: list[Aggregate] = Field(default_factory=list)

    @property
    def output_columns(self) -> list[str]:
        """The columns the grouping makes, in order: the group keys, then the aggregates."""
        return [*self.group_by, *(a.name for a in self.aggregates)]

    def sql_texts(self) -> list[SqlText]:
        return [SqlText(f"aggregates[{i}].expr", SqlKind.EXPRESSION, a.expr)
                for i, a in enumerate(self.aggregates)]

    def _unique_columns(self, problem: Callable[[str, str], None]) -> None:
        out = self.output_columns
        for dup in sorted({c for c in out if out.count(c) > 1}):
            problem("aggregates", f"expected unique output column names, found {dup!r} twice")


class AggregateSpec(GoldSpec):
    """A streaming aggregate of a silver (or gold) table: by event-time window (with a
    watermark), by calendar period of its event time, or by its group keys alone (no window).

    Without a watermark nothing is late and Spark's state keeps one row per group (per period
    and keys): every row counts into its group whenever it arrives, and each batch merges the
    groups it changed (``output_mode: update``, their default)."""

    kind: Literal[Kind.AGGREGATE] = Kind.AGGREGATE
    source: TableRef
    event_time: Identifier | None = None
    watermark: str | None = None
    window: WindowSpec | None = None
    aggregates: list[Aggregate] = Field(min_length=1)
    output_mode: OutputMode
    partition_by: list[Identifier] = Field(default_factory=list)
    comments: dict[Identifier, str] = Field(default_factory=dict)
    checks: list[TableCheck] = Field(default_factory=list)

    @field_validator("source", mode="before")
    @classmethod
    def _short_source(cls, value: Any) -> Any:
        return _with_layer(value, Layer.SILVER)

    @model_validator(mode="before")
    @classmethod
    def _default_output_mode(cls, data: Any) -> Any:
        """Append for an event-time window (each window written once, when final); update
        for a calendar period or no window (nothing is ever final)."""
        if isinstance(data, dict) and "output_mode" not in data:
            window = data.get("window")
            watermarked = isinstance(window, dict) and window.get("type") != "calendar"
            data = {**data, "output_mode": "append" if watermarked else "update"}
        return data

    @field_validator("watermark")
    @classmethod
    def _watermark_interval(cls, value: str | None) -> str | None:
        if value is not None:
            _interval(value, positive=False)
        return value

    @property
    def watermarked(self) -> bool:
        """Grouped by an event-time window closed by the watermark."""
        return self.window is not None and self.window.watermarked

    @property
    def output_columns(self) -> list[str]:
        """The aggregate's columns, in order: the window's, the group keys, the aggregates."""
        window = WINDOW_COLUMNS if self.window else ()
        return [*window, *super().output_columns]

    @property
    def merge_keys(self) -> list[str]:
        """What identifies one output row of an aggregate: its window and its group."""
        window = ["window_start", "window_end"] if self.window else []
        return [*window, *self.group_by]

    def upstream(self) -> list[tuple[Layer, str]]:
        return [(self.source.layer, self.source.table)]

    def row_keys(self) -> list[str]:
        return self.merge_keys

    def run_checks(self) -> list[RunCheck]:
        return [c for c in self.checks if isinstance(c, Freshness | Volume)]

    def column_comments(self) -> dict[str, str]:
        """Each aggregate's comment, then ``comments``."""
        return {**{a.name: a.comment for a in self.aggregates if a.comment}, **self.comments}

    def column_expressions(self) -> dict[str, str]:
        return {a.name: a.expr for a in self.aggregates}

    def column_origins(self) -> dict[str, str] | None:
        """The window's columns from the event time, each group key as it is, each aggregate
        from its expression."""
        window = dict.fromkeys(WINDOW_COLUMNS, self.event_time) \
            if self.window and self.event_time else {}
        return {**window, **{k: k for k in self.group_by}, **self.column_expressions()}

    def event_time_column(self) -> str | None:
        """The end of a row's window (of its period): the newest is the newest event time
        the table has counted, give or take a window."""
        return "window_end" if self.window else None

    def stale_parts(self) -> dict[str, str]:
        """The source, the event time and its watermark, the window, the grouping and each
        aggregate's expression."""
        parts = {"source": f"{self.source.layer.value}.{self.source.table}",
                 "event_time": self.event_time or "", "watermark": self.watermark or "",
                 "window": self.window.describe() if self.window else "",
                 "group_by": ", ".join(self.group_by)}
        for a in self.aggregates:
            parts[f"aggregates[{a.name}]"] = a.expr
        return parts

    def advise(self, table: Table, project: ProjectConfig) -> list[str]:
        src = self.source
        return split_commits_advice(table.full_name, project.env.table_name(
            src.layer, src.table), "aggregates event-time windows with a watermark",
            src.max_files_per_trigger, None)

    def declared_columns(self, table: Table, inputs: Inputs) -> Columns | None:
        """The window's columns, the group keys (typed as the source's), the aggregates (of
        types known when it runs)."""
        source = inputs.get((self.source.layer, self.source.table))
        keys = [(source.get(k) if source else None) or Column(k) for k in self.group_by]
        window = zip(WINDOW_COLUMNS, WINDOW_TYPES, strict=True) if self.window else ()
        return Columns(table.full_name, (
            *(Column(n, t) for n, t in window),
            *(Column(k, c.type) for k, c in zip(self.group_by, keys, strict=True)),
            *(Column(a.name) for a in self.aggregates)))

    def column_problems(self, table: Table, inputs: Inputs) -> list[ConfigError]:
        """The event time and group keys the source does not have; an event time that is not
        a timestamp."""
        source = inputs.get((self.source.layer, self.source.table))
        if source is None:
            return []
        problems = [*(source.missing(f"group_by[{i}]", k) for i, k in enumerate(self.group_by))]
        if self.event_time is None:
            return [p for p in problems if p is not None]
        problems.append(source.missing("event_time", self.event_time))
        column = source.get(self.event_time)
        if column is not None and time_kind(column) is TimeKind.OTHER:
            problems.append(ConfigError(
                f"expected event_time to name a TIMESTAMP column of {source.table} (Spark's "
                f"watermark takes no other), found {column.name} of type {column.type}: make it "
                f"one in the spec of {source.table} (type: timestamp on its column, or expr: "
                f'"to_timestamp({column.name})")', key="event_time"))
        return [p for p in problems if p is not None]

    def check(self, table: Table) -> list[ConfigError]:
        problems = self._window_problems()

        def problem(key: str, message: str) -> None:
            problems.append(ConfigError(message, key=key))

        self._unique_columns(problem)
        for i, c in enumerate(self.checks):
            if not isinstance(c, Freshness | Volume):
                problem(f"checks[{i}].{c.kind.value}", "expected freshness or volume checks "
                        "on a gold aggregate (its rows are one per window and group, computed "
                        f"from its source's), found {c.kind.value}")
            elif getattr(c, "by", None) is FreshnessBy.EVENT_TIME and self.window is None:
                problem(f"checks[{i}].by", "expected a window for a freshness check by event "
                        "time (the newest window's end dates the table), found an aggregate "
                        "without one: give the check by: commit")
        out = self.output_columns
        for key, cols in (("partition_by", self.partition_by),
                          ("comments", list(self.comments))):
            missing = [c for c in cols if c not in out]
            if missing:
                problem(key, f"expected columns among the output columns ({', '.join(out)}), "
                        f"found {', '.join(missing)}")
        return problems

    @property
    def window_buildable(self) -> bool:
        """Whether the window can be planned: no window, or one with its event time and (when
        it closes by a watermark) its watermark. What lacks these is said by `check`."""
        return self.window is None or (
            self.event_time is not None and (self.watermark is not None or not self.watermarked))

    def _window_problems(self) -> list[ConfigError]:
        """What each kind of window needs: an event-time window an event time and a watermark;
        a calendar period an event time, and no watermark; no window, group keys; both of
        these update mode."""
        window, problems = self.window, []
        if window is not None and window.type is WindowType.SESSION \
                and self.output_mode is OutputMode.UPDATE:
            problems.append(ConfigError(
                "expected output_mode append for a session window (a session's bounds move as "
                "it grows, so a row merged by its bounds would leave the shorter session "
                "behind), found update", key="output_mode"))
        what = f"a {window.type.value} window" if window else "an aggregate without a window"
        if window is not None and self.event_time is None:
            problems.append(MissingKeyError(
                f"expected key 'event_time' with {what} (the column whose time places a row "
                "in its window), found it missing", key="event_time"))
        if self.watermarked:
            if self.watermark is None:
                problems.append(MissingKeyError(
                    f"expected key 'watermark' with {what} (how late a row may come and still "
                    "count; a window is final once the watermark has passed it), found it "
                    "missing", key="watermark"))
            return problems
        if self.watermark is not None:
            problems.append(ConfigError(
                f"expected no watermark with {what}: nothing is late, every row counts into "
                "its group whenever it arrives (Spark keeps one row per group), found "
                f"{self.watermark!r}", key="watermark"))
        if self.output_mode is OutputMode.APPEND:
            problems.append(ConfigError(
                f"expected output_mode update with {what} (a group is never final: a later "
                "row may change it), found append", key="output_mode"))
        if window is None and not self.group_by:
            problems.append(ConfigError(
                "expected group_by with an aggregate without a window (the keys of its rows), "
                "found none", key="group_by"))
        return problems


class MartSpec(GoldSpec):
    """A mart: a fact joined to its dimensions, as a view or a materialized table."""

    kind: Literal[Kind.MART]
    fact: TableRef
    dimensions: list[Dimension] = Field(default_factory=list)
    where: str | None = None  # a filter on the joined rows (mart columns), before any grouping
    materialize: bool = False  # a Delta table rebuilt incrementally instead of a view

    @field_validator("fact", mode="before")
    @classmethod
    def _short_fact(cls, value: Any) -> Any:
        return _with_layer(value, Layer.GOLD)

    def upstream(self) -> list[tuple[Layer, str]]:
        return [(self.fact.layer, self.fact.table),
                *((d.layer, d.table) for d in self.dimensions)]

    def stored(self) -> Stored:
        """A Delta table when materialized, else a view."""
        return Stored.DELTA if self.materialize else Stored.VIEW

    def rebuild(self, table: Table) -> Rebuild | None:
        """A materialized mart: its table emptied and what it was built from forgotten, so
        that its next build is whole; a view reads the new rows by itself (None)."""
        if not self.materialize:
            return None
        return Rebuild(RebuildMethod.WHOLE, (table.location,), properties=(BUILT_FROM,))

    def definition(self) -> dict[str, Any]:
        """What decides a materialized mart's rows (not its description or layout): a mart
        built with another is rebuilt whole."""
        return {"fact": self.fact.model_dump(mode="json", include={"table", "layer"}),
                "dimensions": [d.model_dump(mode="json") for d in self.dimensions],
                "where": self.where, "group_by": self.group_by,
                "aggregates": [[a.name, a.expr] for a in self.aggregates]}

    def sql_texts(self) -> list[SqlText]:
        texts = super().sql_texts()
        if self.where:
            texts.append(SqlText("where", SqlKind.EXPRESSION, self.where))
        return texts

    def advise(self, table: Table, project: ProjectConfig) -> list[str]:
        """Why a configured join of this mart cannot prune the fact, one sentence per join.
        None for a materialized mart: its queries read its own table, not the join."""
        if self.materialize:
            return []
        fact = project.table(self.fact.table, self.fact.layer)
        partitions = list(getattr(fact.spec, "partition_by", []) or [])
        advice = []
        for dim in self.dimensions:
            if any(k in partitions for k in dim.fact_keys):
                continue
            layout = f"partitioned by {', '.join(partitions)}" if partitions else "not partitioned"
            dim_name = project.env.table_name(dim.layer, dim.table)
            advice.append(
                f"{table.full_name} joins {fact.full_name} to {dim_name} on "
                f"{', '.join(dim.fact_keys)}, "
                f"but {fact.full_name} is {layout}: a filter on {dim.table} cannot prune the "
                f"fact's partitions (dynamic partition pruning skips partitions of the join key, "
                f"nothing finer); partition {fact.name} by {dim.fact_keys[0]} "
                f"(partition_by in {fact.source_file})")
        return advice

    def declared_columns(self, table: Table, inputs: Inputs) -> Columns | None:
        """The grouping's columns, or the join's: the fact's, then each dimension's taken;
        None when a table it joins has columns not known."""
        joined = self._joined(inputs)
        if joined is None:
            return None
        if self.group_by or self.aggregates:
            keys = [joined.get(k) or Column(k) for k in self.group_by]
            return Columns(table.full_name, (*(Column(k, c.type) for k, c in zip(
                self.group_by, keys, strict=True)), *(Column(a.name) for a in self.aggregates)))
        return Columns(table.full_name, joined.fields)

    def _joined(self, inputs: Inputs) -> Columns | None:
        """The join's columns (as :class:`gold.mart.MartPlan` takes them), or None."""
        fact = inputs.get((self.fact.layer, self.fact.table))
        dims = [inputs.get((d.layer, d.table)) for d in self.dimensions]
        if fact is None or any(d is None for d in dims):
            return None
        fields = list(fact.fields)
        for dim, columns in zip(self.dimensions, dims, strict=True):
            assert columns is not None
            wanted = dim.columns or [c for c in columns.names if c not in dim.dim_keys
                                     and not c.startswith("_")]
            taken = {f.name for f in fields}
            fields += [c for c in columns.fields if c.name in wanted and c.name not in taken]
        return Columns("the mart's join", tuple(fields))

    def column_problems(self, table: Table, inputs: Inputs) -> list[ConfigError]:
        """The join keys and columns the fact and dimensions do not have (of those whose
        columns are known), the group keys the join does not give."""
        fact = inputs.get((self.fact.layer, self.fact.table))
        problems = []
        for i, dim in enumerate(self.dimensions):
            columns = inputs.get((dim.layer, dim.table))
            if fact is not None:
                problems += [fact.missing(f"dimensions[{i}].on", k) for k in dim.fact_keys]
                if dim.as_of:
                    problems.append(fact.missing(f"dimensions[{i}].as_of", dim.as_of))
            if columns is not None:
                problems += [columns.missing(f"dimensions[{i}].{key}", c) for key, names in (
                    ("on", dim.dim_keys), ("columns", dim.columns)) for c in names]
        joined = self._joined(inputs)
        if joined is not None and not any(problems):
            problems += [joined.missing(f"group_by[{i}]", k) for i, k in enumerate(self.group_by)]
        return [p for p in problems if p is not None]

    def check(self, table: Table) -> list[ConfigError]:
        problems: list[ConfigError] = []

        def problem(key: str, message: str) -> None:
            problems.append(ConfigError(message, key=key))

        if self.group_by and not self.aggregates:
            problem("group_by", "expected aggregates with group_by on a mart (the values to "
                    f"compute per group), found group_by {self.group_by} alone")
        self._unique_columns(problem)
        return problems


# The spec models of gold's kinds of table, chosen by the spec's ``kind`` key.
GOLD_KINDS = Kinds(specs={Kind.AGGREGATE: AggregateSpec, Kind.MART: MartSpec},
                   default=Kind.AGGREGATE)
