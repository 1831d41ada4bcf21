"""``cdc: debezium``: a bronze feed whose records are Debezium change events, landed as rows that
silver can apply (``mode: upsert`` with ``deletes:``, ``mode: scd2``).

Configuration, on a file feed's spec (``source.format: json``) or a Kafka / Event Hubs feed's
spec, beside ``source``::

    cdc: debezium                     # short form: Postgres, sequence [source.lsn]
    cdc:                              # long form
      format: debezium                # the only format (an Enum: a closed set)
      sequence: [source.file, source.pos, source.row]      # MySQL
      # sequence: [source.change_lsn]                      # SQL Server
      # sequence: ["source.scn DECIMAL(38,0)"]             # Oracle: a type stated

``source.schema`` is the DDL of the **row** (the table's columns, what ``after`` and ``before``
hold), not of the envelope. The envelope read around it is ``before`` and ``after`` (STRUCT
of the row), ``op`` STRING, ``ts_ms`` BIGINT and ``source`` (and ``transaction``, if named)
STRUCT of the fields ``sequence`` names.

``sequence`` is a non-empty list of dotted paths into the envelope: ``source.<field>``,
``transaction.<field>`` or ``ts_ms``, each optionally followed by a Spark SQL type. **Typing
rule**: a path's stated type wins; without one, a field named in :data:`BIGINT_FIELDS` (the
numeric ones of Debezium's connectors: ``lsn``, ``txId``, ``pos``, ``row``, ``ts_ms``...) is
BIGINT, any other STRING (``change_lsn``, ``commit_lsn``, ``file``, ``gtid``: Debezium writes
them as text whose text order is their order). A field Debezium writes as digits in a string
whose length varies (Oracle's ``scn``) needs a numeric type stated, or it orders as text. The
paths' last parts must be distinct.

Both JSON shapes of the Kafka Connect JSON converter are read: the event itself
(``schemas.enable=false``) and ``{"schema": ..., "payload": {...}}`` (the event is
``payload``). Rows of the bronze table, in this order:

1. the row's columns (``source.schema``): from ``after`` for ``op`` c, u and r, from
   ``before`` for d;
2. ``_cdc_op`` STRING: c, u, d or r, as sent;
3. ``_cdc_ts_ms`` BIGINT: the envelope's ``ts_ms``;
4. ``_cdc_sequence``: with one ``sequence`` path, its value (of its type); with several, a
   STRUCT of them named by each path's last part, in the configured order (Spark orders it
   field by field);
5. the rescued column and the feed's usual ingestion columns (a file's, or Kafka's).

A value of the row that does not fit its column's type is rescued as for any feed (the column
null, ``{column: value}`` in the rescued column; quarantined whole with ``rescued_column:
null``; the batch refused in ``failOnNewColumns``); a key of the row outside the schema
likewise (``addNewColumns`` adds it, for file feeds). An envelope that is not one (see
:mod:`bronze.debezium` for the reasons) goes to the feed's quarantine, the envelope's text in
``_raw``. A Kafka record without a value (Debezium's tombstone after a delete, for log
compaction) is not data: it is skipped and counted (``cdc_tombstones``). The Kafka key is not
read: the row's key columns come from ``after``/``before``.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, NamedTuple

from pydantic import Field, field_validator, model_validator
from pyspark.sql.types import (
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from framework.columns import Column, normal_type
from framework.config.model import SqlKind, SqlText
from framework.config.types import Model
from framework.errors import ConfigError

OP = "_cdc_op"
TS_MS = "_cdc_ts_ms"
SEQUENCE = "_cdc_sequence"
TOMBSTONE = "_cdc_tombstone"  # internal: a Kafka record without a value (skipped, counted)
CDC_COLUMNS = (OP, TS_MS, SEQUENCE)
OPS = ("c", "u", "r", "d")  # create, update, read (a snapshot's row), delete
ROOTS = ("source", "transaction")  # the envelope's blocks a sequence path may name
BIGINT_FIELDS = frozenset({
    "lsn", "txId", "xmin", "pos", "row", "server_id", "thread", "ts_ms", "ts_us", "ts_ns",
    "event_serial_no", "total_order", "data_collection_order"})
NAME = r"[A-Za-z_][A-Za-z0-9_]*"
ENTRY = re.compile(
    rf"^\s*(?P<path>(?:{'|'.join(ROOTS)})\.{NAME}|ts_ms)"
    r"(?:\s+(?P<type>[A-Za-z]+(?:\s*\(\s*\d+\s*(?:,\s*\d+\s*)?\))?))?\s*$")


class CdcFormat(StrEnum):
    """Change-event formats bronze decodes."""

    DEBEZIUM = "debezium"


class SequenceField(NamedTuple):
    """One ``sequence`` path: where it is in the envelope, its name and its type (DDL)."""

    path: str  # "source.lsn"
    name: str  # its last part: "lsn"
    type: str  # "BIGINT"
    stated: bool  # whether the type was written in the spec (checked by Spark's parser)


class CdcSpec(Model):
    """How a feed's change events are decoded (see the module's text)."""

    format: CdcFormat = Field(description="The change events' format: debezium.")
    sequence: list[str] = Field(
        default_factory=lambda: ["source.lsn"],
        description="Dotted paths into the envelope giving the order of the changes at the "
        "source, each optionally with a type: [source.lsn] (Postgres, the default), "
        "[source.file, source.pos, source.row] (MySQL), [source.change_lsn] (SQL Server).")

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        return {"format": data} if isinstance(data, str) else data

    @field_validator("sequence")
    @classmethod
    def _paths(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("expected at least one dotted path in sequence (e.g. "
                             "[source.lsn]), found an empty list")
        names: dict[str, str] = {}
        for entry in value:
            m = ENTRY.match(entry)
            if m is None:
                raise ValueError(
                    f"expected each sequence entry to be a path source.<field>, "
                    f"transaction.<field> or ts_ms, optionally followed by a type (e.g. "
                    f"'source.lsn' or 'source.scn DECIMAL(38,0)'), found {entry!r}")
            name = m["path"].rsplit(".", 1)[-1]
            if name in names:
                raise ValueError(f"expected sequence paths whose last parts differ (they name "
                                 f"the fields of {SEQUENCE}), found {names[name]!r} and "
                                 f"{m['path']!r}")
            names[name] = m["path"]
        return value

    def fields(self) -> list[SequenceField]:
        """The ``sequence`` paths with their names and types (the module's typing rule)."""
        out = []
        for entry in self.sequence:
            m = ENTRY.match(entry)
            assert m is not None  # checked by the validator
            name = m["path"].rsplit(".", 1)[-1]
            stated = m["type"]
            dtype = re.sub(r"\s+", "", stated).upper() if stated else \
                "BIGINT" if name in BIGINT_FIELDS else "STRING"
            out.append(SequenceField(m["path"], name, dtype, stated is not None))
        return out

    def sql_texts(self) -> list[SqlText]:
        """The types stated in ``sequence``, for ``medallion validate``'s parser."""
        return [SqlText(f"cdc.sequence[{i}]", SqlKind.TYPE, f.type)
                for i, f in enumerate(self.fields()) if f.stated]


def sequence_types(cdc: CdcSpec) -> dict[str, DataType]:
    """Each ``sequence`` path's Spark type; ConfigError (with the key) for a stated type Spark
    does not know. Needs a Spark session (Spark parses the types)."""
    from framework.sqlcheck import parse_schema

    types: dict[str, DataType] = {}
    for i, f in enumerate(cdc.fields()):
        try:
            types[f.path] = parse_schema(f"`x` {f.type}").fields[0].dataType
        except ValueError as exc:
            raise ConfigError(f"expected a Spark SQL type such as BIGINT or DECIMAL(38,0) after "
                              f"the path, found {f.type!r}: {exc}",
                              key=f"cdc.sequence[{i}]") from exc
    return types


def sequence_type(cdc: CdcSpec, types: dict[str, DataType]) -> DataType:
    """The type of ``_cdc_sequence``: one path's own type, or a STRUCT of several."""
    fields = cdc.fields()
    if len(fields) == 1:
        return types[fields[0].path]
    return StructType([StructField(f.name, types[f.path]) for f in fields])


def cdc_fields(cdc: CdcSpec, types: dict[str, DataType]) -> list[StructField]:
    """The change columns after the row's: ``_cdc_op``, ``_cdc_ts_ms``, ``_cdc_sequence``."""
    return [StructField(OP, StringType()), StructField(TS_MS, LongType()),
            StructField(SEQUENCE, sequence_type(cdc, types))]


def declared_change_columns(cdc: CdcSpec | None) -> list[Column]:
    """The change columns of a feed as its spec declares them (:mod:`framework.columns`),
    without Spark: their types as written."""
    if cdc is None:
        return []
    fields = cdc.fields()
    sequence = normal_type(fields[0].type) if len(fields) == 1 else \
        "struct<" + ",".join(f"{f.name}:{normal_type(f.type)}" for f in fields) + ">"
    return [Column(OP, "string"), Column(TS_MS, "bigint"), Column(SEQUENCE, sequence)]


def change_columns(cdc: CdcSpec | None) -> list[StructField]:
    """The change columns of a feed (none without ``cdc``); needs a Spark session when a
    type is stated (see :func:`sequence_types`)."""
    return cdc_fields(cdc, sequence_types(cdc)) if cdc is not None else []


def cdc_problems(cdc: CdcSpec | None, *, json_feed: bool, found_format: str,
                 schema: str | None, rescued_column: str | None) -> list[ConfigError]:
    """What makes ``cdc`` unusable on a feed: records that are not JSON, no row schema, a
    rescued column named as one of the change columns."""
    if cdc is None:
        return []
    problems = []
    if not json_feed:
        problems.append(ConfigError(
            f"expected source.format json for cdc: {cdc.format.value} (change events are JSON "
            f"documents, one per line), found {found_format}", key="cdc"))
    if not schema:
        problems.append(ConfigError(
            f"expected source.schema, the DDL of the table's row (what after and before hold, "
            f"e.g. 'id BIGINT, name STRING'), for cdc: {cdc.format.value}, found none",
            key="source.schema"))
    if rescued_column in CDC_COLUMNS:
        problems.append(ConfigError(
            f"expected a rescued column named other than {', '.join(CDC_COLUMNS)} (the change "
            f"columns), found {rescued_column!r}", key="rescued_column"))
    return problems


def row_problem(row: StructType) -> str | None:
    """Why a row schema cannot take the change columns beside it (a column of their name), or
    None."""
    taken = [f.name for f in row.fields if f.name.lower() in {c.lower() for c in
                                                              (*CDC_COLUMNS, TOMBSTONE)}]
    if taken:
        return (f"expected row columns named other than {', '.join(CDC_COLUMNS)} (added by "
                f"cdc), found {', '.join(taken)}")
    return None
