"""A feed's schema over time: the bronze table's columns are the feed's schema, and every schema
it has had is recorded in ``<table>_schemas`` with the batch it took effect at.

The schema a batch is read with is the table's: the spec's columns, then the columns added
since (``schema_evolution: addNewColumns``, or ``medallion schema <table> --add``), which a
spec need not list. When a run starts, the spec is compared with the table:

- a column the spec has and the table lacks is added (nullable, at the end);
- a column whose type the spec widens (INT to BIGINT, FLOAT to DOUBLE, a DECIMAL to one with
  more digits on both sides of the point) is widened in place with Delta's type widening
  (``delta.enableTypeWidening``): the table's history is not rewritten;
- a narrower or incompatible type is a configuration error naming the column;
- a column the table has and the spec does not is kept (dropping it would lose data).

``addNewColumns`` adds a batch's new columns before the batch is read, so they are ingested
from that batch on, without a restart: the table is altered (``ALTER TABLE ... ADD COLUMNS``,
a no-op for a column already there), then the schema history's row is appended, then the
batch's rows. Each step is checked against what is there, so a run killed between two of them
is completed by the next: the batch is read again, finds its columns there, and the history
row is written if the table's schema is not the last one recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ByteType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from framework.delta import (
    add_columns,
    append,
    create_table,
    literal_rows,
    read_table,
    set_properties,
    widen_columns,
)
from framework.errors import ConfigError
from framework.sqlcheck import parse_schema as parse_ddl

SCHEMA_HISTORY = StructType([
    StructField("version", IntegerType()),
    StructField("batch_id", LongType()),
    StructField("schema", StringType()),
    StructField("added", StringType()),
    StructField("widened", StringType()),
    StructField("cause", StringType()),
    StructField("recorded_at", TimestampType()),
])
INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
WIDENING = "delta.enableTypeWidening"
# Delta refuses these characters in a column name (without column mapping).
UNSAFE_NAME = set(" ,;{}()\n\t=")


class SchemaCause(StrEnum):
    """Why a schema took effect."""

    CREATED = "created"  # the table's first schema
    SPEC = "spec"  # the spec's schema changed: a column added or widened
    ADD_NEW_COLUMNS = "addNewColumns"  # new columns of a batch, added by the feed's mode
    ADDED = "added"  # added by 'medallion schema <table> --add'


def widens(old: DataType, new: DataType) -> bool:
    """Whether ``new`` holds every value of ``old`` (a widening Delta applies in place)."""
    if isinstance(old, INTEGRAL) and isinstance(new, INTEGRAL):
        return INTEGRAL.index(type(new)) > INTEGRAL.index(type(old))
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return new.scale >= old.scale and (new.precision - new.scale) >= \
            (old.precision - old.scale) and new != old
    return False


def records_of(table_schema: StructType, internal: Sequence[str]) -> StructType:
    """The feed's schema in a bronze table's: its columns but the rescued and ingestion ones."""
    return StructType([f for f in table_schema.fields if f.name not in internal])


class SchemaHistory:
    """The schema history table of one feed, and the changes of the bronze table's schema."""

    def __init__(self, spark: SparkSession, *, name: str, location: str, bronze: str,
                 internal: Sequence[str], log: Any) -> None:
        self.spark, self.name, self.location, self.bronze = spark, name, location, bronze
        self.internal = list(internal)
        self.log = log

    def ensure(self) -> None:
        create_table(self.spark, self.name, SCHEMA_HISTORY, self.location,
                     comment="Every schema of the feed, with the batch it took effect at")

    def rows(self) -> list[dict[str, Any]]:
        df = read_table(self.spark, self.location)
        return [r.asDict() for r in df.orderBy("version").collect()]

    def table_records(self) -> StructType:
        return records_of(read_table(self.spark, self.bronze).schema, self.internal)

    def apply_spec(self, spec: StructType, *, file: str, batch_id: int) -> StructType:
        """Bring the table to the spec's schema (add its new columns, widen types) and record
        the schema; the feed's schema (the table's records)."""
        current = self.table_records()
        have = {f.name.lower(): f for f in current.fields}
        added: list[StructField] = []
        widened: list[StructField] = []
        for f in spec.fields:
            old = have.get(f.name.lower())
            if old is None:
                added.append(f)
            elif old.dataType != f.dataType:
                if not widens(old.dataType, f.dataType):
                    raise ConfigError(
                        f"expected the type of column {f.name!r} to stay "
                        f"{old.dataType.simpleString()} or widen (INT to BIGINT, FLOAT to "
                        f"DOUBLE, a DECIMAL with more digits), found "
                        f"{f.dataType.simpleString()}: bronze would have to rewrite its "
                        "history; add a new column instead", file=file, key="source.schema")
                widened.append(StructField(old.name, f.dataType))
        if widened:
            set_properties(self.spark, self.bronze, {WIDENING: "true"})
            widen_columns(self.spark, self.bronze, widened)
        add_columns(self.spark, self.bronze, added)
        # (read again only when altered: the table's log is read once per run otherwise)
        schema = self.table_records() if added or widened else current
        # Without a change from the spec, a schema not recorded yet is that of a batch whose
        # run stopped between altering the table and recording it.
        self.record(schema, batch_id, cause=SchemaCause.SPEC if added or widened
                    else SchemaCause.ADD_NEW_COLUMNS)
        return schema

    def add_columns(self, new: Mapping[str, DataType], batch_id: int,
                    cause: SchemaCause = SchemaCause.ADD_NEW_COLUMNS) -> StructType:
        """Add the ``new`` columns the table lacks and record the schema; the feed's schema."""
        have = {f.name.lower() for f in self.table_records().fields}
        fields = [StructField(n, t) for n, t in new.items() if n.lower() not in have]
        self.log.debug("bronze.schema.changing", batch_id=batch_id,
                       columns=[f.name for f in fields])
        add_columns(self.spark, self.bronze, fields)
        schema = self.table_records()
        self.record(schema, batch_id, cause=cause)
        return schema

    def record(self, schema: StructType, batch_id: int, *, cause: SchemaCause) -> bool:
        """Append ``schema`` as the feed's next version unless it is the last one recorded,
        with the columns added and widened since that one; whether it was appended."""
        rows = self.rows()
        ddl = schema.toDDL()
        if rows and rows[-1]["schema"] == ddl:
            return False
        before = {f.name.lower(): f for f in parse_ddl(rows[-1]["schema"]).fields} \
            if rows else {}
        added = [f.name for f in schema.fields if f.name.lower() not in before] if rows else []
        widened = [f"{f.name} {f.dataType.simpleString()}" for f in schema.fields
                   if f.name.lower() in before
                   and before[f.name.lower()].dataType != f.dataType]
        if not rows:
            cause = SchemaCause.CREATED
        now = datetime.now(UTC).replace(tzinfo=None)
        row = (len(rows) + 1, batch_id, ddl, ", ".join(added) or None,
               ", ".join(widened) or None, cause.value, now)
        append(literal_rows(self.spark, [row], SCHEMA_HISTORY), self.location)
        self.log.info("bronze.schema.changed", version=len(rows) + 1, batch_id=batch_id,
                      cause=cause.value, added=added, widened=widened)
        return True


def addable(name: str) -> bool:
    """Whether a new column of this name can be added to a Delta table as it is."""
    return bool(name) and not (set(name) & UNSAFE_NAME)
