"""Debezium change events decoded into rows (the option is :mod:`bronze.cdc`'s).

Each record (a JSON line of a file, a Kafka value) is parsed once as strict JSON; the event is
the record, or its ``payload`` when the record is ``{"schema": ..., "payload": ...}`` (the
converter's ``schemas.enable=true``: an object with ``payload`` and without ``op``). The row
(``after``, or ``before`` for a delete) is then read as any JSON line of the feed is, by
:func:`bronze.reading.parse_json_lines` with the row's schema: typed by Spark's JSON rules,
what does not fit rescued (:mod:`bronze.conform`).

An envelope that is not one goes to the quarantine with its text and the first of these
reasons that applies (:func:`envelope_problem`); nothing is dropped:

- larger than ``source.max_record_bytes`` (the usual reason, the first characters kept);
- not one JSON value, or not an object (``payload`` not an object, in the wrapped shape);
- ``op`` missing or not one of c, u, r, d (a truncate, ``t``, or a message, ``m``, included);
- ``after`` missing, null or not an object for c, u and r; ``before`` for d;
- a ``sequence`` field missing, null, or of a value its type cannot hold;
- ``ts_ms`` present but not a number.

With ``rescued_column: null``, a row value that does not fit its column quarantines the whole
event, with a reason naming ``after`` or ``before``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from bronze.cdc import OP, OPS, SEQUENCE, TS_MS, CdcSpec
from bronze.conform import CORRUPT, CORRUPT_REASON, Conformer, column_ref
from bronze.reading import RAW_PREFIX, FeedReader, one_json_value, parse_json_lines, too_large
from bronze.spec import BronzeTableSpec
from framework.storage import Storage

ENVELOPE = "_cdc_envelope"  # the record's text (or its first characters, when too large)
PROBLEM = "_cdc_problem"  # why the envelope is not a change event
ROW = "_cdc_row"  # "after" or "before": where the row came from
# the steps of the decoding: the record's text and size, its variant, the event, the row
TEXT, SIZE, RECORD, EVENT, ROW_VALUE = ("_cdc_text", "_cdc_size", "_cdc_record", "_cdc_event",
                                        "_cdc_row_value")
FOUND_CHARS = 200  # characters of a value shown in a reason


def event_of(record: Column) -> Column:
    """The change event of a record's variant: itself, or its ``payload`` if wrapped."""
    top = F.try_variant_get(record, "$", "map<string,variant>")
    wrapped = F.map_contains_key(top, F.lit("payload")) & ~F.map_contains_key(top, F.lit("op"))
    return F.when(F.coalesce(wrapped, F.lit(False)), top["payload"]).otherwise(record)


def row_side(op: Column) -> Column:
    """``before`` for a delete, ``after`` for the others."""
    return F.when(op == F.lit("d"), F.lit("before")).otherwise(F.lit("after"))


def row_of(event: Column, op: Column, as_type: str) -> Column:
    """The row of an event: ``before`` for a delete, ``after`` for the others."""
    return F.when(op == F.lit("d"), F.try_variant_get(event, "$.before", as_type)) \
        .otherwise(F.try_variant_get(event, "$.after", as_type))


def _found(value: Column) -> Column:
    """A variant as a reason shows it: ``none`` when absent, else its JSON text (cut)."""
    text = F.to_json(value)
    cut = F.when(F.length(text) > FOUND_CHARS,
                 F.concat(F.substring(text, 1, FOUND_CHARS), F.lit("..."))).otherwise(text)
    return F.when(value.isNull(), F.lit("none")).otherwise(cut)


def envelope_problem(record: Column, event: Column, op: Column, row: Column, cdc: CdcSpec,
                     types: Mapping[str, DataType]) -> Column:
    """Why ``record`` (a variant: null when the text is not one JSON value) is not a change
    event, or null (see the module's text). ``event``, ``op`` and ``row`` are the record's
    (:func:`event_of`, its ``op`` as text, :func:`row_of`)."""
    fields = F.try_variant_get(event, "$", "map<string,variant>")
    payload = F.try_variant_get(record, "$.payload", "variant")
    wrapped = F.try_variant_get(record, "$.op", "variant").isNull() & payload.isNotNull()
    row_object = F.try_variant_get(row, "$", "map<string,variant>").isNotNull()
    checks: list[tuple[Column, Column]] = [
        (record.isNull(), F.lit("expected a Debezium change event (one JSON object), found "
                                "text that is not one JSON value")),
        (fields.isNull() & wrapped, F.concat(F.lit(
            "expected payload to hold a Debezium change event (a JSON object), found "),
            _found(payload))),
        (fields.isNull(), F.concat(F.lit(
            "expected a Debezium change event (one JSON object), found "), _found(record))),
        (F.coalesce(~op.isin(*OPS), F.lit(True)), F.concat(
            F.lit(f"expected op one of {', '.join(OPS)}, found "),
            _found(F.try_variant_get(event, "$.op", "variant")))),
        (~row_object, F.concat(
            F.lit("expected "), row_side(op), F.lit(" (the row, a JSON object) for op "), op,
            F.lit(", found "), _found(row))),
    ]
    for f in cdc.fields():
        value = F.try_variant_get(event, f"$.{f.path}", "variant")
        typed = F.try_variant_get(event, f"$.{f.path}", types[f.path].simpleString())
        checks += [
            (value.isNull() | F.is_variant_null(value), F.concat(F.lit(
                f"expected the sequence field {f.path} ({f.type}), found "),
                F.when(value.isNull(), F.lit("none")).otherwise(F.lit("null")))),
            (typed.isNull(), F.concat(F.lit(
                f"expected the sequence field {f.path} of type {f.type}, found "),
                _found(value))),
        ]
    ts = F.try_variant_get(event, "$.ts_ms", "variant")
    checks.append((ts.isNotNull() & ~F.is_variant_null(ts)
                   & F.try_variant_get(event, "$.ts_ms", "bigint").isNull(),
                   F.concat(F.lit("expected ts_ms a number (milliseconds), found "),
                            _found(ts))))
    problem = F.lit(None).cast("string")
    for failed, reason in reversed(checks):  # the first that applies
        problem = F.when(failed, reason).otherwise(problem)
    return problem


