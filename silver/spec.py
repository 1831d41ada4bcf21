"""The silver table spec: how a bronze (or silver) table is typed, checked, deduplicated and
laid out.

A complete example (``conf/tables/silver/orders.yaml``)::

    description: Orders, typed and deduplicated.
    source: orders                      # bronze.orders; or {table: customers, layer: silver}
    columns:                            # omitted: every column of the source but _metadata
      - {name: order_id}
      - {name: customer_id}
      - {name: event_time}
      - {name: quantity, type: int}     # a value that does not fit is quarantined
      - {name: amount, expr: "quantity * unit_price", type: "decimal(12,2)"}
      - {name: order_date, expr: "to_date(event_time)"}
    transforms: ["my_package.orders:normalise_status"]   # DataFrame -> DataFrame
    event_time: event_time
    expectations:
      - {name: positive_quantity, rule: "quantity > 0", action: quarantine}
      - {name: known_customer, rule: "customer_id IS NOT NULL", action: drop}
      - {name: sane_time, rule: "event_time >= '2000-01-01'", action: fail}
    dedup: {keys: [order_id], delay: "1 hour"}
    partition_by: [order_date]          # or cluster_by: [customer_id]

Expectation semantics: a rule holds when it evaluates to TRUE; FALSE and NULL break it (write
``coalesce(rule, true)`` to let NULL pass).
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import Field, PositiveInt, field_validator, model_validator

from framework.columns import Column, Columns, TimeKind, normal_type, time_kind
from framework.config.checks import (
    HELD,
    BatchCheck,
    CheckAction,
    Freshness,
    FreshnessBy,
    References,
    RunCheck,
    TableCheck,
    Unique,
    Volume,
)
from framework.config.model import (
    Inputs,
    Layer,
    ProjectConfig,
    Rebuild,
    RebuildMethod,
    RowRule,
    RuleKind,
    SqlKind,
    SqlText,
    Stored,
    Table,
    TableSpec,
)
from framework.config.types import Identifier, Model
from framework.errors import ConfigError
from framework.eventtime import check_interval, split_commits_advice

# Why a table of full snapshots reads whole upstream commits (see silver.snapshots).
SPLIT_SNAPSHOTS = ("a file or byte limit can split an upstream commit of several files across "
                   "micro-batches: each part is then taken for the whole snapshot, and the keys "
                   "of the other parts are deleted")


class Action(StrEnum):
    """What happens to a row that breaks an expectation."""

    WARN = "warn"  # kept, counted
    DROP = "drop"  # removed, counted
    QUARANTINE = "quarantine"  # moved to <table>_quarantine with the rules it broke
    FAIL = "fail"  # the query stops before the batch commits
    HOLD = "hold"  # (a references check only) kept in <table>_held until its key arrives


class WriteMode(StrEnum):
    APPEND = "append"
    UPSERT = "upsert"  # SCD type 1: one row per key, the latest event wins
    SCD2 = "scd2"  # SCD type 2: one row per version of a key


class TableFormat(StrEnum):
    DELTA = "delta"
    PARQUET = "parquet"  # only for Hive-bucketed tables (bucket_by)


class Expectation(Model):
    """A named data-quality rule: a SQL boolean expression and what to do when it breaks."""

    name: Identifier
    rule: str = Field(min_length=1)
    action: Action = Action.WARN

    @field_validator("action")
    @classmethod
    def _not_held(cls, value: Action) -> Action:
        if value is Action.HOLD:
            raise ValueError("expected warn, drop, quarantine or fail (a row breaking a rule "
                             "of its own is no better later), found 'hold'")
        return value


class ColumnSpec(Model):
    """One output column: a source column (``from``, default the same name) or a SQL
    expression, optionally cast to ``type``."""

    name: Identifier
    from_: Identifier | None = Field(default=None, alias="from")
    expr: str | None = None
    type: str | None = None

    @model_validator(mode="after")
    def _one_origin(self) -> ColumnSpec:
        if self.from_ and self.expr:
            raise ValueError("expected either 'from' or 'expr', found both")
        return self


class Dedup(Model):
    """Drop rows whose keys were seen within ``delay`` of event time."""

    keys: list[Identifier] = Field(min_length=1)
    delay: str

    @field_validator("delay")
    @classmethod
    def _interval(cls, value: str) -> str:
        return check_interval(value)


class Changes(Model):
    """How rows of the source are applied as changes to a key (see :mod:`framework.changes`):
    ``keys`` name the entity, ``sequence_by`` orders its changes (at the source, not on
    arrival); a ``deletes`` row removes its key at its sequence, a ``truncates`` row every key.
    ``except_columns`` are read (by the conditions, say) but not written. A source of full
    snapshots names ``snapshot_by`` instead of ``sequence_by``: the column telling a row's
    extract and ordering the extracts; changes are derived between consecutive snapshots
    (:mod:`silver.snapshots`), so ``deletes`` and ``truncates`` have no place there."""

    keys: list[Identifier] = Field(min_length=1)
    sequence_by: Identifier | None = None
    snapshot_by: Identifier | None = None
    deletes: str | None = Field(default=None, min_length=1)
    truncates: str | None = Field(default=None, min_length=1)
    except_columns: list[Identifier] = Field(default_factory=list)

    @property
    def sequence(self) -> str:
        """The column ordering a key's events: ``sequence_by``, or ``snapshot_by`` (events
        derived from a snapshot are at its id). Only one is set (:meth:`check_settings`);
        neither, on a spec that failed its checks, is an empty name."""
        return self.sequence_by or self.snapshot_by or ""

    def check_settings(self, prefix: str) -> list[tuple[str, str]]:
        """(key, message) for each setting that does not fit the others."""
        problems = []
        if self.sequence_by and self.snapshot_by:
            problems.append((f"{prefix}.snapshot_by", "expected either sequence_by (rows are "
                             "changes) or snapshot_by (rows are full snapshots), found both"))
        elif not (self.sequence_by or self.snapshot_by):
            problems.append((prefix, "expected sequence_by (the column ordering the changes "
                             "of a key) or snapshot_by (the column naming the full snapshot "
                             "a row belongs to), found neither"))
        if self.snapshot_by:
            for key, text in (("deletes", self.deletes), ("truncates", self.truncates)):
                if text:
                    problems.append((f"{prefix}.{key}", f"expected no {key} with snapshot_by "
                                     f"(the removals are derived: a key absent from a snapshot "
                                     f"is deleted), found {text!r}"))
        return problems

    def sql_texts(self, prefix: str) -> list[SqlText]:
        return [SqlText(f"{prefix}.{name}", SqlKind.EXPRESSION, text)
                for name, text in (("deletes", self.deletes), ("truncates", self.truncates))
                if text]

    def named_columns(self) -> list[tuple[str, list[str]]]:
        """(key, columns) for each setting that names columns."""
        return [("keys", self.keys), *self._ordering(), ("except_columns", self.except_columns)]

    def _ordering(self) -> list[tuple[str, list[str]]]:
        return [(key, [column]) for key, column in (("sequence_by", self.sequence_by),
                                                    ("snapshot_by", self.snapshot_by)) if column]

    def check_columns(self, prefix: str, columns: set[str]) -> list[tuple[str, str]]:
        """(key, message) for each named column that is not among ``columns``."""
        problems = []
        for key, cols in self.named_columns():
            missing = [c for c in cols if c not in columns]
            if missing:
                problems.append((f"{prefix}.{key}", f"expected columns among the output "
                                 f"columns ({', '.join(sorted(columns))}), found "
                                 f"{', '.join(missing)}"))
        kept = set(self.except_columns)
        for key, cols in (("keys", self.keys), *self._ordering()):
            dropped = [c for c in cols if c in kept]
            if dropped:
                problems.append((f"{prefix}.except_columns", f"expected the {key} columns to be "
                                 f"kept, found {', '.join(dropped)} in except_columns"))
        return problems


class Upsert(Changes):
    """SCD type 1: one row per key; of two events of a key the greater ``sequence_by`` wins,
    a removal winning a tie."""


class Scd2(Changes):
    """SCD type 2: one row per version of a key. A version opens when a tracked column
    changes (``track_history``: these; ``track_history_except``: every column but these;
    neither: every column) and closes at the next version's start or at a removal."""

    track_history: list[Identifier] | None = Field(default=None, min_length=1)
    track_history_except: list[Identifier] | None = None

    def named_columns(self) -> list[tuple[str, list[str]]]:
        return [*super().named_columns(), ("track_history", self.track_history or []),
                ("track_history_except", self.track_history_except or [])]

    @model_validator(mode="after")
    def _one_tracking(self) -> Scd2:
        if self.track_history is not None and self.track_history_except is not None:
            raise ValueError("expected at most one of track_history and "
                             "track_history_except, found both")
        return self


