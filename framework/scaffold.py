"""``medallion new``: a feed's first specs, written from its sample files.

A data engineer starts a feed from files it sends instead of writing every key by hand. The
samples are read by Spark with the options bronze reads a feed with (:mod:`framework.formats`),
so the schema written into the bronze spec is the one bronze will read: JSON timestamps as
Spark infers them (``inferTimestamp``), CSV fields typed by ``inferSchema``, Parquet's own
types. From the sample's rows it proposes what a person would otherwise look for: a key (a
column unique and non-null in the sample, a name like ``id`` first; or, for a series of
readings without one, what each series is told by and the event time, unique together), the
event time (a ``TIMESTAMP`` column, a name like ``event_time`` or ``*_at`` first), and for a
calendar aggregate (a day by default, or a week, month, quarter or year) a measure (a number)
and a group (a text column of few values).

The specs are YAML text from templates, commented for the person who edits them; they are
checked by the loader afterwards (``medallion validate``), as any spec is. An existing spec is
never replaced: every target is checked before anything is written. Beside them, a test case of
the silver table (``conf/tests/silver.<table>/sample/``, run by ``medallion test``): a few sample
rows as bronze holds them, and the same rows as silver keeps them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from framework.config.model import Layer
from framework.config.types import IDENTIFIER
from framework.errors import UsageError, first_line
from framework.formats import EXTENSIONS, INFERENCE, FileFormat
from framework.identifiers import quote

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructField, StructType

# Spark's inference with bronze's reader options; a sample record that does not parse fails
# the read (a sample should be clean; ``infer-schema`` skips such records in a landing folder).
SAMPLE_INFERENCE = {
    fmt: {**options, "mode": "FAILFAST"} if fmt is not FileFormat.PARQUET else options
    for fmt, options in INFERENCE.items()}
DESCRIBED = {FileFormat.JSON: "one JSON object per line",
             FileFormat.CSV: "CSV files with a header line",
             FileFormat.PARQUET: "Parquet files"}
EXPECTED = {FileFormat.JSON: "JSON Lines (one JSON object per line)",
            FileFormat.CSV: "CSV with a header line",
            FileFormat.PARQUET: "Parquet files"}
DEDUP_DELAY = "1 day"
MAX_GROUPS = 50  # distinct values of a column grouped by, at most
KEY_NAMES = re.compile(r"^(id|key|uuid|guid)$", re.IGNORECASE)
KEYISH_NAMES = re.compile(r"(?i:(^|_)(id|key|uuid|guid|code|number|no)$)|[a-z0-9](Id|Key)$")
TIME_NAMES = re.compile(r"^(event_?time|event_?ts|ts|timestamp|time|datetime)$", re.IGNORECASE)
TIMEISH_NAMES = re.compile(r"(_at|_time|_ts|_timestamp|_datetime|_on)$|date|time",
                           re.IGNORECASE)
# Words an expression would read as SQL rather than as a column's name.
SQL_WORDS = frozenset({"all", "and", "any", "as", "asc", "between", "by", "case", "cast", "desc",
                       "distinct", "else", "end", "except", "false", "from", "group", "having",
                       "in", "intersect", "is", "join", "like", "limit", "not", "null", "on",
                       "or", "order", "select", "table", "then", "to", "true", "union", "when",
                       "where", "with"})


class SampleError(UsageError):
    """Raised when a feed's sample files cannot be found, their format told, or read."""


class Period(StrEnum):
    """The calendar period of the aggregate ``new --gold`` writes: a unit of gold's calendar
    window (the spec written is checked by the loader, as any), which names the table
    (``<table>_daily``, ``<table>_monthly``...)."""

    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    QUARTER = "quarter"
    YEAR = "year"

    @property
    def suffix(self) -> str:
        return "_" + {"day": "daily"}.get(self.value, f"{self.value}ly")

    @property
    def described(self) -> str:
        return "week (from Monday)" if self is Period.WEEK else self.value


def gold_name(table: str, period: Period) -> str:
    """The name of the aggregate ``new --gold`` writes."""
    return table + period.suffix