def sequence_value(event: Column, cdc: CdcSpec, types: Mapping[str, DataType]) -> Column:
    """``_cdc_sequence``: one path's value, or a STRUCT of several, in the configured order."""
    values = [F.try_variant_get(event, f"$.{f.path}", types[f.path].simpleString()).alias(f.name)
              for f in cdc.fields()]
    return values[0] if len(values) == 1 else F.struct(*values)


def parse_change_events(lines: DataFrame, conformer: Conformer, cdc: CdcSpec,
                        types: Mapping[str, DataType], options: Mapping[str, str],
                        max_record_bytes: int, carry: Sequence[str], *,
                        origin: Column | None = None) -> DataFrame:
    """The change events in ``lines``' column ``value`` as
    :func:`~bronze.reading.parse_json_lines` gives a row, with the change columns after the
    row's columns and ``_corrupt_record`` holding the text of an envelope to quarantine."""
    # One projection per step: each value computed once, not once per use (Spark does not
    # merge projections that would repeat an expensive expression).
    fits = F.col(SIZE) <= F.lit(max_record_bytes)
    staged = lines.select(F.col("value").alias(TEXT), F.octet_length("value").alias(SIZE),
                          *carry)
    staged = staged.select("*", F.when(fits, one_json_value(F.col(TEXT))).alias(RECORD))
    staged = staged.select("*", event_of(F.col(RECORD)).alias(EVENT))
    staged = staged.select("*", F.try_variant_get(EVENT, "$.op", "string").alias(OP))
    staged = staged.select("*", row_of(F.col(EVENT), F.col(OP), "variant").alias(ROW_VALUE))
    record, event, row = F.col(RECORD), F.col(EVENT), F.col(ROW_VALUE)
    problem = F.when(~fits, too_large(max_record_bytes, fits, F.col(SIZE))).otherwise(
        envelope_problem(record, event, F.col(OP), row, cdc, types))
    # An optimizer barrier: Spark pushes a filter on the result (the quarantine's) down through
    # deterministic projections, inlining each step's expression into every use of it; for this
    # decoding that took 50 s of a batch of 3 records (2 s without the filter). A projection
    # holding a nondeterministic expression (the partition id, always >= 0) stops it here.
    problem = F.when(F.spark_partition_id() >= 0, problem)
    staged = staged.select(
        F.when(problem.isNull(), F.to_json(row)).otherwise(F.lit("{}")).alias("value"),
        F.when(fits, F.col(TEXT)).otherwise(F.substring(TEXT, 1, RAW_PREFIX)).alias(ENVELOPE),
        problem.alias(PROBLEM), row_side(F.col(OP)).alias(ROW), OP,
        F.try_variant_get(event, "$.ts_ms", "bigint").alias(TS_MS),
        sequence_value(event, cdc, types).alias(SEQUENCE), *carry)
    own = [ENVELOPE, PROBLEM, ROW, OP, TS_MS, SEQUENCE]
    parsed = parse_json_lines(staged, conformer, options, max_record_bytes, [*own, *carry],
                              origin=origin)
    row_columns = conformer.schema.names
    problem_col, corrupt = F.col(PROBLEM), F.col(CORRUPT)
    bad = problem_col.isNotNull() | corrupt.isNotNull()
    # A row value that does not fit, with nowhere to rescue it to: the event is quarantined.
    unfit = F.concat(F.lit("expected the values of "), F.col(ROW), F.lit(
        " to fit source.schema's types, found one that does not (rescued_column is null)"))
    reason = F.when(problem_col.isNotNull(), problem_col).when(
        corrupt.isNotNull(), F.coalesce(F.col(CORRUPT_REASON), unfit))
    rest = [c for c in parsed.columns
            if c not in (*row_columns, *own, CORRUPT, CORRUPT_REASON, *carry)]
    return parsed.select(
        *[F.col(column_ref(c)) for c in row_columns],
        *[F.when(~bad, F.col(c)).alias(c) for c in (OP, TS_MS, SEQUENCE)],
        *[F.col(column_ref(c)) for c in rest],
        F.when(bad, F.col(ENVELOPE)).alias(CORRUPT), reason.alias(CORRUPT_REASON),
        *carry)


class ChangeEventReader(FeedReader):
    """A file feed's reader whose JSON lines are Debezium change events (``cdc``)."""

    def __init__(self, spark: SparkSession, spec: BronzeTableSpec, storage: Storage,
                 types: Mapping[str, DataType]) -> None:
        super().__init__(spark, spec, storage)
        assert spec.cdc is not None
        self.cdc: CdcSpec = spec.cdc
        self.types = types

    def parse_lines(self, lines: DataFrame, conformer: Conformer, options: Mapping[str, str]
                    ) -> DataFrame:
        return parse_change_events(lines, conformer, self.cdc, self.types, options,
                                   self.spec.source.max_record_bytes, ["_metadata"])

    def json_object(self, line: Column) -> Column:
        """The row of a change event (its keys are the feed's columns)."""
        event = event_of(one_json_value(line))
        return row_of(event, F.try_variant_get(event, "$.op", "string"), "map<string,variant>")
