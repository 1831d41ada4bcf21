"""Silver's micro-batch: a pure step from the batch's rows to its :class:`Refined` outcome.

Each micro-batch of a table written in ``foreachBatch`` is written by a :class:`BatchWriter`, made
from a :class:`~framework.microbatch.TableBatches` (the table and what the batches need, decided
before the query starts) where the batches run: in the job's process, or on a Spark Connect server.
It evaluates the expectations (``fail`` raises inside the batch's own computation, so no table of
the batch commits), counts broken rows per rule, drops or quarantines them, and writes the good
rows: appended (one commit per table, tagged with the query and batch: a batch replayed after a
crash appends only where its commit is missing), applied as changes by key (upsert or SCD2,
:mod:`framework.changes`), or written into the batch's partition of a Hive-bucketed parquet table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, cast

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from framework.changes import ChangeApplier, KeyedChanges
from framework.config.checks import HELD, HELD_AT, HELD_BY, HELD_IN, References, Unique
from framework.config.model import Table
from framework.delta import is_delta_table, latest_commit, read_table
from framework.errors import BatchFailedError
from framework.eventtime import describe_seconds, interval_seconds
from framework.identifiers import quote, quote_all, quote_name
from framework.logging import get_logger
from framework.microbatch import Outcome, TableBatches, batch_commits
from framework.quality import batch_results, mark_references, mark_unique, quality_table
from silver.snapshots import IN_ORDER, IN_ORDER_RULE, SnapshotApplier
from silver.spec import Action, Expectation, Scd2, SilverTableSpec, TableFormat, WriteMode

CAST_ERRORS = "_cast_errors"
USER_RAISED = re.compile(r"\[USER_RAISED_EXCEPTION\] (.+?)(?: SQLSTATE|$)", re.MULTILINE)
BATCH_ID = "_batch_id"
# The start of the note a batch's commit carries: the versions of the tables its references
# checks read (``<check>@<version>``, ``-`` for none), for a replay to read them again.
REFERENCED = "refs="
# The source row a silver row was made from (a struct of the upstream row's columns), carried
# beside the row by a table that quarantines, so that a quarantined row can be replayed through
# the table's spec as it is then (:mod:`silver.quarantine`); never written to the table.
SOURCE_ROW = "_source_row"
REPLAY_ID = "_replay_id"
STATE = "_state"


class QuarantineState(StrEnum):
    """Where a quarantined row stands: waiting; taken by a replay not yet completed; sent
    through the table again by a replay (``_replay_id``); set aside for good (``_reason``)."""

    QUARANTINED = "quarantined"
    REPLAYING = "replaying"
    REPLAYED = "replayed"
    DISCARDED = "discarded"


QUARANTINE_SCHEMA = StructType([
    StructField("_row", StringType()),
    StructField("_failed_rules", ArrayType(StringType())),
    StructField(BATCH_ID, LongType()),
    StructField("_quarantined_at", TimestampType()),
    StructField(SOURCE_ROW, StringType()),
    StructField(STATE, StringType()),
    StructField(REPLAY_ID, LongType()),
    StructField("_reason", StringType()),
])


def quarantine_columns(row: Column, failed: Column, batch_id: Column,
                       source: Column | None = None) -> list[Column]:
    """A quarantined row's columns (:data:`QUARANTINE_SCHEMA`), in the state ``quarantined``:
    the row as JSON, the rules it broke, its batch, now, and its source row (JSON) if known."""
    return [row.alias("_row"), failed.alias("_failed_rules"),
            batch_id.cast("long").alias(BATCH_ID), F.current_timestamp().alias("_quarantined_at"),
            (source if source is not None else F.lit(None)).cast("string").alias(SOURCE_ROW),
            F.lit(QuarantineState.QUARANTINED.value).alias(STATE),
            F.lit(None).cast("long").alias(REPLAY_ID), F.lit(None).cast("string").alias("_reason")]


def batch_rules(spec: SilverTableSpec) -> list[Expectation]:
    """The spec's expectations, and those its change data implies: a change without a
    sequence has no place in its key's history, so it is quarantined; so is a snapshot without
    an id, or older than the newest applied (:mod:`silver.snapshots`)."""
    changes, keyed = spec.changes, keyed_changes(spec)
    implicit = []
    if changes and keyed and keyed.logged:
        implicit.append(Expectation(name=f"has_{changes.sequence}", action=Action.QUARANTINE,
                                    rule=f"{quote(changes.sequence)} IS NOT NULL"))
    if changes and changes.snapshot_by is not None:  # (the column: SnapshotApplier.mark_order)
        implicit.append(Expectation(name=IN_ORDER_RULE, rule=quote(IN_ORDER),
                                    action=Action.QUARANTINE))
    checks = [Expectation.model_construct(name=c.check_name, rule=f"NOT {quote(c.column)}",
                                          action=Action(c.action.value))
              for c in spec.batch_checks]
    return [*spec.expectations, *implicit, *checks]


def keyed_changes(spec: SilverTableSpec) -> KeyedChanges | None:
    """The table's rows as changes to keys (``upsert:`` or ``scd2:``), or None."""
    changes = spec.changes
    if changes is None:
        return None
    scd2 = changes if isinstance(changes, Scd2) else None
    return KeyedChanges(
        tuple(changes.keys), changes.sequence, changes.deletes, changes.truncates,
        tuple(changes.except_columns), versions=scd2 is not None,
        track_history=tuple(scd2.track_history) if scd2 and scd2.track_history else None,
        track_history_except=tuple(scd2.track_history_except)
        if scd2 and scd2.track_history_except is not None else None,
        snapshots=changes.snapshot_by is not None)


