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

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

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

from framework import deltalog
from framework.config.checks import (
    CHECK_COLUMN,
    BatchCheck,
    CheckAction,
    CheckKind,
    Freshness,
    FreshnessBy,
    References,
    Unique,
    Volume,
)
from framework.config.model import Environment, Stored, Table
from framework.delta import (
    append,
    create_table,
    is_delta_table,
    latest_commit,
    literal_rows,
    read_table,
)
from framework.eventtime import describe_seconds, interval_seconds
from framework.history import BatchStatus, RunHistory
from framework.identifiers import quote_name


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


def mark_references(batch: DataFrame, check: References, keys: DataFrame | None, *,
                    rejected: Column) -> DataFrame:
    """``batch`` with ``check.column``: true on a row whose ``references.column`` is not NULL
    and not among ``keys`` (the referenced table's key column, as the batch found the table;
    None: no table there yet, no key); never on a row ``rejected`` already."""
    column = check.references.column
    seen = "_check_seen"
    marked = batch.withColumn(check.column, ~rejected & F.col(column).isNotNull())
    if keys is None:
        return marked
    known = keys.select(F.col(check.references.target_key).alias(column)).distinct() \
        .withColumn(seen, F.lit(True))
    joined = marked.join(known, on=column, how="left")
    return joined.withColumn(check.column, F.col(check.column) & F.col(seen).isNull()) \
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
    StructField("kind", StringType(), False, {
        "comment": "unique, references, freshness or volume"}),
    StructField("action", StringType(), False, {
        "comment": "What a row breaking it gets: warn, quarantine or fail"}),
    StructField("run_id", StringType(), metadata={"comment": "The run"}),
    StructField("batch_id", LongType(), metadata={
        "comment": "The micro-batch checked (null: a check of the table at the run's end)"}),
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


def batch_results(spark: SparkSession, table: str, checks: Sequence[BatchCheck],
                  broken: Mapping[str, int], *, run_id: str | None,
                  batch_id: int) -> DataFrame:
    """The rows of ``checks``' results for one batch (``broken``: rows breaking each, by
    check name)."""
    now = datetime.now(UTC)
    rows = [(table, c.check_name, c.kind.value, c.action.value, run_id, batch_id,
             broken.get(c.check_name, 0) == 0, broken.get(c.check_name, 0), "0",
             str(broken.get(c.check_name, 0)), now) for c in checks]
    return literal_rows(spark, rows, QUALITY_SCHEMA)


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict on a run's table."""

    check: str
    kind: CheckKind
    action: CheckAction
    passed: bool
    threshold: str
    observed: str
    rows_affected: int | None = None

    def describe(self) -> str:
        return f"check {self.check!r} failed: expected {self.threshold}, found {self.observed}"


def run_results(spark: SparkSession, table: Table, *, rows_out: int,
                run_id: str) -> list[CheckResult]:
    """The verdicts of the table's run-level checks (freshness, volume) at the end of a run
    that wrote ``rows_out`` rows."""
    results = []
    for check in table.spec.run_checks():
        if isinstance(check, Freshness):
            results.append(_freshness(spark, table, check))
        else:
            results.append(_volume(spark, table, check, rows_out, run_id))
    return results


def record_results(spark: SparkSession, table: Table, results: Sequence[CheckResult], *,
                   run_id: str) -> None:
    """Append a run's verdicts to ``<ops>.quality`` (no batch: they are the run's)."""
    if not results:
        return
    ensure_quality_table(spark, table.env)
    now = datetime.now(UTC)
    rows = [(table.full_name, r.check, r.kind.value, r.action.value, run_id, None, r.passed,
             r.rows_affected, r.threshold, r.observed, now) for r in results]
    append(literal_rows(spark, rows, QUALITY_SCHEMA), quality_table(table.env)[1])