@dataclass(frozen=True)
class Samples:
    """The sample files of a feed, in one format: the paths as given (for the ``land`` command
    printed) and as Spark reads them."""

    fmt: FileFormat
    given: tuple[str, ...]

    @property
    def paths(self) -> list[str]:
        return [os.path.abspath(p) for p in self.given]


class Kind(StrEnum):
    """What a column's type makes it good for: a key (text, whole numbers), an event time
    (timestamp), a sum (numbers), a group (text)."""

    TEXT = "text"
    WHOLE = "whole number"  # integral, or a decimal without a fraction
    NUMBER = "number"
    TIMESTAMP = "timestamp"
    DATE = "date"
    OTHER = "other"  # boolean, binary, interval...
    NESTED = "nested"  # struct, array, map: values not counted


@dataclass(frozen=True)
class SampleColumn:
    """A column of the samples: its type, and what its values say (None for a nested type, whose
    values are not counted)."""

    name: str
    ddl: str  # the type as DDL (BIGINT, STRUCT<`a`: STRING>)
    kind: Kind
    non_null: int | None
    distinct: int | None

    @property
    def keyable(self) -> bool:
        return self.kind in (Kind.TEXT, Kind.WHOLE)

    @property
    def silver_name(self) -> str:
        """The column's name in silver: a plain identifier."""
        if IDENTIFIER.match(self.name):
            return self.name
        name = re.sub(r"\W+", "_", self.name).strip("_") or "column"
        return (name if name[0].isalpha() else f"c_{name}")[:128]


