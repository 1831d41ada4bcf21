"""A feed's values matched to its schema by name, typed, and what does not fit rescued: the one
mechanism under every format (JSON, CSV, Parquet, Kafka) and every schema evolution mode.

For each column of the schema, a file's column of the same name (case-insensitively for CSV
headers and Parquet; JSON keys exactly, as Spark's JSON reader) gives the value, converted to
the column's type. What does not fit goes to the rescued column as one JSON object ``{column:
value}`` with the value as written and, for JSON and Parquet, its JSON type kept (``0`` stays
a number, ``false`` a boolean); the row is kept:

- a value that does not fit its column's type (the column is null), in every mode but
  ``failOnNewColumns``;
- a column the schema lacks, in ``rescue`` and ``addNewColumns`` (which adds it to the schema
  before the batch is read, so only a batch's new columns that could not be added stay here);
  ``none`` leaves it out and names it in :data:`DROPPED` (counted); ``failOnNewColumns`` fails
  the read (:data:`SCHEMA_CHANGE`), before anything is written.

Without a rescued column (``rescued_column: null``), a value that does not fit is a malformed
record, quarantined whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    LongType,
    NumericType,
    StringType,
    StructType,
    TimestampType,
)

from bronze.spec import SchemaEvolution
from framework.errors import SchemaChangeError

CORRUPT = "_corrupt_record"
CORRUPT_REASON = "_corrupt_reason"
DROPPED = "_dropped_columns"  # new columns a record held that ``none`` ignores
# The message a read fails with in ``failOnNewColumns``: the file's path, a tab, what changed.
SCHEMA_CHANGE = "[medallion] schema change in file "
NOT_FITTING = "value does not fit its column's type"


def column_ref(name: str) -> str:
    """A column name as ``F.col`` reads it literally (dots and backticks included)."""
    return "`" + name.replace("`", "``") + "`"


def json_type(variant_type: str) -> DataType:
    """The column type of a new JSON key, from ``schema_of_variant_agg`` of its values:
    integers BIGINT, other numbers DOUBLE, booleans BOOLEAN, the rest (text, objects, arrays,
    values of several types) STRING, holding the JSON text of an object or array."""
    name = variant_type.upper()
    if name in ("BIGINT", "INT", "SMALLINT", "TINYINT"):
        return LongType()
    if name.startswith("DECIMAL") or name in ("DOUBLE", "FLOAT"):
        return DoubleType()
    if name == "BOOLEAN":
        return BooleanType()
    return StringType()


def _convert(col: Column, source: DataType, target: DataType) -> Column:
    """A typed value (Parquet) as ``target``, by the rules of Spark's JSON reader: a number
    converts to another numeric type when its value fits, text to a date or time when it
    parses, anything to text; text is never a number or a boolean (null: rescued)."""
    if isinstance(source, StringType) and isinstance(target, NumericType | BooleanType):
        return F.lit(None).cast(target)
    return col.try_cast(target)


def schema_change_error(message: str) -> tuple[str, str] | None:
    """The file and the change a ``failOnNewColumns`` read failed on (from its error's
    message), or None for another error."""
    at = message.find(SCHEMA_CHANGE)
    if at < 0:
        return None
    rest = message[at + len(SCHEMA_CHANGE):]
    path, _, detail = rest.partition("\t")
    return path, detail.splitlines()[0] if detail else ""


def refuse_schema_change(table: str, batch_id: int, at: str, detail: str, accept: str,
                         log: Any, *, record: bool = False) -> NoReturn:
    """Raise :class:`SchemaChangeError`: a batch's read refused ``detail`` (a new column, or
    key, or a value of another type: ``failOnNewColumns``) in the file ``at``, or the record
    at ``at`` of a log; ``accept`` says how to take it."""
    what, where = ("keys", f"the record at {at}") if record else ("columns", at)
    reason = (f"expected the {what} and types of the schema in {where}, found {detail} "
              f"(schema_evolution: failOnNewColumns): {accept}; batch {batch_id} was not "
              "written and is read again by the next run")
    log.error("bronze.schema.refused", **{"record" if record else "file": at},
              change=detail)
    raise SchemaChangeError(table, f"batch {batch_id}", reason)


class Conformer:
    """Matches one schema's columns by name (see the module's text)."""

    def __init__(self, schema: StructType, rescued_column: str | None,
                 evolution: SchemaEvolution, options: Mapping[str, str],
                 required: Sequence[str] | None = None) -> None:
        self.schema = schema
        # The columns a file is expected to have (the spec's): one added since may be absent.
        self.required = list(required) if required is not None else schema.names
        self.rescued_column = rescued_column
        self.evolution = evolution
        self.options = options
        self.by_lower = {f.name.lower(): f for f in schema.fields}

    # ------------------------------------------------------------------ headers
    def header_problem(self, names: Sequence[str]) -> str | None:
        """Why a CSV file whose header holds ``names`` cannot be read by name; None if it can."""
        seen: dict[str, str] = {}
        for n in names:
            if n.lower() in seen:
                return (f"expected distinct column names in the header, found {seen[n.lower()]!r} "
                        f"and {n!r}")
            seen[n.lower()] = n
        if self.schema.fields and not any(n.lower() in self.by_lower for n in names):
            shown = ",".join(names)[:200]
            return (f"expected a header naming the schema's columns "
                    f"({', '.join(self.schema.names)}), found {shown!r}: set options.header: "
                    "'false' if the files have no header")
        return None

    def note(self, names: Sequence[str]) -> str | None:
        """What a file with these columns lacks or adds, for the ledger and the batch event."""
        lower = {n.lower() for n in names}
        missing = [n for n in self.required if n.lower() not in lower]
        new = [n for n in names if n.lower() not in self.by_lower]
        parts = []
        if missing:
            parts.append(f"missing columns (null): {', '.join(missing)}")
        if new:
            what = {SchemaEvolution.NONE: "ignored",
                    SchemaEvolution.FAIL_ON_NEW_COLUMNS: "refused"}.get(self.evolution,
                                                                      "rescued")
            parts.append(f"new columns ({what}): {', '.join(new)}")
        return "; ".join(parts) or None

    # ------------------------------------------------------------------ columns
    def from_columns(self, df: DataFrame, types: Mapping[str, DataType], *, text: bool
                     ) -> DataFrame:
        """``df``'s columns (``types``: name -> type, with ``_corrupt_record``, ``_corrupt_reason``
        and ``_metadata`` beside them) as the schema's: CSV fields (``text``) or Parquet columns."""
        lower = {n.lower(): n for n in types}
        valid = F.col(CORRUPT).isNull()
        values: list[Column] = []
        failures: list[tuple[str, Column, Column]] = []  # name, failed, value as written
        for f in self.schema.fields:
            source = lower.get(f.name.lower())
            if source is None:
                values.append(F.lit(None).cast(f.dataType).alias(f.name))
                continue
            col = F.col(column_ref(source))
            if types[source] == f.dataType:
                values.append(col.alias(f.name))
                continue
            converted = self._from_text(col, f.dataType) if text else \
                _convert(col, types[source], f.dataType)
            failed = valid & col.isNotNull() & converted.isNull()
            values.append(converted.alias(f.name))
            failures.append((f.name, failed, col))
        extras = [(n, F.col(column_ref(n))) for n in types if n.lower() not in self.by_lower]
        out = df.select(*values, *self._rescue(failures, extras, valid),
                        F.col(CORRUPT_REASON), "_metadata")
        return out.select(*[c for c in out.columns if c != "_metadata"], "_metadata")

    def _from_text(self, col: Column, dtype: DataType) -> Column:
        """A CSV field as ``dtype``, with the feed's date and time formats if it has any."""
        if isinstance(dtype, TimestampType) and "timestampFormat" in self.options:
            return F.try_to_timestamp(col, F.lit(self.options["timestampFormat"]))
        if isinstance(dtype, DateType) and "dateFormat" in self.options:
            return F.try_to_timestamp(col, F.lit(self.options["dateFormat"])).cast("date")
        return col.try_cast(dtype)

    def _rescue(self, failures: Sequence[tuple[str, Column, Column]],
                extras: Sequence[tuple[str, Column]], valid: Column) -> list[Column]:
        """The rescued column, ``_corrupt_record`` (raising in ``failOnNewColumns``) and
        :data:`DROPPED`, for values that did not fit (``failures``) and new columns."""
        corrupt = F.col(CORRUPT)
        failed_any = F.lit(False)
        for _, failed, _ in failures:
            failed_any = failed_any | failed
        new_any = F.lit(False)
        for _, value in extras:
            new_any = new_any | value.isNotNull()
        dropped = F.lit(None).cast("array<string>")
        kept: list[Column] = [F.when(failed, value).alias(name) for name, failed, value in failures]
        if self.evolution is SchemaEvolution.FAIL_ON_NEW_COLUMNS:
            detail = F.concat_ws(", ", F.filter(F.array(
                *[F.when(failed, F.lit(f"{n} ({NOT_FITTING})")) for n, failed, _ in failures],
                *[F.when(v.isNotNull(), F.lit(f"new column {n}")) for n, v in extras],
                F.lit(None).cast("string")), lambda x: x.isNotNull()))
            corrupt = F.when(valid & (failed_any | new_any), F.raise_error(F.concat(
                F.lit(SCHEMA_CHANGE), F.col("_metadata.file_path"), F.lit("\t"), detail
            )).cast("string")).otherwise(corrupt)
            kept = []
        elif self.evolution is SchemaEvolution.NONE:
            names = F.filter(F.array(*[F.when(v.isNotNull(), F.lit(n)) for n, v in extras],
                                     F.lit(None).cast("string")), lambda x: x.isNotNull())
            dropped = F.when(valid & new_any, names)
        else:
            kept += [value.alias(name) for name, value in extras]
        rescued: list[Column] = []
        if self.rescued_column:
            rescued_json = F.to_json(F.struct(*kept)) if kept else F.lit(None).cast("string")
            rescued.append(F.when(valid & (rescued_json != F.lit("{}")), rescued_json)
                           .cast("string").alias(self.rescued_column))
        elif failures and self.evolution is not SchemaEvolution.FAIL_ON_NEW_COLUMNS:
            # Nowhere to rescue to: the record is malformed, quarantined whole.
            corrupt = F.when(valid & failed_any, F.to_json(F.struct(
                *[v.alias(n) for n, _, v in failures]))).otherwise(corrupt)
        return [*rescued, corrupt.alias(CORRUPT), dropped.alias(DROPPED)]

    # ------------------------------------------------------------------ JSON objects
    def from_json_object(self, parsed: str, obj: str, corrupt: Column, value: Column,
                         file: Column) -> list[Column]:
        """The schema's columns of a JSON object, the rescued column, ``_corrupt_record`` and
        :data:`DROPPED`. ``parsed`` is the object parsed by Spark's JSON rules into the
        schema's struct (its ``_corrupt_record`` set when a value did not fit), ``obj`` the
        same object as a map of variants (for keys outside the schema and values that did not
        fit, with their JSON types), ``corrupt`` the text of a malformed record (null for a
        valid one), ``value`` the record's text and ``file`` its file."""
        r, m = F.col(parsed), F.col(obj)
        fields = self.schema.fields
        valid = corrupt.isNull()
        known = F.array(*[F.lit(f.name) for f in fields]) if fields else \
            F.array().cast("array<string>")
        nulls = F.filter(F.array(*[F.when(r[f.name].isNull(), F.lit(f.name)) for f in fields],
                                 F.lit(None).cast("string")), lambda x: x.isNotNull())
        present = sum((r[f.name].isNotNull().cast("int") for f in fields), F.lit(0))
        # Most records hold no key outside the schema and no value that does not fit.
        plain = r[CORRUPT].isNull() & (F.cardinality(m) <= present)
        check = valid & ~plain
        mismatch = F.map_filter(m, lambda k, v: F.array_contains(known, k)
                                & F.array_contains(nulls, k) & ~F.is_variant_null(v))
        # (a key outside the schema is data even when its value is null: kept as written)
        extra = F.map_filter(m, lambda k, _v: ~F.array_contains(known, k))
        columns: list[Column] = [r[f.name].alias(f.name) for f in fields]
        dropped = F.lit(None).cast("array<string>")
        if self.evolution is SchemaEvolution.FAIL_ON_NEW_COLUMNS:
            rescue = None
            detail = F.concat_ws(", ", F.transform(F.map_keys(mismatch), lambda k: F.concat(
                k, F.lit(f" ({NOT_FITTING})"))), F.transform(
                F.map_keys(extra), lambda k: F.concat(F.lit("new column "), k)))
            changed = (F.cardinality(mismatch) > 0) | (F.cardinality(extra) > 0)
            corrupt = F.when(check & changed, F.raise_error(F.concat(
                F.lit(SCHEMA_CHANGE), file, F.lit("\t"), detail)).cast("string")
            ).otherwise(corrupt)
        elif self.evolution is SchemaEvolution.NONE:
            rescue = mismatch
            dropped = F.when(check & (F.cardinality(extra) > 0), F.map_keys(extra))
        else:
            rescue = F.map_filter(m, lambda k, v: ~F.array_contains(known, k)
                                  | (F.array_contains(nulls, k) & ~F.is_variant_null(v)))
        if self.rescued_column:
            rescued = F.lit(None) if rescue is None else \
                F.when(check & (F.cardinality(rescue) > 0), F.to_json(rescue))
            columns.append(rescued.cast("string").alias(self.rescued_column))
        elif rescue is not None:  # nowhere to rescue to: the record is malformed
            corrupt = F.when(check & (F.cardinality(mismatch) > 0), value).otherwise(corrupt)
        return [*columns, corrupt.cast("string").alias(CORRUPT),
                dropped.cast("array<string>").alias(DROPPED)]