def _freshness(spark: SparkSession, table: Table, check: Freshness) -> CheckResult:
    if check.by is FreshnessBy.EVENT_TIME:
        column = table.spec.event_time_column()
        assert column is not None  # (checked with the config)
        what = "newest event time"
        row = spark.table(quote_name(table.full_name)).agg(F.max(column)).first()
        newest = row[0] if row is not None else None
    else:
        what = "last commit"
        commit = latest_commit(spark, table.location) \
            if table.spec.stored() is Stored.DELTA else None
        newest = commit.timestamp if commit is not None else None
    threshold = f"a {what} at most {check.freshness} old"
    if newest is None:
        return CheckResult(check.check_name, CheckKind.FRESHNESS, check.action, False,
                           threshold, f"no {what} (no rows)")
    # (PySpark gives a TIMESTAMP as a naive datetime in this process's time zone)
    age = (datetime.now() - newest).total_seconds()
    return CheckResult(check.check_name, CheckKind.FRESHNESS, check.action,
                       age <= interval_seconds(check.freshness), threshold,
                       f"{what} {newest:%Y-%m-%d %H:%M:%S}, {describe_seconds(max(age, 0))} old")


def _volume(spark: SparkSession, table: Table, check: Volume, rows: int,
            run_id: str) -> CheckResult:
    bounds = check.volume
    low, high = bounds.min, bounds.max
    basis = ""
    if bounds.recent_runs is not None:
        median = _recent_median(spark, table, bounds.recent_runs, run_id)
        if median is None:
            basis = " (no earlier run wrote rows: no relative bound yet)"
        else:
            if bounds.low is not None:
                low = max(low or 0, math.ceil(bounds.low * median))
            if bounds.high is not None:
                cap = math.floor(bounds.high * median)
                high = cap if high is None else min(high, cap)
            basis = (f" (the median of the last {bounds.recent_runs} runs writing rows is "
                     f"{median:g})")
    if low is not None and high is not None:
        threshold = f"between {low} and {high} rows written{basis}"
    elif low is not None:
        threshold = f"at least {low} rows written{basis}"
    elif high is not None:
        threshold = f"at most {high} rows written{basis}"
    else:
        threshold = f"any number of rows{basis}"
    passed = (low is None or rows >= low) and (high is None or rows <= high)
    return CheckResult(check.check_name, CheckKind.VOLUME, check.action, passed, threshold,
                       f"{rows} rows written", rows_affected=rows)


def _recent_median(spark: SparkSession, table: Table, runs: int,
                   run_id: str) -> float | None:
    """The median of the rows written by the table's last ``runs`` runs (before ``run_id``)
    that wrote any, from the run history; None without one."""
    history = RunHistory(spark, table.env)
    if not history.exists():
        return None
    per_run = (history.read()
               .where((F.col("table") == table.full_name) & (F.col("run_id") != run_id)
                      & (F.col("status") != BatchStatus.FAILED.value))
               .groupBy("run_id")
               .agg(F.sum("rows_out").alias("rows"), F.max("recorded_at").alias("at"))
               .where(F.col("rows") > 0)
               .orderBy(F.col("at").desc()).limit(runs).collect())
    return statistics.median(int(r["rows"]) for r in per_run) if per_run else None


# The latest result of each check of each table, where it did not pass (Spark's SQL and
# DataFusion's alike).
_FAILING = ('SELECT "table", "check", kind, action, threshold, observed, '
            'CAST(recorded_at AS STRING) AS recorded_at FROM (SELECT *, row_number() OVER '
            '(PARTITION BY "table", "check" ORDER BY recorded_at DESC) AS n FROM t) latest '
            'WHERE n = 1 AND NOT passed ORDER BY "table", "check"')


def failing_checks(env: Environment,
                   spark: SparkSession | None = None) -> list[dict[str, Any]]:
    """The checks whose latest result failed, one dict per table and check (the columns of
    ``<ops>.quality``): read without Spark where the lake's files can be (``spark`` None),
    else with ``spark``."""
    _, location = quality_table(env)
    if spark is None:
        rows = deltalog.query(location, env, _FAILING) or []
    elif is_delta_table(spark, location):
        read_table(spark, location).createOrReplaceTempView("_medallion_quality")
        text = _FAILING.replace('"table"', "`table`").replace('"check"', "`check`") \
            .replace(" FROM t)", " FROM _medallion_quality)")
        rows = [r.asDict() for r in spark.sql(text).collect()]
    else:
        rows = []
    for row in rows:  # (UTC, to the second: each engine writes its own form)
        row["recorded_at"] = str(row["recorded_at"]).replace("T", " ")[:19]
    return rows
