"""The quarantine's lifecycle: list a silver table's quarantined and held rows, replay them
through the table's spec as it is now, or discard them with a reason.

A quarantined row (``<table>_quarantine``) keeps the row as the table would have had it
(``_row``, JSON), the rules it broke (``_failed_rules``), its batch and time, and the source
row it was made from (``_source_row``, JSON of the upstream row's columns, ingestion columns
too), with its state (:class:`~silver.batch.QuarantineState`): ``quarantined``, ``replaying``,
``replayed`` (``_replay_id``) or ``discarded`` (``_reason``). Nothing is deleted: a replayed or
discarded row stays, in its state.

**Replay.** The rows chosen (by rule, by age) are sent through the table's batch step again
(:class:`silver.batch.BatchWriter`: its rules, casts, table-level checks, quarantine and held
rows) from their source row, through the spec's columns and transforms as they are now (a row
quarantined before source rows were kept, or a held row that expired, from ``_row``); rows of a
table with ``dedup`` are deduplicated among themselves and against the table's keys. Each row
the replay appends to the table carries the replay's id (``_replay_id``, a column the table gains
on its first replay); a row that breaks a rule again is quarantined again, as a new row. In a
table of changes (``upsert``, ``scd2``) the rows are changes, applied by the one change applier
(:mod:`framework.changes`) as a batch's are: a change older than the key's newest lands at its
place in the key's history, so the table ends as it would have had the rows passed the first
time (no ``_replay_id`` there: a row of such a table is a key's state, not an arrival). A table
made from full snapshots is refused: one row of a snapshot is not a change on its own.

Exactly once, in three steps named by the replay's id ``N`` (the quarantine's version it
chose its rows at): the rows are marked ``replaying`` with ``_replay_id = N`` (one commit of
the quarantine tagged ``replaying:N``); the batch step writes them as batch ``N`` of the writer
``replay`` (each of its commits tagged ``replay:N``, as a streaming query's batch is, so that
a second attempt writes only what is missing); the rows are marked ``replayed`` (tagged
``replayed:N``). A replay stopped half way (a kill) leaves rows ``replaying`` and no
``replayed:N`` commit: the next ``quarantine`` command completes it first, from the rows as the
first step marked them. A ``fail`` rule broken in the batch step writes nothing: the rows go back
to ``quarantined`` and the command fails with the rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from framework.changes import SCD2_COLUMNS
from framework.config.model import Table
from framework.delta import (
    BatchCommits,
    add_columns,
    batch_commit,
    is_delta_table,
    last_tagged_batch,
    latest_commit,
    read_table,
    sql_string,
    update_rows,
)
from framework.errors import BatchFailedError, UsageError
from framework.identifiers import quote
from framework.logging import get_logger
from framework.microbatch import TableBatches
from silver.batch import (
    CAST_ERRORS,
    REPLAY_ID,
    SOURCE_ROW,
    STATE,
    BatchWriter,
    QuarantineState,
    Refined,
)
from silver.held import HELD_AT, HELD_BY, create_held
from silver.job import custom_transforms, select_columns
from silver.spec import SilverTableSpec, TableFormat

MARKER = "replaying"  # the first step's writer (its commit of the quarantine)
WRITER = "replay"  # the batch step's
DONE = "replayed"  # the last step's
HELD = "held"  # the state the list gives rows of <table>_held
_STATE = f"coalesce({quote(STATE)}, {sql_string(QuarantineState.QUARANTINED.value)})"


@dataclass(frozen=True)
class Selection:
    """Which quarantined rows a command takes: those breaking ``rule`` (any, when None),
    quarantined more than ``older_than`` ago (milliseconds; any age, when None)."""

    rule: str | None = None
    older_than_ms: int | None = None

    def sql(self, at: str = "_quarantined_at", rules: str = "_failed_rules") -> str:
        """The condition, as SQL over the quarantine's (or the held table's) columns."""
        parts = ["TRUE"]
        if self.rule is not None:
            parts.append(f"array_contains({quote(rules)}, {sql_string(self.rule)})")
        if self.older_than_ms is not None:
            cutoff = datetime.now(UTC) - timedelta(milliseconds=self.older_than_ms)
            parts.append(f"{quote(at)} < timestamp_millis({int(cutoff.timestamp() * 1000)})")
        return " AND ".join(parts)


@dataclass(frozen=True)
class Replayed:
    """What a replay did: its id, the rows it took, and where they went."""

    replay_id: int
    rows: int
    written: int = 0
    quarantined: int = 0
    held: int = 0
    dropped: int = 0
    duplicates: int = 0
    finishing: bool = False  # it completed a replay a stop had left half way

    def render(self) -> str:
        what = "completed replay" if self.finishing else "replay"
        return (f"{what} {self.replay_id}: {self.rows} rows replayed: {self.written} written, "
                f"{self.quarantined} quarantined again, {self.held} held, {self.dropped} "
                f"dropped by a rule, {self.duplicates} duplicates of rows in the table")


def quarantine_location(table: Table) -> str:
    return table.companion_location("quarantine")


def check_replayable(table: Table) -> None:
    """Refuse a table whose rows a replay cannot write (bucketed parquet; changes derived from
    full snapshots), saying why."""
    spec = cast(SilverTableSpec, table.spec)
    if spec.format is TableFormat.PARQUET:
        raise UsageError(f"expected a Delta table to replay rows into, found {table.full_name} "
                         "stored as bucketed parquet (its rows are written per streaming batch "
                         "and partition, which a replay has none of)")
    if spec.changes is not None and spec.changes.snapshot_by is not None:
        raise UsageError(f"expected a table of changes or appended rows to replay rows into, "
                         f"found {table.full_name} made from full snapshots (a row of a "
                         "snapshot is not a change on its own: its quarantined rows can be "
                         "listed and discarded; send them again in a new snapshot)")


# ---------------------------------------------------------------------------------- list
def summary(spark: SparkSession, table: Table, selection: Selection) -> list[tuple[Any, ...]]:
    """Per state and rule: the rows, the oldest and the newest (a row breaking two rules is
    counted under each); the held rows too (state ``held``, their holding checks)."""
    out: list[tuple[Any, ...]] = []
    location = quarantine_location(table)
    if is_delta_table(spark, location):
        rows = read_table(spark, location).where(selection.sql()).select(
            F.expr(_STATE).alias("state"),
            F.explode_outer("_failed_rules").alias("rule"), F.col("_quarantined_at").alias("at"))
        out += _grouped(rows)
    held = table.companion_location("held")
    if is_delta_table(spark, held):
        rows = read_table(spark, held).where(selection.sql(HELD_AT, HELD_BY)).select(
            F.lit(HELD).alias("state"), F.explode_outer(HELD_BY).alias("rule"),
            F.col(HELD_AT).alias("at"))
        out += _grouped(rows)
    return out


def _grouped(rows: DataFrame) -> list[tuple[Any, ...]]:
    found = rows.groupBy("state", "rule").agg(F.count(F.lit(1)).alias("rows"),
                                             F.min("at").alias("oldest"),
                                             F.max("at").alias("newest"))
    return [tuple(r) for r in found.orderBy("state", "rule").collect()]


def sample(spark: SparkSession, table: Table, selection: Selection,
           limit: int) -> list[tuple[Any, ...]]:
    """The first ``limit`` quarantined rows chosen, oldest first: when, state, rules, row."""
    location = quarantine_location(table)
    if limit <= 0 or not is_delta_table(spark, location):
        return []
    rows = read_table(spark, location).where(selection.sql()).orderBy("_quarantined_at") \
        .select("_quarantined_at", F.expr(_STATE), F.array_join("_failed_rules", ","), "_row")
    return [tuple(r) for r in rows.limit(limit).collect()]


# ---------------------------------------------------------------------------------- discard
def discard(spark: SparkSession, table: Table, selection: Selection, reason: str) -> int:
    """Set the chosen quarantined rows aside for good, with ``reason``: the rows discarded."""
    if not reason.strip():
        raise UsageError("expected a reason to discard rows with (--reason), found none")
    location = quarantine_location(table)
    if not is_delta_table(spark, location):
        return 0
    where = f"{_STATE} = {sql_string(QuarantineState.QUARANTINED.value)} AND {selection.sql()}"
    count = read_table(spark, location).where(where).count()
    if count:
        update_rows(spark, location, {STATE: sql_string(QuarantineState.DISCARDED.value),
                                      "_reason": sql_string(reason)}, where)
    return count


# ---------------------------------------------------------------------------------- replay
def unfinished(spark: SparkSession, table: Table) -> int | None:
    """The id of a replay a stop left half way, or None."""
    location = quarantine_location(table)
    if not is_delta_table(spark, location):
        return None
    last = last_tagged_batch(spark, location, MARKER)
    if last is None or batch_commit(spark, location, DONE, last) is not None:
        return None
    return last


def replay(spark: SparkSession, table: Table, selection: Selection,
           log_context: dict[str, Any]) -> list[Replayed]:
    """Complete a replay left half way, then replay the rows ``selection`` chooses (see the
    module's text): what each replay did (none when there was nothing to replay)."""
    check_replayable(table)
    done = []
    left = unfinished(spark, table)
    if left is not None:
        done.append(_send(spark, table, left, log_context, finishing=True))
    location = quarantine_location(table)
    if not is_delta_table(spark, location):
        return done
    where = f"{_STATE} = {sql_string(QuarantineState.QUARANTINED.value)} AND {selection.sql()}"
    current = latest_commit(spark, location)
    assert current is not None
    replay_id = current.version
    if read_table(spark, location, version=replay_id).where(where).isEmpty():
        return done
    get_logger(**log_context).info("silver.quarantine.marking", replay_id=replay_id,
                                   rule=selection.rule)
    update_rows(spark, location, {STATE: sql_string(QuarantineState.REPLAYING.value),
                                  REPLAY_ID: str(replay_id)}, where, tag=f"{MARKER}:{replay_id}")
    done.append(_send(spark, table, replay_id, log_context))
    return done


def _send(spark: SparkSession, table: Table, replay_id: int, log_context: dict[str, Any],
          finishing: bool = False) -> Replayed:
    """Steps two and three of replay ``replay_id``."""
    location = quarantine_location(table)
    marked = batch_commit(spark, location, MARKER, replay_id)
    assert marked is not None
    taken = read_table(spark, location, version=marked).where(
        (F.col(REPLAY_ID) == replay_id)
        & (F.col(STATE) == QuarantineState.REPLAYING.value)).persist()
    try:
        rows = taken.count()
        spec = cast(SilverTableSpec, table.spec)
        writer = BatchWriter(TableBatches(BatchWriter, table, range(replay_id, replay_id + 1),
                                          {**log_context, "replay_id": replay_id},
                                          writer_id=WRITER), spark)
        batch = _rows(spark, table, spec, taken)
        duplicates = 0
        if writer.applier is None:  # appended rows carry the replay's id
            batch, duplicates = _deduplicated(spark, table, spec, batch, rows, writer.commits,
                                              replay_id)
            _with_replay_column(spark, table)
            batch = batch.withColumn(REPLAY_ID, F.lit(replay_id).cast("long"))
        log = get_logger(**log_context, replay_id=replay_id)
        log.info("silver.quarantine.sending", rows=rows, finishing=finishing)
        try:
            outcome = writer.write(batch, replay_id)
        except BatchFailedError:  # a ``fail`` rule: nothing was written
            update_rows(spark, location, {STATE: sql_string(QuarantineState.QUARANTINED.value),
                                          REPLAY_ID: "NULL"},
                        f"{quote(REPLAY_ID)} = {replay_id} AND {quote(STATE)} = "
                        f"{sql_string(QuarantineState.REPLAYING.value)}",
                        tag=f"{DONE}:{replay_id}")
            raise
    finally:
        taken.unpersist()
    log.info("silver.quarantine.finishing", rows_written=outcome.written)
    update_rows(spark, location, {STATE: sql_string(QuarantineState.REPLAYED.value)},
                f"{quote(REPLAY_ID)} = {replay_id} AND {quote(STATE)} = "
                f"{sql_string(QuarantineState.REPLAYING.value)}", tag=f"{DONE}:{replay_id}")
    assert isinstance(outcome, Refined)
    return Replayed(replay_id, rows, written=outcome.written, quarantined=outcome.quarantined,
                    held=outcome.held, dropped=outcome.dropped, duplicates=duplicates,
                    finishing=finishing)


def _rows(spark: SparkSession, table: Table, spec: SilverTableSpec,
          taken: DataFrame) -> DataFrame:
    """The rows taken, as the table's batch step takes its rows: from their source row through
    the spec's columns and transforms; those without one from the row they were kept as."""
    source = spec.source
    upstream = read_table(spark, table.env.path("tables", source.layer, source.table)).schema
    parsed = taken.where(F.col(SOURCE_ROW).isNotNull()).select(
        F.from_json(SOURCE_ROW, upstream).alias("_src")).select("_src.*")
    fresh = custom_transforms(select_columns(parsed, spec, source_row=True), spec,
                              table.full_name)
    fresh = fresh.withColumn(SOURCE_ROW, F.to_json(SOURCE_ROW)) if SOURCE_ROW in fresh.columns \
        else fresh.withColumn(SOURCE_ROW, F.lit(None).cast("string"))
    kept = StructType([f for f in fresh.schema.fields
                       if f.name not in (REPLAY_ID, SOURCE_ROW, CAST_ERRORS, *SCD2_COLUMNS)])
    typed = any(c.type for c in spec.columns)
    old = taken.where(F.col(SOURCE_ROW).isNull()).select(
        F.from_json("_row", kept).alias("_old")).select(
        "_old.*", *([F.array().cast("array<string>").alias(CAST_ERRORS)] if typed else []),
        F.lit(None).cast("string").alias(SOURCE_ROW))
    return fresh.unionByName(old, allowMissingColumns=True)


def _deduplicated(spark: SparkSession, table: Table, spec: SilverTableSpec, rows: DataFrame,
                  count: int, commits: BatchCommits,
                  replay_id: int) -> tuple[DataFrame, int]:
    """``rows`` without duplicates of a table with ``dedup``: one row per key (the earliest in
    event time), none whose key the table has (as it was before this replay's own commit, for
    a replay completed after a stop); and how many of its ``count`` rows were left out."""
    if spec.dedup is None:
        return rows, 0
    keys = list(spec.dedup.keys)
    order = [F.col(spec.event_time).asc_nulls_last()] if spec.event_time else []
    first = Window.partitionBy(*[F.col(quote(k)) for k in keys]).orderBy(
        *order, F.col(SOURCE_ROW).asc_nulls_last())
    own = commits.version(table.location, replay_id)
    before = read_table(spark, table.location, version=own - 1 if own is not None else None)
    kept = rows.withColumn("_first", F.row_number().over(first)).where("_first = 1") \
        .drop("_first").join(before.select(*[quote(k) for k in keys]).distinct(), keys,
                             "left_anti")
    return kept, count - kept.count()


def _with_replay_column(spark: SparkSession, table: Table) -> None:
    """The table (and its held rows) given ``_replay_id`` on its first replay; the held
    table made if the spec holds rows and no run made it yet."""
    field = StructField(REPLAY_ID, LongType())
    if cast(SilverTableSpec, table.spec).holds:
        create_held(spark, table, read_table(spark, table.location).schema)
    for location in (table.location, table.companion_location("held")):
        if is_delta_table(spark, location) and \
                REPLAY_ID not in read_table(spark, location).columns:
            add_columns(spark, location, [field])