@dataclass(frozen=True)
class Sample:
    """What Spark read from the samples: the columns, in the files' order, and the rows."""

    samples: Samples
    columns: tuple[SampleColumn, ...]
    rows: int
    series_unique: bool = False  # the pair of series() is unique and non-null in the sample

    @property
    def ddl(self) -> str:
        """The schema as bronze's ``source.schema``."""
        return ", ".join(f"{_ddl_name(c.name)} {c.ddl}" for c in self.columns)

    def unique(self) -> list[SampleColumn]:
        """The columns unique and non-null in the sample that could be keys and are not named
        like a time, best first: named like ``id``, then like ``*_id``, then in the files'
        order. Text, or a whole number named like a key: a count (``qty``, ``volume``) is
        often unique in a few rows, and no key."""
        found = [c for c in self.columns
                 if self.rows and c.keyable
                 and c.non_null == self.rows and c.distinct == self.rows
                 and (_rank(c.name, KEY_NAMES, KEYISH_NAMES) < 2
                      or (c.kind is Kind.TEXT and _rank(c.name, TIME_NAMES, TIMEISH_NAMES) == 2))]
        return sorted(found, key=lambda c: _rank(c.name, KEY_NAMES, KEYISH_NAMES))

    @property
    def key(self) -> SampleColumn | None:
        unique = self.unique()
        return unique[0] if unique else None

    def series(self) -> tuple[SampleColumn, SampleColumn] | None:
        """Without a key column, the pair a series of readings would be unique by: the first
        text column repeated in the sample and not named like a time (a name like ``*_id``
        first: ``meter_id``, ``symbol``), and the event time. Whether they are unique together
        is counted by :func:`read_sample` (:attr:`series_unique`)."""
        time = self.event_time
        found = sorted((c for c in self.columns if c.kind is Kind.TEXT
                        and c.non_null == self.rows and c.distinct is not None
                        and 0 < c.distinct < self.rows
                        and _rank(c.name, TIME_NAMES, TIMEISH_NAMES) == 2),
                       key=lambda c: _rank(c.name, KEY_NAMES, KEYISH_NAMES))
        return (found[0], time) if found and time is not None and self.key is None else None

    @property
    def keys(self) -> tuple[SampleColumn, ...]:
        """The key: a column, or a series and its event time unique together; or none."""
        key, series = self.key, self.series()
        if key is not None:
            return (key,)
        return series if series is not None and self.series_unique else ()

    @property
    def event_time(self) -> SampleColumn | None:
        """The ``TIMESTAMP`` column, best first by its name (``event_time``, ``*_at``...)."""
        found = sorted((c for c in self.columns if c.kind is Kind.TIMESTAMP),
                       key=lambda c: _rank(c.name, TIME_NAMES, TIMEISH_NAMES))
        return found[0] if found else None

    def time_candidate(self) -> SampleColumn | None:
        """Without a ``TIMESTAMP`` column: a date, or a column named like a time, to cast."""
        dates = [c for c in self.columns if c.kind is Kind.DATE]
        named = [c for c in self.columns if c.keyable
                 and _rank(c.name, TIME_NAMES, TIMEISH_NAMES) < 2]
        found = dates or sorted(named, key=lambda c: _rank(c.name, TIME_NAMES, TIMEISH_NAMES))
        return found[0] if found else None

    @property
    def measure(self) -> SampleColumn | None:
        """The first number that is no key (summed by the calendar aggregate)."""
        keyish = {c.name for c in self.unique()}
        return next((c for c in self.columns if c.kind in (Kind.WHOLE, Kind.NUMBER)
                     and c.name not in keyish
                     and _rank(c.name, KEY_NAMES, KEYISH_NAMES) == 2), None)

    @property
    def group(self) -> SampleColumn | None:
        """The first text column of few values (at most half the rows, and
        :data:`MAX_GROUPS`), none a key or a time: what a calendar aggregate groups by."""
        most = min(MAX_GROUPS, self.rows // 2)
        return next((c for c in self.columns if c.kind is Kind.TEXT and c.distinct is not None
                     and 0 < c.distinct <= most
                     and _rank(c.name, KEY_NAMES, KEYISH_NAMES) == 2
                     and _rank(c.name, TIME_NAMES, TIMEISH_NAMES) == 2), None)


def _rank(name: str, best: re.Pattern[str], good: re.Pattern[str]) -> int:
    return 0 if best.search(name) else 1 if good.search(name) else 2


# --------------------------------------------------------------------------- the command's input
def check_table_name(table: str, gold: Period | None) -> None:
    """``table`` is a plain identifier (and so is its aggregate's name, with ``gold``)."""
    if not IDENTIFIER.match(table) or (gold and not IDENTIFIER.match(gold_name(table, gold))):
        raise UsageError(f"expected a table name of letters, digits and '_' not starting with a "
                         f"digit (at most {128 - (len(gold.suffix) if gold else 0)} characters), "
                         f"found {table!r}")


def find_samples(path: str, fmt: FileFormat | None) -> Samples:
    """The sample file at ``path``, or the files under the folder ``path`` (hidden ones and
    names starting with ``_`` left out, as Spark does), and their format: ``fmt``, or the one
    their names' extension says."""
    if os.path.isdir(path):
        files = sorted(os.path.join(folder, name) for folder, dirs, names in os.walk(path)
                       for name in names if not name.startswith((".", "_"))
                       and not any(part.startswith((".", "_"))
                                   for part in Path(os.path.relpath(folder, path)).parts))
        if not files:
            raise SampleError(f"expected sample files in the folder {path}, found none")
    elif os.path.isfile(path):
        files = [path]
    else:
        raise SampleError(f"expected a sample file or folder at --from {path}, found nothing "
                          "there")
    if fmt is not None:
        return Samples(fmt, tuple(files))
    told = {f: FileFormat.of_name(f) for f in files}
    unknown = [f for f, format_ in told.items() if format_ is None]
    if unknown:
        raise SampleError(f"expected sample files named {', '.join(EXTENSIONS)} (or --format "
                          f"json|csv|parquet), found {unknown[0]}")
    formats = sorted({str(f) for f in told.values()})
    if len(formats) > 1:
        raise SampleError(f"expected sample files of one format, found {' and '.join(formats)} "
                          f"in {path}: give the files of one format, or --format")
    return Samples(FileFormat(formats[0]), tuple(files))


def targets(conf_dir: str | Path, table: str, gold: Period | None) -> dict[Layer, Path]:
    """The spec files ``new`` writes; a :class:`UsageError` naming the first that exists (as
    ``.yaml`` or ``.yml``): a spec is never replaced."""
    tables = Path(conf_dir) / "tables"
    files = {Layer.BRONZE: tables / "bronze" / f"{table}.yaml",
             Layer.SILVER: tables / "silver" / f"{table}.yaml"}
    if gold:
        files[Layer.GOLD] = tables / "gold" / f"{gold_name(table, gold)}.yaml"
    for file in files.values():
        for existing in (file, file.with_suffix(".yml")):
            if existing.exists():
                raise UsageError(f"expected no spec at {existing}, found one: 'medallion new' "
                                 "never replaces a spec; choose another table name or remove "
                                 "the file")
    return files


# --------------------------------------------------------------------------- reading the samples
def read_sample(spark: SparkSession, samples: Samples) -> Sample:
    """The samples' schema as Spark infers it with bronze's reader options, and what their
    values say of each column (counted in one pass)."""
    from pyspark.sql import functions as F

    def failed(exc: Exception) -> SampleError:
        return SampleError(f"expected {EXPECTED[samples.fmt]} in {_where(samples)}, found "
                           f"what Spark cannot read: {_cause(exc)}")

    try:
        df = spark.read.format(samples.fmt.value).options(**SAMPLE_INFERENCE[samples.fmt]) \
            .load(samples.paths)
        fields = _in_file_order(spark, samples, df.schema)
    except Exception as exc:
        raise failed(exc) from exc
    if not fields:
        raise SampleError(f"expected records in {_where(samples)}, found none (no column was "
                          "inferred)")
    atomic = [i for i, f in enumerate(fields) if not _nested(f.dataType)]
    counts = [F.count(F.lit(1))]
    for i in atomic:
        column = F.col(quote(fields[i].name))
        counts += [F.count(column), F.count_distinct(column)]
    try:
        row = df.agg(*[c.alias(f"c{n}") for n, c in enumerate(counts)]).first()
    except Exception as exc:
        raise failed(exc) from exc
    values = list(row) if row is not None else [0] * len(counts)
    stats = {i: (values[1 + 2 * n], values[2 + 2 * n]) for n, i in enumerate(atomic)}
    columns = tuple(_column(f.name, f.dataType, *stats.get(i, (None, None)))
                    for i, f in enumerate(fields))
    sample = Sample(samples, columns, values[0])
    series = sample.series()
    if series is None:
        return sample
    try:  # rows where either is null are not counted: unique and non-null when all are
        pairs = df.agg(F.count_distinct(*(F.col(quote(c.name)) for c in series))).first()
    except Exception as exc:
        raise failed(exc) from exc
    return replace(sample, series_unique=pairs is not None and pairs[0] == sample.rows)


def _in_file_order(spark: SparkSession, samples: Samples, schema: StructType
                   ) -> list[StructField]:
    """The schema's fields in the order the samples have them: Spark's JSON inference sorts
    them by name, so a JSON feed's come in the order of its first lines' keys."""
    fields = list(schema.fields)
    if samples.fmt is not FileFormat.JSON:
        return fields
    order: dict[str, int] = {}
    for line in spark.read.text(samples.paths[0]).limit(100).collect():
        try:
            record = json.loads(line[0])
        except ValueError:
            continue
        if isinstance(record, dict):
            for name in record:
                order.setdefault(name, len(order))
    return sorted(fields, key=lambda f: order.get(f.name, len(order)))


def _column(name: str, dtype: DataType, non_null: int | None, distinct: int | None
            ) -> SampleColumn:
    return SampleColumn(name=name, ddl=_ddl_type(dtype), kind=_kind(dtype), non_null=non_null,
                        distinct=distinct)


def _kind(dtype: DataType) -> Kind:
    from pyspark.sql.types import (
        DateType,
        DecimalType,
        IntegralType,
        NumericType,
        StringType,
        TimestampNTZType,
        TimestampType,
    )

    if _nested(dtype):
        return Kind.NESTED
    if isinstance(dtype, StringType):
        return Kind.TEXT
    if isinstance(dtype, IntegralType) or (isinstance(dtype, DecimalType) and dtype.scale == 0):
        return Kind.WHOLE
    if isinstance(dtype, NumericType):
        return Kind.NUMBER
    if isinstance(dtype, TimestampType | TimestampNTZType):
        return Kind.TIMESTAMP
    return Kind.DATE if isinstance(dtype, DateType) else Kind.OTHER


def _nested(dtype: DataType) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType

    return isinstance(dtype, StructType | ArrayType | MapType)


def _ddl_type(dtype: DataType) -> str:
    """A type as DDL: its SQL name in capitals, a nested field's name as it is."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(dtype, StructType):
        return "STRUCT<" + ", ".join(f"{_ddl_name(f.name)}: {_ddl_type(f.dataType)}"
                                     for f in dtype.fields) + ">"
    if isinstance(dtype, ArrayType):
        return f"ARRAY<{_ddl_type(dtype.elementType)}>"
    if isinstance(dtype, MapType):
        return f"MAP<{_ddl_type(dtype.keyType)}, {_ddl_type(dtype.valueType)}>"
    return dtype.simpleString().upper()


def _ddl_name(name: str) -> str:
    return name if IDENTIFIER.match(name) else quote(name)


def _where(samples: Samples) -> str:
    first = samples.given[0]
    return first if len(samples.given) == 1 else f"{first} (and {len(samples.given) - 1} more)"


def _cause(exc: Exception) -> str:
    """The JVM's own reason (its last ``Caused by``), else the error's first line; one line."""
    causes = [line.split(":", 1)[1].strip() if ":" in line else line
              for line in (raw.strip().removeprefix("Caused by: ")
                           for raw in str(exc).splitlines() if "Caused by:" in raw)]
    text = causes[-1] if causes else first_line(exc)
    text = re.sub(r"\s*(\(start marker )?at \[Source: .*$", "", text)  # Jackson's: no file
    return text if len(text) <= 300 else text[:297] + "..."


# --------------------------------------------------------------------------- the specs
@dataclass(frozen=True)
class Scaffold:
    """The specs of a new feed, as YAML text, from what its sample says."""

    table: str
    sample: Sample
    origin: str  # the command that wrote them, for the files' first line

    def specs(self, gold: Period | None) -> dict[Layer, str]:
        """The text of each spec, by layer; with ``gold``, an aggregate per calendar period
        too (which needs an event time: a :class:`SampleError` without one)."""
        texts = {Layer.BRONZE: self.bronze(), Layer.SILVER: self.silver()}
        if gold:
            texts[Layer.GOLD] = self.gold(gold)
        return texts

    def _header(self) -> str:
        s = self.sample
        files = len(s.samples.given)
        return (f"# Written by {self.origin}\n"
                f"# from {files} sample file{'s' * (files != 1)} ({s.rows} rows). Read it, change "
                "what the samples could not tell, then commit it.\n")

    def bronze(self) -> str:
        s = self.sample
        description = _scalar(f"{_title(self.table)}, {DESCRIBED[s.samples.fmt]}.", False)
        return (self._header()
                + f"description: {description}   # for analysts: the table's comment\n"
                "source:\n"
                f"  path: landing/{self.table}   # where files land, under the lake's root\n"
                f"  format: {s.samples.fmt.value}\n"
                "  # The columns as Spark inferred them from the samples; bronze reads with this\n"
                "  # schema (never inferred at run time). A value that does not fit its type is\n"
                "  # kept in _rescued_data, its row kept.\n"
                f"  schema: {json.dumps(s.ddl)}\n")

    def silver(self) -> str:
        s = self.sample
        lines = [self._header().rstrip("\n"),
                 "description: "
                 + _scalar(f"{_title(self.table)}, typed, checked and deduplicated.", False),
                 f"source: {self.table}   # bronze.{self.table}",
                 "columns:   # rename (from:), cast (type:) or derive (expr:) here"]
        for c in s.columns:
            parts = [f"name: {_scalar(c.silver_name)}"]
            if c.silver_name != c.name:
                parts.append(f"expr: {json.dumps(quote(c.name))}")
            if c.kind is not Kind.NESTED:
                parts.append(f"type: {_scalar(c.ddl.lower())}")
            lines.append(f"  - {{{', '.join(parts)}}}")
        keys, time = s.keys, s.event_time
        if time is not None:
            lines += [f"event_time: {_scalar(time.silver_name)}   # the TIMESTAMP column the "
                      "watermark follows"]
        else:
            lines += _no_event_time(s)
        if keys:
            names = [c.silver_name for c in keys]
            others = [c.silver_name for c in s.unique()[1:]]
            lines += [f"# {', '.join(names)}: unique and non-null "
                      + ("together " if len(keys) > 1 else "")
                      + "in the samples, taken for the key"
                      + (f" (so were: {', '.join(others)})" if others else ""),
                      "expectations:   # action: warn | drop | quarantine | fail",
                      f"  - {{name: {_scalar('has_' + '_and_'.join(names))}, rule: "
                      f"{json.dumps(' AND '.join(f'{_sql(n)} IS NOT NULL' for n in names))}, "
                      "action: quarantine}"]
            if time is not None:
                lines += ["# A row whose key was seen within the delay before it (in event time) "
                          "is a duplicate,",
                          "# dropped; the watermark (the newest event time less the delay) drops "
                          "rows later",
                          "# than that, and counts them.",
                          f"dedup: {{keys: [{', '.join(_scalar(n) for n in names)}], delay: "
                          f"{json.dumps(DEDUP_DELAY)}}}"]
            else:
                lines += [f"# dedup: {{keys: [{', '.join(names)}], delay: \"{DEDUP_DELAY}\"}}   "
                          "# once event_time is set (the watermark needs it)"]
        else:
            lines += ["# No column is unique and non-null in the samples: no key was found, so",
                      "# there is no not-null rule on it and no dedup. If rows have a key (one or",
                      "# several columns), add:",
                      "#   expectations:",
                      "#     - {name: has_<key>, rule: \"<key> IS NOT NULL\", action: quarantine}",
                      f"#   dedup: {{keys: [<key>, ...], delay: \"{DEDUP_DELAY}\"}}"
                      "   # with event_time set"]
        return "\n".join(lines) + "\n"

    def gold(self, period: Period = Period.DAY) -> str:
        s = self.sample
        time = s.event_time
        if time is None:
            raise SampleError(f"expected a TIMESTAMP column for the calendar aggregate (--gold), "
                              f"found none in {_where(s.samples)} (columns: "
                              f"{', '.join(f'{c.name} {c.ddl}' for c in s.columns)}); run "
                              "without --gold and set silver's event_time first")
        measure, group = s.measure, s.group
        others = ", ".join(p.value for p in Period if p is not period)
        lines = [self._header().rstrip("\n"),
                 f"description: {_scalar(f'{_title(self.table)} per {period.value}.', False)}",
                 f"source: {self.table}   # silver.{self.table}",
                 f"event_time: {_scalar(time.silver_name)}",
                 f"# A calendar {period.described} in the lake's time zone; no watermark: a row "
                 "is never late,",
                 f"# it counts into its {period.value} whenever it arrives. Or: {others}.",
                 f"window: {{type: calendar, unit: {period.value}}}"]
        if group is not None:
            lines.append(f"group_by: [{_scalar(group.silver_name)}]   # {group.distinct} values "
                         "in the samples")
        else:
            lines.append("# group_by: [<column>]   # no text column of few values in the samples")
        lines += ["aggregates:",
                  "  - {name: row_count, expr: \"count(*)\", comment: Rows of the "
                  f"{period.value}}}"]
        if measure is not None:
            name = measure.silver_name
            lines.append(f"  - {{name: {_scalar('total_' + name)}, expr: "
                         f"{json.dumps(f'sum({_sql(name)})')}, comment: "
                         f"{_scalar(f'Sum of {name}')}}}")
        return "\n".join(lines) + "\n"


def _no_event_time(sample: Sample) -> list[str]:
    """The question to answer when the samples have no ``TIMESTAMP`` column, with the cast."""
    candidate = sample.time_candidate()
    if candidate is None:
        cast, note = "to_timestamp(<column>)", ""
    elif candidate.kind is Kind.DATE:
        cast, note = f"CAST({_sql(candidate.silver_name)} AS TIMESTAMP)", ""
    elif candidate.kind is Kind.WHOLE:
        cast, note = f"timestamp_seconds({_sql(candidate.silver_name)})", "or timestamp_millis"
    else:
        cast, note = f"to_timestamp({_sql(candidate.silver_name)})", "with its format if need be"
    return ["# No TIMESTAMP column in the samples: which column says when each event happened?",
            "# Add it to columns as a timestamp, then name it here (a watermark and dedup need",
            "# it):",
            f"#   - {{name: event_time, expr: {json.dumps(cast)}}}"
            + (f"   # {note}" if note else ""),
            "# event_time: event_time"]


def _title(table: str) -> str:
    return table.replace("_", " ").strip().capitalize() or table


def _scalar(text: str, flow: bool = True) -> str:
    """``text`` as a YAML scalar: plain when YAML reads it back as the same string (inside a
    ``{...}`` or ``[...]`` with ``flow``), else double-quoted (JSON's quoting, which YAML
    reads)."""
    special = r"[:#{}\[\],&*!|>'\"%@`]" if flow else r": | #|^[{}\[\],&*!|>'\"%@`]"
    plain = not re.search(rf"{special}|^[-?:\s]|[:\s]$", text)
    if plain:
        try:
            plain = yaml.safe_load(text) == text
        except yaml.YAMLError:
            plain = False
    return text if plain else json.dumps(text)


def _sql(name: str) -> str:
    """A column's name in an expression: quoted when Spark would read it as SQL."""
    return quote(name) if name.lower() in SQL_WORDS or not IDENTIFIER.match(name) else name


def write_specs(files: dict[Layer, Path], texts: dict[Layer, str]) -> list[Path]:
    """Each spec written to its file, none replaced: a file that appeared since the check is a
    :class:`UsageError`, and the specs written before it are removed."""
    written: list[Path] = []
    try:
        for layer, file in files.items():
            file.parent.mkdir(parents=True, exist_ok=True)
            with open(file, "x", encoding="utf-8") as out:
                written.append(file)
                out.write(texts[layer])
    except FileExistsError as exc:
        for file in written:
            file.unlink()
        raise UsageError(f"expected no spec at {exc.filename}, found one written meanwhile: "
                         "'medallion new' never replaces a spec") from exc
    return written


# ----------------------------------------------------------------------------- an example case
EXAMPLE_ROWS = 3
EXAMPLE_CASE = "sample"


def example_case(spark: SparkSession, sample: Sample) -> dict[str, str]:
    """A test case of the silver table written (``medallion test``, :mod:`framework.spectest`):
    the first sample rows as bronze holds them (``input.jsonl``, bronze's column names and
    types) and as silver keeps them (``expected.jsonl``, silver's names). Silver keeps every
    one: the key (if any) is unique and non-null in the samples, the types are those the
    samples were read with, and one batch drops nothing as late. None for a binary column,
    which JSON Lines do not carry as such."""
    from pyspark.sql import functions as F

    if any("BINARY" in c.ddl for c in sample.columns):
        return {}
    s = sample.samples
    df = spark.read.format(s.fmt.value).options(**SAMPLE_INFERENCE[s.fmt]).schema(sample.ddl) \
        .load(s.paths).limit(EXAMPLE_ROWS)
    pairs = df.select(
        F.to_json(F.struct(*(F.col(quote(c.name)).alias(c.name) for c in sample.columns))),
        F.to_json(F.struct(*(F.col(quote(c.name)).alias(c.silver_name)
                             for c in sample.columns)))).collect()
    return {"input.jsonl": "".join(f"{bronze}\n" for bronze, _ in pairs),
            "expected.jsonl": "".join(f"{silver}\n" for _, silver in pairs)}


def write_example_case(conf_dir: str | Path, table: str, files: dict[str, str]) -> list[Path]:
    """The example case's files under ``conf/tests/silver.<table>/sample/``; nothing when that
    folder exists (a case is never replaced)."""
    folder = Path(conf_dir) / "tests" / f"{Layer.SILVER.value}.{table}" / EXAMPLE_CASE
    if not files or folder.exists():
        return []
    folder.mkdir(parents=True)
    written = []
    for name, text in files.items():
        with open(folder / name, "x", encoding="utf-8") as out:
            out.write(text)
        written.append(folder / name)
    return written


def next_commands(table: str, samples: Samples, query_table: str,
                  options: Sequence[str]) -> list[list[str]]:
    """The commands that land the samples, run the flow and show its result (with the
    ``--conf``/``--env`` options given to ``new``)."""
    return [["land", table, *samples.given, *options], ["run", "all", *options],
            ["sql", f"SELECT * FROM {query_table} LIMIT 10", *options]]


def options_of(conf: str | None, env: str | None) -> list[str]:
    return [*(["--conf", conf] if conf else []), *(["--env", env] if env else [])]