def change_applier(table: Table) -> ChangeApplier | None:
    """What applies the table's changes (None: its rows are not changes to keys), through its
    change log when it keeps one."""
    keyed = keyed_changes(cast(SilverTableSpec, table.spec))
    if keyed is None:
        return None
    log = table.companion_location("changes") if keyed.logged else None
    return (SnapshotApplier if keyed.snapshots else ChangeApplier)(keyed, table.location, log)


def quarantines(spec: SilverTableSpec) -> bool:
    """Whether rows of the table can be quarantined (a typed column, a quarantine rule)."""
    return any(c.type for c in spec.columns) or spec.holds or \
        any(e.action is Action.QUARANTINE for e in batch_rules(spec))


@dataclass(frozen=True)
class Refined(Outcome):
    """What a batch wrote: its records, those written, quarantined and dropped, the rows
    breaking each rule, and the rows its span of event time put at risk."""

    records: int = 0
    written: int = 0
    quarantined: int = 0
    dropped: int = 0
    held: int = 0
    rule_counts: Mapping[str, int] = field(default_factory=dict)
    rows_at_risk: int = 0


class BatchWriter:
    """Writes the micro-batches of one query run (see the module's text)."""

    def __init__(self, batches: TableBatches, spark: SparkSession) -> None:
        self.table = batches.table
        self.spec = cast(SilverTableSpec, batches.table.spec)
        self.log_context = batches.log_context
        self.rules = batch_rules(self.spec)
        self.typed = any(c.type for c in self.spec.columns)
        self.quarantines = quarantines(self.spec)
        self.applier = change_applier(batches.table)
        self.delay_s = interval_seconds(self.spec.dedup.delay) if self.spec.dedup else 0
        self.commits = batch_commits(batches.table, batches.replayable, spark,
                                     batches.writer_id)
        self.spark = spark
        self.note: str | None = None  # what the batch's commit notes (REFERENCED)

    def write(self, batch: DataFrame, batch_id: int) -> Refined:
        try:
            return self._write(batch, batch_id)
        except BatchFailedError:
            raise
        except Exception as exc:
            raised = USER_RAISED.search(str(exc))
            if not raised:
                raise
            reason = f"{raised.group(1)} (nothing of batch {batch_id} was written)"
            get_logger(**self.log_context).error("silver.expectation.failed",
                                                 batch_id=batch_id, error=reason)
            raise BatchFailedError(self.table.full_name, f"batch {batch_id}", reason) from exc

    # ------------------------------------------------------------------ the batch
    def _write(self, batch: DataFrame, batch_id: int) -> Refined:
        log = get_logger(**self.log_context, batch_id=batch_id)
        if isinstance(self.applier, SnapshotApplier):
            batch = self._mark_snapshot_order(batch, batch_id, log)
        if not any(isinstance(c, Unique) for c in self.spec.batch_checks):
            return self._refine(batch, batch_id, log)
        source = batch.persist()  # the checks read it twice: its keys' range, then its rows
        try:
            return self._refine(source, batch_id, log)
        finally:
            source.unpersist()

    def _refine(self, batch: DataFrame, batch_id: int, log: Any) -> Refined:
        broken = {e.name: ~F.coalesce(F.expr(e.rule), F.lit(False)) for e in self.rules}
        good_cols = [c for c in batch.columns if c not in (CAST_ERRORS, IN_ORDER, SOURCE_ROW)]
        batch = self._checked(batch, broken, batch_id)
        quarantine, drop = self._verdicts(broken)
        held = self._held(broken, quarantine, drop)
        aggs = self._aggregates(broken, quarantine, drop, held)
        df = self._failing(batch, broken, batch_id)
        # One pass when nothing else is written and the batch cannot be a replay; otherwise
        # the batch is cached so its (stateful) computation runs once for all writes (and for
        # the span check of a table with a watermark).
        if not (self.quarantines or batch_id in self.commits.replayable
                or self.spec.mode is not WriteMode.APPEND or self.spec.dedup is not None):
            observation = Observation(f"silver_{self.table.name}_{batch_id}")
            observed = df.observe(observation, *aggs)
            self._write_good(observed.where(~drop).select(*good_cols), batch_id)
            return self._counted(observation.get, 0, batch_id, log)
        df = df.persist()
        try:
            row = df.agg(*aggs).first()  # a 'fail' rule raises here, before any write
            assert row is not None
            metrics = row.asDict()
            at_risk = self._check_span(df, metrics, log)
            self._write_good(df.where(~quarantine & ~drop & ~held).select(*good_cols), batch_id,
                             truncated=metrics.pop("_truncates", 0) > 0)
            if metrics["quarantined"]:
                self._quarantine(df.where(quarantine), broken, good_cols, batch_id)
            if metrics["held"]:
                self._hold(df.where(held), broken, good_cols, batch_id)
        finally:
            df.unpersist()
        return self._counted(metrics, at_risk, batch_id, log)

    def _checked(self, batch: DataFrame, broken: Mapping[str, Column],
                 batch_id: int) -> DataFrame:
        """``batch`` with a column per table-level check marking the rows that break it
        (:mod:`framework.quality`): of the rows sharing a key, one that no row rule rejects is
        kept first, then the earliest in event time."""
        self.note = None
        checks = self.spec.batch_checks
        if not checks:
            return batch
        quarantined, dropped = self._verdicts(broken, skip={c.check_name for c in checks})
        rejected = quarantined | dropped
        first = [rejected.asc()]
        if self.spec.event_time:
            first.append(F.col(self.spec.event_time).asc_nulls_last())
        unique = [c for c in checks if isinstance(c, Unique)]
        if unique:
            before = self._rows_before(batch.sparkSession, batch_id)
            for check in unique:
                batch = mark_unique(batch, check, before, first=first, rejected=rejected)
        if self.spec.references:
            versions = self._referenced_versions(batch.sparkSession, batch_id)
            for ref in self.spec.references:
                location, version = self._referenced(ref), versions[ref.check_name]
                keys = None if version is None else \
                    read_table(batch.sparkSession, location, version=version)
                batch = mark_references(batch, ref, keys, rejected=rejected)
            self.note = REFERENCED + ",".join(
                f"{name}@{'-' if v is None else v}" for name, v in sorted(versions.items()))
        return batch

    def _referenced(self, check: References) -> str:
        ref = check.references
        return self.table.env.path("tables", ref.layer, ref.table)

    def _referenced_versions(self, spark: SparkSession, batch_id: int) -> dict[str, int | None]:
        """The version of each referenced table this batch judges its rows by (None: no table
        there): those its first run found, for a replayed batch that committed its rows (in
        its commit's note), else the current ones; so a replay decides as its first run did,
        whatever the other table received since."""
        note = self.commits.note(self.table.location, batch_id) or ""
        if note.startswith(REFERENCED):
            return {name: None if v == "-" else int(v) for name, _, v in (
                part.partition("@") for part in note.removeprefix(REFERENCED).split(","))}
        versions: dict[str, int | None] = {}
        for check in self.spec.references:
            location = self._referenced(check)
            commit = latest_commit(spark, location) if is_delta_table(spark, location) else None
            versions[check.check_name] = commit.version if commit is not None else None
        return versions

    def _rows_before(self, spark: SparkSession, batch_id: int) -> DataFrame:
        """The table's rows before this batch, at a fixed version (the batch's own writes
        make Spark compute its cached rows again): the version before the batch's own commit,
        for a batch replayed after a crash that had committed it, else the current one."""
        if self.spec.format is TableFormat.PARQUET:  # a batch's rows are its partition
            return spark.table(quote_name(self.table.full_name)) \
                .where(F.col(BATCH_ID) != F.lit(batch_id))
        location = self.table.location
        own = self.commits.version(location, batch_id) \
            if batch_id in self.commits.replayable else None
        if own is not None:
            return read_table(spark, location, version=own - 1)
        current = latest_commit(spark, location)
        assert current is not None  # (created before the query starts)
        return read_table(spark, location, version=current.version)

    def _held(self, broken: Mapping[str, Column], quarantine: Column,
              drop: Column) -> Column:
        """Whether a row is held (``<table>_held``) for a key another table lacks: broken by
        a hold check, and neither quarantined nor dropped."""
        held: Column = F.lit(False)
        for e in self.rules:
            if e.action is Action.HOLD:
                held = held | broken[e.name]
        return held & ~quarantine & ~drop

    def _hold(self, rows: DataFrame, broken: Mapping[str, Column], good_cols: list[str],
              batch_id: int) -> None:
        """Append the held rows (:mod:`silver.held`), each with the checks that hold it."""
        names = [F.when(broken[e.name], F.lit(e.name)) for e in self.rules
                 if e.action is Action.HOLD]
        self.commits.append(rows.select(
            *good_cols, F.filter(F.array(*names), lambda x: x.isNotNull()).alias(HELD_BY),
            F.current_timestamp().alias(HELD_AT), F.lit(batch_id).cast("long").alias(HELD_IN),
        ), self.table.companion_location(HELD), batch_id)

    def _verdicts(self, broken: Mapping[str, Column],
                  skip: frozenset[str] | set[str] = frozenset()) -> tuple[Column, Column]:
        """Whether a row is quarantined, and whether it is dropped (a row to quarantine is
        kept there, never only dropped), by the rules but those named in ``skip``."""
        quarantine: Column = F.lit(False)
        drop: Column = F.lit(False)
        for e in self.rules:
            if e.name in skip:
                continue
            if e.action is Action.QUARANTINE:
                quarantine = quarantine | broken[e.name]
            elif e.action is Action.DROP:
                drop = drop | broken[e.name]
        if self.typed:
            quarantine = quarantine | (F.size(CAST_ERRORS) > 0)
        return quarantine, ~quarantine & drop

    def _failing(self, batch: DataFrame, broken: Mapping[str, Column],
                 batch_id: int) -> DataFrame:
        """The batch, raising in its own computation at a row that breaks a ``fail`` rule."""
        for e in self.rules:
            if e.action is Action.FAIL:
                message = F.lit(f"expectation {e.name!r} failed in batch {batch_id}: {e.rule}")
                batch = batch.where(F.when(broken[e.name], F.raise_error(message))
                                    .otherwise(True))
        return batch

    def _aggregates(self, broken: Mapping[str, Column], quarantine: Column,
                    drop: Column, held: Column) -> list[Column]:
        """The batch's figures, computed in one pass: records, quarantined, dropped and held
        rows, the rows breaking each rule (a cast is one), truncates, the span of event time."""
        aggs = [
            F.count(F.lit(1)).alias("records"),
            F.count_if(quarantine).alias("quarantined"),
            F.count_if(drop).alias("dropped"),
            F.count_if(held).alias("held"),
            *[F.count_if(broken[e.name]).alias(f"rule:{e.name}") for e in self.rules
              if e.action is not Action.FAIL],
            *[F.count_if(F.array_contains(CAST_ERRORS, f"cast:{c.name}"))
              .alias(f"rule:cast:{c.name}") for c in self.spec.columns if c.type],
        ]
        truncate = self.applier.truncate_condition() if self.applier else None
        if truncate is not None:  # a batch with a truncate recomputes every key
            aggs.append(F.count_if(truncate & ~quarantine & ~drop).alias("_truncates"))
        if self.spec.dedup:
            assert self.spec.event_time is not None  # checked with the config
            aggs += [F.min(self.spec.event_time).alias("_min_event_time"),
                     F.max(self.spec.event_time).alias("_max_event_time")]
        return aggs

    def _quarantine(self, rows: DataFrame, broken: Mapping[str, Column],
                    good_cols: list[str], batch_id: int) -> None:
        """Append the quarantined rows, each as JSON with the rules it broke."""
        names = [F.when(broken[e.name], F.lit(e.name)) for e in self.rules
                 if e.action is not Action.FAIL]
        failed = F.filter(F.array(*names), lambda x: x.isNotNull()) if names else \
            F.array().cast("array<string>")
        if self.typed:
            failed = F.concat(F.col(CAST_ERRORS), failed)
        data = F.to_json(F.struct(*[F.col(c) for c in good_cols]))
        source: Column = F.lit(None).cast("string")
        if SOURCE_ROW in rows.columns:  # (a replay carries it as the JSON it was kept as)
            carried = rows.schema[SOURCE_ROW].dataType
            source = F.col(SOURCE_ROW) if isinstance(carried, StringType) else \
                F.to_json(F.col(SOURCE_ROW))
        self.commits.append(rows.select(*quarantine_columns(data, failed, F.lit(batch_id), source)),
                            self.table.companion_location("quarantine"), batch_id)

    def _counted(self, metrics: Mapping[str, Any], at_risk: int, batch_id: int,
                 log: Any) -> Refined:
        held = int(metrics.get("held") or 0)
        written = metrics["records"] - metrics["quarantined"] - metrics["dropped"] - held
        rule_counts = {k.removeprefix("rule:"): int(v) for k, v in metrics.items()
                       if k.startswith("rule:")}
        if self.spec.batch_checks:
            results = batch_results(self.spark, self.table.full_name, self.spec.batch_checks,
                                    rule_counts, run_id=self.log_context.get("run_id"),
                                    batch_id=batch_id)
            self.commits.append(results, quality_table(self.table.env)[1], batch_id)
        # rows dropped or quarantined are the spec's design; a broken ``warn`` rule is news
        warned = any(rule_counts.get(e.name) for e in self.rules if e.action is Action.WARN)
        event = log.warning if warned else log.info
        event("silver.batch.committed", records=metrics["records"], rows_written=written,
              dropped_rows=metrics["dropped"], quarantined_rows=metrics["quarantined"],
              held_rows=held, broken_rules=rule_counts)
        return Refined(batch_id, records=metrics["records"], written=written,
                       quarantined=metrics["quarantined"], dropped=metrics["dropped"],
                       held=held, rule_counts=rule_counts, rows_at_risk=at_risk)

    def _mark_snapshot_order(self, batch: DataFrame, batch_id: int, log: Any) -> DataFrame:
        """``batch`` with the rule ``snapshot_in_order``'s column, against the newest snapshot
        the change log held before this batch (before its own commit, for a batch replayed after
        a crash, so that it decides as the first run did)."""
        snapshots = cast(SnapshotApplier, self.applier)
        replayed_at = self.commits.version(snapshots.logged_at, batch_id) \
            if batch_id in self.commits.replayable else None
        newest = snapshots.newest_applied(batch.sparkSession, replayed_at)
        log.debug("silver.snapshots.newest_applied", snapshot=str(newest),
                  replayed=replayed_at is not None)
        return snapshots.mark_order(batch, newest)

    def _check_span(self, batch: DataFrame, metrics: dict[str, Any], log: Any) -> int:
        """Warn about a batch whose event time spans more than the watermark's delay, returning
        the rows more than the delay behind its newest one: this batch keeps them, but read in
        a later batch they would have been dropped by the watermark this one sets (as is any
        row of a split upstream commit still to come)."""
        low, high = metrics.pop("_min_event_time", None), metrics.pop("_max_event_time", None)
        if low is None or high is None or (high - low).total_seconds() <= self.delay_s:
            return 0
        assert self.spec.event_time is not None and self.spec.dedup is not None
        behind = F.col(self.spec.event_time) <= \
            F.lit(high) - F.expr(f"INTERVAL {self.delay_s} SECONDS")
        at_risk = batch.where(behind).count()
        log.warning("silver.batch.wide_event_time", span=describe_seconds(
            (high - low).total_seconds()), delay=self.spec.dedup.delay, rows_at_risk=at_risk,
            reason="the batch spans more event time than the watermark's delay: its rows "
                   "more than the delay behind its newest were kept because they came in "
                   "the same batch; read in a later batch they would have been late")
        return at_risk

    def _write_good(self, df: DataFrame, batch_id: int, truncated: bool = False) -> None:
        if self.spec.format is TableFormat.PARQUET:
            # The batch's own partition, overwritten: a replayed batch replaces its rows.
            view = f"_silver_batch_{self.table.name}"
            df.createOrReplaceTempView(view)
            df.sparkSession.sql(
                f"INSERT OVERWRITE TABLE {quote_name(self.table.full_name)} "
                f"PARTITION ({quote(BATCH_ID)} = {int(batch_id)}) "
                f"SELECT {quote_all(df.columns)} FROM {quote(view)}")
            df.sparkSession.catalog.dropTempView(view)
        elif self.applier:
            log = get_logger(**self.log_context)
            if self.applier.log_location is None:
                log.debug("silver.batch.merging", keys=self.applier.keys)
            else:
                log.debug("silver.changes.applying", keys=self.applier.keys,
                          log=self.table.qualified("changes"))
            figures = self.applier.apply(
                df, lambda rows, location: self.commits.append(rows, location, batch_id),
                truncated=truncated)
            log.debug("silver.batch.changes_applied", **figures)
        else:
            self.commits.append(df, self.table.location, batch_id, note=self.note)