class SilverSource(Model):
    """The upstream table (by short name) and how much of it one micro-batch takes."""

    table: Identifier
    layer: Layer = Layer.BRONZE
    max_files_per_trigger: PositiveInt | None = None
    max_bytes_per_trigger: str | None = None


class SilverTableSpec(TableSpec):
    """A silver table: typed, checked and deduplicated rows of an upstream table."""

    layer: ClassVar[Layer] = Layer.SILVER

    source: SilverSource
    columns: list[ColumnSpec] = Field(default_factory=list)
    transforms: list[str] = Field(default_factory=list)
    event_time: Identifier | None = None
    expectations: list[Expectation] = Field(default_factory=list)
    checks: list[TableCheck] = Field(default_factory=list)
    dedup: Dedup | None = None
    mode: WriteMode = WriteMode.APPEND
    upsert: Upsert | None = None
    scd2: Scd2 | None = None
    format: TableFormat = TableFormat.DELTA
    partition_by: list[Identifier] = Field(default_factory=list)
    cluster_by: list[Identifier] = Field(default_factory=list)
    bucket_by: list[Identifier] = Field(default_factory=list)
    buckets: PositiveInt | None = None
    sort_by: list[Identifier] = Field(default_factory=list)

    @field_validator("source", mode="before")
    @classmethod
    def _short_source(cls, value: Any) -> Any:
        return {"table": value} if isinstance(value, str) else value

    @field_validator("transforms")
    @classmethod
    def _import_paths(cls, value: list[str]) -> list[str]:
        for path in value:
            if not re.match(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", path):
                raise ValueError(f"expected an import path 'package.module:function', found "
                                 f"{path!r}")
        return value

    def upstream(self) -> list[tuple[Layer, str]]:
        """Its source, and the tables its references name (run first, so that a batch finds
        the keys a run brings them)."""
        return [(self.source.layer, self.source.table),
                *((Layer(c.references.layer), c.references.table) for c in self.references)]

    def stored(self) -> Stored:
        return Stored.PARQUET if self.format is TableFormat.PARQUET else Stored.DELTA

    def rebuild(self, table: Table) -> Rebuild:
        """Its stream's checkpoint, its table and its companions (quarantine, change log, held
        rows: the rebuild holds them again)."""
        return Rebuild(RebuildMethod.STREAM, (
            table.location, table.companion_location("quarantine"),
            table.companion_location("changes"), table.companion_location(HELD)),
            table.checkpoint)

    def rebuild_refusal(self, table: Table) -> str | None:
        if self.format is TableFormat.PARQUET:
            return ("a format: parquet table has no Delta history to empty it in and restore "
                    "it from: rebuild it by hand (move its checkpoint aside, drop the table, "
                    "run)")
        return None

    def row_keys(self) -> list[str]:
        """A version of a key (scd2: its keys and ``__start_at``), a key (upsert), the dedup
        keys (append with dedup); none for a plain append."""
        if self.mode is WriteMode.SCD2 and self.changes is not None:
            return [*self.changes.keys, "__start_at"]
        if self.changes is not None:
            return list(self.changes.keys)
        return list(self.dedup.keys) if self.dedup else []

    def stale_parts(self) -> dict[str, str]:
        """Each column's origin and type, each rule keeping rows out (not a ``warn``: its rows
        are kept), the transforms, source, event time, dedup keys and change mode."""
        parts = {"source": f"{self.source.layer.value}.{self.source.table}",
                 "mode": self.mode.value}
        for c in self.columns:
            origin = c.expr or c.from_ or c.name
            parts[f"columns[{c.name}]"] = f"{origin} :: {c.type}" if c.type else origin
        for e in self.expectations:
            if e.action is not Action.WARN:
                parts[f"expectations[{e.name}]"] = f"{e.rule} ({e.action.value})"
        for check in self.batch_checks:
            if check.action is not CheckAction.WARN:
                what = f"unique {', '.join(check.unique)}" if isinstance(check, Unique) else \
                    f"references {check.references.model_dump_json(exclude_none=True)}"
                parts[f"checks[{check.check_name}]"] = f"{what} ({check.action.value})"
        if self.transforms:
            parts["transforms"] = ", ".join(self.transforms)
        if self.event_time:
            parts["event_time"] = self.event_time
        if self.dedup:
            parts["dedup"] = ", ".join(self.dedup.keys)
        if self.changes:
            parts["changes"] = json.dumps(self.changes.model_dump(mode="json", exclude_none=True),
                                          sort_keys=True)
        return parts

    def column_origins(self) -> dict[str, str] | None:
        """Each column's ``expr``, else the source column it is taken from; None without
        ``columns`` or with transforms (code may change the columns)."""
        if not self.columns or self.transforms:
            return None
        return {c.name: c.expr or c.from_ or c.name for c in self.columns}

    def row_rules(self) -> list[RowRule]:
        rules = [RowRule(e.name, RuleKind.EXPECTATION, e.rule, e.action.value)
                 for e in self.expectations]
        for check in self.batch_checks:
            if isinstance(check, Unique):
                rules.append(RowRule(check.check_name, RuleKind.UNIQUE, ", ".join(check.unique),
                                     check.action.value,
                                     check.unique[0] if len(check.unique) == 1 else None))
            else:
                what = check.references
                rules.append(RowRule(check.check_name, RuleKind.REFERENCES,
                                     what.model_dump_json(exclude_none=True),
                                     check.action.value, what.column))
        return rules

    @property
    def batch_checks(self) -> list[BatchCheck]:
        """The checks judged per batch: a key unique in the table, a key of another table."""
        return [c for c in self.checks if isinstance(c, Unique | References)]

    def run_checks(self) -> list[RunCheck]:
        return [c for c in self.checks if isinstance(c, Freshness | Volume)]

    def table_checks(self) -> list[TableCheck]:
        return list(self.checks)

    def column_expressions(self) -> dict[str, str]:
        return {c.name: c.expr for c in self.columns if c.expr}

    @property
    def references(self) -> list[References]:
        return [c for c in self.checks if isinstance(c, References)]

    @property
    def holds(self) -> bool:
        """Whether rows can be held for a key another table lacks (``<table>_held``)."""
        return any(c.action is CheckAction.HOLD for c in self.references)

    def event_time_column(self) -> str | None:
        return self.event_time

    @property
    def changes(self) -> Changes | None:
        """How rows are applied as changes (``mode`` upsert or scd2), else None."""
        return {WriteMode.UPSERT: self.upsert, WriteMode.SCD2: self.scd2}.get(self.mode)

    def sql_texts(self) -> list[SqlText]:
        texts = []
        for i, column in enumerate(self.columns):
            if column.expr:
                texts.append(SqlText(f"columns[{i}].expr", SqlKind.EXPRESSION, column.expr))
            if column.type:
                texts.append(SqlText(f"columns[{i}].type", SqlKind.TYPE, column.type))
        texts += [SqlText(f"expectations[{i}].rule", SqlKind.EXPRESSION, e.rule)
                  for i, e in enumerate(self.expectations)]
        if self.changes:
            texts += self.changes.sql_texts(self.mode.value)
        return texts

    def advise(self, table: Table, project: ProjectConfig) -> list[str]:
        src = self.source
        source = project.env.table_name(src.layer, src.table)
        if self.changes and self.changes.snapshot_by:
            return split_commits_advice(table.full_name, source,
                                        "derives changes from full snapshots",
                                        src.max_files_per_trigger, src.max_bytes_per_trigger,
                                        SPLIT_SNAPSHOTS, "each snapshot arrives whole")
        if self.dedup is None:
            return []
        return split_commits_advice(table.full_name, source, "deduplicates with a watermark",
                                    src.max_files_per_trigger, src.max_bytes_per_trigger)

    def check(self, table: Table) -> list[ConfigError]:
        return [ConfigError(message, key=key) for key, message in (
            *self._layout_problems(), *self._mode_problems(), *self._expectation_problems(),
            *self._column_problems(), *self._transform_problems())]

    def _layout_problems(self) -> Iterator[tuple[str, str]]:
        """(key, message) for each problem of how the table is stored: format, bucketing,
        partitioning, clustering."""
        if self.bucket_by and self.format is TableFormat.DELTA:
            yield ("bucket_by",
                   "expected no bucket_by on a Delta table (Delta rejects bucketing), found "
                   f"{self.bucket_by}; use cluster_by for data skipping on these columns, or "
                   "format: parquet for a Hive-bucketed table with shuffle-free joins")
        if self.format is TableFormat.PARQUET:
            if not self.bucket_by:
                yield ("format", "expected bucket_by with format: parquet (parquet is only "
                       "for bucketed tables; other silver tables are Delta), found none")
            for key, value in (("cluster_by", self.cluster_by), ("partition_by",
                                                                 self.partition_by)):
                if value:
                    yield (key, f"expected no {key} on a bucketed parquet table, found {value}")
            if self.mode is not WriteMode.APPEND:
                yield ("mode", f"expected mode append on a parquet table (changes need "
                       f"Delta), found {self.mode.value}")
        if self.bucket_by and not self.buckets:
            yield ("buckets", "expected the number of buckets with bucket_by, found none")
        if self.partition_by and self.cluster_by:
            yield ("cluster_by", "expected either partition_by or cluster_by (Delta does not "
                   "combine them), found both")

    def _mode_problems(self) -> Iterator[tuple[str, str]]:
        """(key, message) for each problem of how rows are applied: the mode's block and its
        settings, dedup."""
        for mode, block in ((WriteMode.UPSERT, self.upsert), (WriteMode.SCD2, self.scd2)):
            if self.mode is mode and block is None:
                yield (mode.value, f"expected {mode.value}: {{keys: [...], sequence_by: "
                       f"column}} with mode {mode.value}, found none")
            elif self.mode is not mode and block is not None:
                yield (mode.value, f"expected {mode.value}: only with mode {mode.value}, found "
                       f"it with mode {self.mode.value}")
        changes = self.changes
        if changes:
            yield from changes.check_settings(self.mode.value)
            if changes.snapshot_by and self.dedup:
                yield ("dedup", "expected no dedup with snapshot_by (every snapshot holds "
                       "each key again, and dedup would drop it from all but the first), "
                       f"found dedup on {', '.join(self.dedup.keys)}")
        if self.dedup and not self.event_time:
            yield ("event_time", "expected event_time with dedup (the watermark needs it), "
                   "found none")
        for i, check in enumerate(self.checks):
            if isinstance(check, Unique) and self.mode is not WriteMode.APPEND:
                yield (f"checks[{i}].unique", f"expected unique checks on a table of mode "
                       f"append, found mode {self.mode.value}, whose rows are one per key of "
                       f"its {self.mode.value}.keys already")
            elif isinstance(check, References) and (self.mode is not WriteMode.APPEND
                                                    or self.format is not TableFormat.DELTA):
                yield (f"checks[{i}].references", f"expected references checks on a Delta "
                       f"table of mode append, found a {self.format.value} table of mode "
                       f"{self.mode.value}")
            elif getattr(check, "by", None) is FreshnessBy.EVENT_TIME and not self.event_time:
                yield (f"checks[{i}].by", "expected event_time in the spec for a freshness "
                       "check by event time, found none (or give the check by: commit)")

    def _expectation_problems(self) -> Iterator[tuple[str, str]]:
        names = [e.name for e in self.expectations] + [c.check_name for c in self.checks]
        for dup in sorted({n for n in names if names.count(n) > 1}):
            yield ("expectations", f"expected unique names of expectations and checks, found "
                   f"{dup!r} twice")

    def _column_problems(self) -> Iterator[tuple[str, str]]:
        """(key, message) for each column a setting names that is not among the output
        columns (when they are listed and no transform may add others)."""
        if not self.columns or self.transforms:
            return
        out = {c.name for c in self.columns}
        for key, cols in (("partition_by", self.partition_by), ("cluster_by", self.cluster_by),
                          ("bucket_by", self.bucket_by), ("sort_by", self.sort_by),
                          ("event_time", [self.event_time] if self.event_time else []),
                          ("dedup.keys", self.dedup.keys if self.dedup else []),
                          *((f"checks[{i}].unique", c.unique) for i, c in enumerate(self.checks)
                            if isinstance(c, Unique)),
                          *((f"checks[{i}].references.column", [c.references.column])
                            for i, c in enumerate(self.checks) if isinstance(c, References))):
            missing = [c for c in cols if c not in out]
            if missing:
                yield (key, f"expected columns among the output columns "
                       f"({', '.join(sorted(out))}), found {', '.join(missing)}")
        if self.changes:
            yield from self.changes.check_columns(self.mode.value, out)

    def declared_columns(self, table: Table, inputs: Inputs) -> Columns | None:
        """Its rows' columns (:meth:`rows`), then with changes without ``except_columns`` and
        (SCD2) with the version columns, typed by ``sequence_by``; None with transforms (one
        may change the columns)."""
        rows = self.rows(inputs)
        if rows is None or self.transforms:
            return None
        changes, fields = self.changes, list(rows.fields)
        if changes is not None:
            from framework.changes import DELETED, END_AT, IS_CURRENT, START_AT

            fields = [c for c in fields if c.name not in changes.except_columns]
            if isinstance(changes, Scd2):
                sequence = rows.get(changes.sequence)
                at = sequence.type if sequence else None
                fields += [Column(START_AT, at), Column(END_AT, at),
                           Column(IS_CURRENT, "boolean"), Column(DELETED, "boolean")]
        return Columns(table.full_name, tuple(fields))

    def rows(self, inputs: Inputs) -> Columns | None:
        """The columns silver selects from its source: ``columns``, typed as stated, else as
        the source's column (an expression's unknown); without them the source's but those
        starting with ``_`` (named as the source's, for messages). None when they cannot be
        known (no ``columns``, and a source whose columns are unknown)."""
        source = inputs.get((self.source.layer, self.source.table))
        if not self.columns:
            return None if source is None else Columns(source.table, tuple(
                c for c in source.fields if not c.name.startswith("_")))
        fields = []
        for c in self.columns:
            found = source.get(c.from_ or c.name) if source and not c.expr else None
            kind = normal_type(c.type) if c.type else found.type if found else None
            fields.append(Column(c.name, kind))
        return Columns(f"the columns of {self.name}", tuple(fields))

    def column_problems(self, table: Table, inputs: Inputs) -> list[ConfigError]:
        """Each column taken from the source that it does not have; without ``columns``, each
        key naming a column the source does not give silver; an event time that is not a
        timestamp. With transforms, only the columns taken (the rest may change)."""
        source = inputs.get((self.source.layer, self.source.table))
        problems = []
        for i, c in enumerate(self.columns):
            if source is not None and not c.expr:
                key = f"columns[{i}].{'from' if c.from_ else 'name'}"
                problems.append(source.missing(key, c.from_ or c.name))
        rows = self.rows(inputs)
        if rows is not None and not self.transforms:
            if not self.columns and source is not None:
                problems += [_source_only(source, key, name) for key, name in self._named()]
            problems.append(self._event_time_problem(rows))
        for i, check in enumerate(self.checks):  # the key of the table a check references
            if isinstance(check, References):
                ref = check.references
                target = inputs.get((Layer(ref.layer), ref.table))
                if target is not None:
                    key = "key" if ref.key else "column"
                    problems.append(target.missing(f"checks[{i}].references.{key}",
                                                   ref.target_key))
        return [p for p in problems if p is not None]

    def _named(self) -> Iterator[tuple[str, str]]:
        """(key, column) for each setting naming an output column."""
        for key, cols in (("partition_by", self.partition_by), ("cluster_by", self.cluster_by),
                          ("bucket_by", self.bucket_by), ("sort_by", self.sort_by),
                          ("event_time", [self.event_time] if self.event_time else []),
                          ("dedup.keys", self.dedup.keys if self.dedup else [])):
            yield from ((key, c) for c in cols)
        for i, check in enumerate(self.checks):
            if isinstance(check, Unique):
                yield from ((f"checks[{i}].unique", c) for c in check.unique)
            elif isinstance(check, References):
                yield (f"checks[{i}].references.column", check.references.column)
        if self.changes:
            for key, cols in self.changes.named_columns():
                yield from ((f"{self.mode.value}.{key}", c) for c in cols)

    def _event_time_problem(self, rows: Columns) -> ConfigError | None:
        """Why ``event_time`` cannot be a watermark's event time, from its declared type."""
        column = rows.get(self.event_time) if self.event_time else None
        if column is None or time_kind(column) is not TimeKind.OTHER:
            return None
        at = next((i for i, c in enumerate(self.columns) if c.name == column.name), None)
        origin = self.columns[at].expr or self.columns[at].from_ or column.name \
            if at is not None else column.name
        cast = f'expr: "to_timestamp({origin})" (or "cast({origin} AS timestamp)")'
        fix = (f"give columns[{at}] type: timestamp, or {cast}" if at is not None
               else f"list it in columns with {{name: {column.name}, type: timestamp}} (and "
               f"every other column to keep), or with {cast}")
        return ConfigError(f"expected event_time to name a TIMESTAMP column (Spark's watermark "
                           f"takes no other), found {column.name} of type {column.type}: "
                           f"{fix}", key="event_time")

    def _transform_problems(self) -> Iterator[tuple[str, str]]:
        for i, path in enumerate(self.transforms):
            reason = _import_problem(path)
            if reason:
                yield (f"transforms[{i}]", reason)


def _source_only(source: Columns, key: str, name: str) -> ConfigError | None:
    """The problem of ``key`` naming ``name`` as a column silver takes from ``source`` without
    ``columns`` (all but those starting with ``_``), else None."""
    column = source.get(name)
    if column is None:
        return source.missing(key, name)
    if not column.name.startswith("_"):
        return None
    return ConfigError(f"expected a column silver takes from {source.table} without columns "
                       f"(all but those starting with _), found {name!r}: list the columns to "
                       f"keep in columns, with {{name: {column.name}}}", key=key)


def load_transform(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def _import_problem(path: str) -> str | None:
    try:
        fn = load_transform(path)
    except (ImportError, AttributeError) as exc:
        return f"expected an importable function at {path!r}, found: {exc}"
    if not callable(fn):
        return f"expected a function (DataFrame -> DataFrame) at {path!r}, found {type(fn)}"
    return None
