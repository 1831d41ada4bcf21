"""Table-level checks: what one row cannot tell (a key already in the table, twice in a batch).

A table's spec lists its checks under ``checks:``; each names what it checks and the action
taken on a row that breaks it. A layer's batch writer evaluates a check as a column of the
batch (:func:`mark_unique`), so the check's rows are counted, quarantined or refused by the same
step as the row rules' (silver's ``expectations``): nothing of a batch is written twice, and a
batch replayed after a crash decides as its first run did.

``unique`` on a key: a row is a duplicate when its key was already in the table before the
batch, or comes earlier in the batch (the batch's first row of a key is kept: rows no other rule
rejects first, then by event time, then by content, so the choice is the same on a replay). The
table's rows are found by a join on the key's columns, restricted to the batch's range of each
key column so that Delta's file statistics (and partition pruning, for a partitioned key) skip
the files that cannot hold the batch's keys: no full read of the table per batch when its files
are laid out by the key, as keys growing with time are.

Results are data: each batch appends one row per check of its table to ``<ops>.quality``
(:data:`QUALITY_SCHEMA`), in a commit of its own tagged like the batch's other writes, so a
batch replayed after a crash records its results once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum

from pydantic import Field, model_validator
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from framework.config.model import Environment
from framework.config.types import Identifier, Model
from framework.delta import create_table, literal_rows
from framework.identifiers import quote_name

# The prefix of a batch's column that marks the rows breaking a check (dropped before writing).
CHECK_COLUMN = "_check_"


class CheckKind(StrEnum):
    """What a table-level check looks at."""

    UNIQUE = "unique"


class CheckAction(StrEnum):
    """What happens to a row that breaks a table-level check."""

    WARN = "warn"  # written, counted
    QUARANTINE = "quarantine"  # moved to <table>_quarantine with the check's name
    FAIL = "fail"  # the query stops before the batch commits


class Unique(Model):
    """Rows of the table have distinct values of ``unique`` (a key of one or more columns);
    a row whose key has a NULL is not compared, as in SQL."""

    unique: list[Identifier] = Field(min_length=1)
    action: CheckAction = CheckAction.QUARANTINE
    name: Identifier | None = None

    @model_validator(mode="after")
    def _distinct_columns(self) -> Unique:
        if len(set(self.unique)) != len(self.unique):
            raise ValueError(f"expected distinct columns in unique, found {self.unique}")
        return self

    @property
    def check_name(self) -> str:
        """The check's name in counts and quarantine rows: ``name``, or ``unique_<columns>``."""
        return self.name or "unique_" + "_".join(self.unique)

    @property
    def column(self) -> str:
        """The batch's column that is true on a row breaking the check."""
        return CHECK_COLUMN + self.check_name


def mark_unique(batch: DataFrame, check: Unique, table: DataFrame | None, *,
                first: list[Column], rejected: Column) -> DataFrame:
    """``batch`` with ``check.column``: true on a row whose key is in ``table`` (the table's
    rows before the batch; None: none yet) or on an earlier row of the batch, by ``first``
    (the order that keeps a row, then its content); never on a row ``rejected`` already (by
    a row rule), which is not written whatever its key."""
    keys = check.unique
    complete = ~rejected
    for key in keys:
        complete = complete & F.col(key).isNotNull()
    content = F.to_json(F.struct(*[F.col(c) for c in batch.columns
                                    if not c.startswith(CHECK_COLUMN)]))
    rank = F.row_number().over(Window.partitionBy(*keys).orderBy(*first, content))
    seen = "_check_seen"
    marked = batch.withColumn(check.column, complete & (rank > 1))
    if table is None:
        return marked
    existing = _rows_in_range(table, batch, keys).select(*keys).distinct() \
        .withColumn(seen, F.lit(True))
    joined = marked.join(existing, on=keys, how="left")
    return joined.withColumn(check.column, F.col(check.column) | F.col(seen).isNotNull()) \
        .drop(seen).select(*marked.columns)


def _rows_in_range(table: DataFrame, batch: DataFrame, keys: list[str]) -> DataFrame:
    """``table``'s rows within the batch's range of each key column: a filter Delta answers
    from its files' statistics before reading them."""
    bounds = batch.agg(*[F.min(k).alias(f"lo{i}") for i, k in enumerate(keys)],
                       *[F.max(k).alias(f"hi{i}") for i, k in enumerate(keys)]).first()
    assert bounds is not None
    condition: Column = F.lit(True)
    for i, key in enumerate(keys):
        low, high = bounds[f"lo{i}"], bounds[f"hi{i}"]
        if low is None:  # every key of the batch has a NULL here: nothing to compare
            return table.where(F.lit(False))
        condition = condition & F.col(key).between(F.lit(low), F.lit(high))
    return table.where(condition)


QUALITY_SCHEMA = StructType([
    StructField("table", StringType(), False, {"comment": "catalog.schema.table"}),
    StructField("check", StringType(), False, {"comment": "The check's name in its spec"}),
    StructField("kind", StringType(), False, {"comment": "unique"}),
    StructField("action", StringType(), False, {
        "comment": "What a row breaking it gets: warn, quarantine or fail"}),
    StructField("run_id", StringType(), metadata={"comment": "The run"}),
    StructField("batch_id", LongType(), metadata={"comment": "The micro-batch checked"}),
    StructField("passed", BooleanType(), False, {"comment": "Whether no row broke it"}),
    StructField("rows_affected", LongType(), metadata={"comment": "Rows breaking it"}),
    StructField("threshold", StringType(), metadata={
        "comment": "The most rows (or the value) the check lets pass"}),
    StructField("observed", StringType(), metadata={"comment": "What the batch held"}),
    StructField("recorded_at", TimestampType(), metadata={"comment": "When it was recorded"}),
])


def quality_table(env: Environment) -> tuple[str, str]:
    """The environment's table of check results: its name and its location."""
    return f"{env.catalog}.{env.schemas.ops}.quality", env.path("tables", "ops", "quality")


def ensure_quality_table(spark: SparkSession, env: Environment) -> None:
    """Create the table of check results (and the ops schema) unless they exist."""
    name, location = quality_table(env)
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quote_name(name.rsplit('.', 1)[0])}")
    create_table(spark, name, QUALITY_SCHEMA, location, partition_by=["table"],
                 comment="One row per table-level check per micro-batch: whether it passed, "
                         "and the rows that broke it")


def batch_results(spark: SparkSession, table: str, checks: Sequence[Unique],
                  broken: Mapping[str, int], *, run_id: str | None,
                  batch_id: int) -> DataFrame:
    """The rows of ``checks``' results for one batch (``broken``: rows breaking each, by
    check name)."""
    now = datetime.now(UTC)
    rows = [(table, c.check_name, CheckKind.UNIQUE.value, c.action.value, run_id, batch_id,
             broken.get(c.check_name, 0) == 0, broken.get(c.check_name, 0), "0",
             str(broken.get(c.check_name, 0)), now) for c in checks]
    return literal_rows(spark, rows, QUALITY_SCHEMA)
