"""Change data: the one component that writes rows by key, for every layer.

A table whose rows are changes to keys (:class:`KeyedChanges`) is written by a
:class:`ChangeApplier`, micro-batch by micro-batch: silver's ``upsert:`` (SCD type 1, with or
without removals) and ``scd2:`` (SCD type 2), the changes silver derives from full snapshots,
and gold's aggregates in update mode (by window and keys, with no sequence: a batch's row
replaces its key's).

Each source row is an *event* of one key (the ``keys`` columns) at one ``sequence`` (the
``sequence_by`` column: the order of the changes at the source, not of their arrival):

- a **truncate** (the ``truncates`` condition holds) removes every key at its sequence (every
  row of sequence at most its own, nothing newer); its key and values are ignored;
- a **delete** (the ``deletes`` condition holds) removes its key at its sequence; its values are
  ignored;
- any other row is an **upsert**: its values replace the key's.

Of a key's events at one sequence a removal wins; identical events count once. A removal counts
at its sequence even when it arrives before what it removes (a *tombstone*): an upsert older
than a delete never brings its key back, whenever it arrives.

An SCD1 table holds, per key, the row of its newest event when that is an upsert. An SCD2 table
holds one row per *version* of a key, with four columns of its own: ``__start_at`` (the sequence
of the event that opened the version), ``__end_at`` (of the event that closed it: a change of a
tracked column, or a removal; null while current), ``__is_current`` (``__end_at`` is null) and
``__deleted`` (a delete or truncate closed it).

A version opens when a tracked column changes (``track_history``: those columns;
``track_history_except``: every column but those; neither: every column but the keys and the
sequence). An upsert that changes only untracked columns updates the open version in place, so a
version holds the untracked values of its newest event. A removal closes the open version and
adds no row; the key's next upsert opens a new one. The ``sequence_by`` column is kept (the
sequence of the version's newest event) but never tracked.

A micro-batch is applied so that the table depends only on the *set* of events seen, not on
their order of arrival or where batches were cut, and a replayed batch changes nothing:

1. Each row is classified (column ``_op``: upsert, delete or truncate); a removal's values are
   cleared, so a removal is its key and sequence alone.
2. The events are merged into the table's change log, ``<table>_changes`` (a Delta table beside
   it): for SCD2 every distinct event, for SCD1 each key's newest event and the truncates.
   Merging an event the log already holds changes nothing.
3. The keys the batch names (every key, when it holds a truncate) are recomputed from the log:
   a key's version history is a function of its events, so a late event lands at its place
   (the versions around it split and their ``__end_at`` corrected). In SCD2 a key whose events
   in the batch are all newer than every event the log held of it (and than every truncate)
   cannot change before its current version: it is folded forward from that version alone,
   which is what a stream in order costs. This is decided before the batch's events reach the
   log, so a replayed batch, whose events the log holds already, recomputes every key it names.
4. One MERGE writes the difference between the recomputed rows and the table's rows of those
   keys (inserted, updated, deleted): empty for a batch already applied.

The log is what a late event needs: the table alone does not say what a split version held
before the event (its untracked values are its newest event's), nor where tombstones lie.
Without removals, versions or snapshots (a plain SCD1 upsert) no log is kept: the table, holding
each key's newest event, is its own log, and a batch is one MERGE of each key's newest row,
which replaces the table's when its sequence is greater (without a sequence, always).

A source of full snapshots (``snapshot_by`` in place of ``sequence_by``) has no events of its
own: :mod:`silver.snapshots` derives them in place of step 1 (an upsert of each key new or
changed in a snapshot, a delete of each key gone from it, at the snapshot's id), and its log
keeps every event for SCD1 too (``every_event``: the state before a snapshot is read from the
log's history). Steps 2 to 4 are the same.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StringType, StructField, StructType

from framework.delta import merge, merge_clauses, read_table
from framework.identifiers import quote

OP = "_op"
START_AT, END_AT, IS_CURRENT, DELETED = "__start_at", "__end_at", "__is_current", "__deleted"
SCD2_COLUMNS = (START_AT, END_AT, IS_CURRENT, DELETED)
_ACTION, _REMOVAL, _VERSION, _NEXT_SEQ, _NEXT_REMOVAL = \
    "_action", "_removal", "_version", "_next_seq", "_next_removal"


class ChangeOp(StrEnum):
    """What an event does to its key."""

    UPSERT = "upsert"
    DELETE = "delete"
    TRUNCATE = "truncate"


@dataclass(frozen=True)
class KeyedChanges:
    """What makes a table's rows changes to keys (see the module's text): the ``keys``, the
    ``sequence`` column ordering a key's events (None: a batch's row replaces its key's), the
    SQL conditions of a ``deletes`` and a ``truncates`` row, the ``except_columns`` read but
    not written, whether the table keeps ``versions`` (SCD type 2, with the columns it tracks)
    and whether the events are derived from ``snapshots``."""

    keys: tuple[str, ...]
    sequence: str | None = None
    deletes: str | None = None
    truncates: str | None = None
    except_columns: tuple[str, ...] = ()
    versions: bool = False
    track_history: tuple[str, ...] | None = None
    track_history_except: tuple[str, ...] | None = None
    snapshots: bool = False

    @property
    def logged(self) -> bool:
        """Whether the changes go through a change log beside the table (removals, versions or
        snapshots); without one, the table is its own log."""
        return bool(self.deletes or self.truncates or self.versions or self.snapshots)


def table_schema(changes: KeyedChanges, rows: StructType) -> StructType:
    """The table's schema for source rows of schema ``rows``: their columns but the
    ``except_columns``, then (SCD2) the four version columns."""
    fields = [f for f in rows.fields if f.name not in changes.except_columns]
    if changes.versions:
        seq = next(f.dataType for f in fields if f.name == changes.sequence)
        fields += [StructField(START_AT, seq), StructField(END_AT, seq),
                   StructField(IS_CURRENT, BooleanType()), StructField(DELETED, BooleanType())]
    return StructType(fields)


def log_schema(changes: KeyedChanges, rows: StructType) -> StructType:
    """The change log's schema: the table's data columns and ``_op``."""
    fields = [f for f in table_schema(changes, rows).fields if f.name not in SCD2_COLUMNS]
    return StructType([*fields, StructField(OP, StringType())])


class ChangeApplier:
    """Applies micro-batches of events to one table (``location``) through its change log
    (``log_location``: given exactly when the changes are :attr:`KeyedChanges.logged`)."""

    def __init__(self, changes: KeyedChanges, location: str,
                 log_location: str | None = None) -> None:
        if changes.logged != (log_location is not None):
            raise ValueError(f"expected a change log exactly for logged changes, found "
                             f"logged={changes.logged} and log_location={log_location!r}")
        self.changes = changes
        self.location = location
        self.log_location = log_location
        self.scd2 = changes.versions
        self.keys = list(changes.keys)
        self.seq = changes.sequence or ""
        # The log keeps every event (SCD2's history needs them, and the state before a
        # snapshot is read from the log's history); else each key's newest.
        self.every_event = changes.versions or changes.snapshots

    @property
    def logged_at(self) -> str:
        """The change log's location (of logged changes)."""
        if self.log_location is None:
            raise ValueError("expected logged changes, found changes without a log")
        return self.log_location

    # ------------------------------------------------------------------ one batch
    def apply(self, batch: DataFrame,
              append: Callable[[DataFrame, str], None] | None = None, *,
              truncated: bool = False) -> dict[str, int]:
        """Apply ``batch`` (source rows, already typed and checked); returns MERGE's figures
        on the table (and for SCD2 without a truncate, how many keys were folded forward and
        how many recomputed, see :meth:`_versions_ahead`). ``append(df, location)`` appends
        rows to a table once (the job's commit tagged with the batch). ``truncated``: the batch
        holds a truncate (the job counts them), so every key is recomputed. Without a log
        (:meth:`_upsert`) ``append`` is not used."""
        if self.log_location is None:
            return self._upsert(batch)
        assert append is not None
        # Materialized once: the log's append and the keys below both read them, and deriving
        # them can cost a shuffle, or a read of the log (a snapshot's).
        events = self.classify(batch).dropDuplicates().localCheckpoint(eager=True)
        spark = batch.sparkSession
        # SCD2: which keys are ahead of the log, read before the batch's events are added.
        forward = self.scd2 and not truncated
        ahead, counts = self._ahead(events) if forward else (None, {})
        if not counts.get(False):
            ahead = None  # (every key is ahead)
        self._log(events, append)
        log = read_table(spark, self.logged_at)
        table = read_table(spark, self.location)
        if forward:
            figures = self._write_difference(
                table, *self._versions_ahead(log, table, events, ahead))
            return {**figures, "keys_folded_forward": counts.get(True, 0),
                    "keys_recomputed": counts.get(False, 0)}
        # The keys to recompute: the batch's (broadcast: as many as the batch's rows at most,
        # so the log and the table are read without a shuffle), or every key after a truncate.
        keys = None if truncated else F.broadcast(
            events.where(F.col(OP) != ChangeOp.TRUNCATE.value).select(*self.keys))
        rows = self._versions(log, keys) if self.scd2 else self._latest(log, keys)
        return self._write_difference(table, rows, self._of_keys(table, keys))

    def _upsert(self, batch: DataFrame) -> dict[str, int]:
        """Without a log: each key's newest row of the batch (a row without a sequence last),
        merged where the key is new or its row older; without a sequence column, every row
        replaces its key's (the batch holds one per key)."""
        on = " AND ".join(f"t.{quote(k)} <=> s.{quote(k)}" for k in self.keys)
        newer = None
        rows = batch
        if self.changes.sequence:
            latest = Window.partitionBy(*self.keys).orderBy(F.col(self.seq).desc_nulls_last())
            rows = rows.withColumn("_rank", F.row_number().over(latest)).where("_rank = 1") \
                .drop("_rank")
            seq = quote(self.seq)
            newer = f"s.{seq} > t.{seq} OR t.{seq} IS NULL"
        # MERGE may read its source twice: the batch's computation (a stateful one, say) runs once
        source = rows.drop(*self.changes.except_columns).persist()
        try:
            return merge(source, self.location, on, update_when=newer)
        finally:
            source.unpersist()

    def truncate_condition(self) -> Column | None:
        """Which source rows are truncates (None: the table takes none)."""
        return F.coalesce(F.expr(self.changes.truncates), F.lit(False)) \
            if self.changes.truncates else None

    def classify(self, batch: DataFrame) -> DataFrame:
        """The batch's rows as events: ``_op`` added, a removal's values cleared, the
        ``except_columns`` dropped."""
        changes = self.changes
        op: Column = F.lit(ChangeOp.UPSERT.value)
        if changes.deletes:
            op = F.when(F.coalesce(F.expr(changes.deletes), F.lit(False)),
                        F.lit(ChangeOp.DELETE.value)).otherwise(op)
        truncate = self.truncate_condition()
        if truncate is not None:
            op = F.when(truncate, F.lit(ChangeOp.TRUNCATE.value)).otherwise(op)
        df = batch.withColumn(OP, op).drop(*changes.except_columns)
        kept = {ChangeOp.DELETE.value: {*self.keys, self.seq},
                ChangeOp.TRUNCATE.value: {self.seq}}
        columns = []
        for c in df.columns:
            if c in (OP, self.seq):
                columns.append(F.col(c))
                continue
            clear = [name for name, cols in kept.items() if c not in cols]
            columns.append(F.when(F.col(OP).isin(*clear), F.lit(None).cast(
                df.schema[c].dataType)).otherwise(F.col(c)).alias(c) if clear else F.col(c))
        return df.select(*columns)

    def _log(self, events: DataFrame, append: Callable[[DataFrame, str], None]) -> None:
        """Add the events to the change log. SCD2's log (and any that keeps ``every_event``)
        takes every event, appended once per batch: an event delivered again in another batch
        is kept twice, which changes nothing (a key's events are folded one per sequence).
        SCD1's keeps each key's newest event."""
        columns = events.columns
        if self.every_event:
            append(events, self.logged_at)
            return
        # SCD1: a key's newest event (a removal wins a tie), and every truncate.
        removal = F.col(OP) != ChangeOp.UPSERT.value
        newest = Window.partitionBy(*self.keys, F.col(OP) == ChangeOp.TRUNCATE.value) \
            .orderBy(F.col(self.seq).desc(), removal.desc(), F.to_json(F.struct(*columns)).desc())
        events = events.withColumn("_rank", F.row_number().over(newest)) \
            .where((F.col("_rank") == 1) | (F.col(OP) == ChangeOp.TRUNCATE.value)).drop("_rank")
        keys = " AND ".join(f"t.{quote(k)} <=> s.{quote(k)}" for k in self.keys)
        op, seq = quote(OP), quote(self.seq)
        truncate = sql_op(ChangeOp.TRUNCATE)
        on = (f"{keys} AND (t.{op} = {truncate}) = (s.{op} = {truncate}) "
              f"AND (s.{op} <> {truncate} OR t.{seq} = s.{seq})")
        newer = (f"s.{op} <> {truncate} AND (s.{seq} > t.{seq} OR (s.{seq} = t.{seq} "
                 f"AND s.{op} = {sql_op(ChangeOp.DELETE)} AND t.{op} = {sql_op(ChangeOp.UPSERT)}))")
        merge_clauses(events, self.logged_at, on,
                      [f"WHEN MATCHED AND {newer} THEN UPDATE SET *",
                       "WHEN NOT MATCHED THEN INSERT *"])

    # ------------------------------------------------------------------ recomputation
    def _of_keys(self, df: DataFrame, keys: DataFrame | None) -> DataFrame:
        """The rows of ``df`` whose key is among ``keys`` (nulls equal; None: every row)."""
        return df if keys is None else df.join(keys, same_values(df, keys, self.keys),
                                               "left_semi")

    def _latest(self, log: DataFrame, keys: DataFrame | None) -> DataFrame:
        """SCD1: each key's row, when its newest event is an upsert newer than every truncate."""
        rows = self._of_keys(log.where(F.col(OP) != ChangeOp.TRUNCATE.value), keys)
        if self.every_event:  # a key's newest event: a removal wins a tie, then (a
            # contradiction at the source) the greatest values by their JSON text, as SCD2's
            values = [c for c in rows.columns if c not in (*self.keys, self.seq, OP)]
            newest = Window.partitionBy(*self.keys).orderBy(
                F.col(self.seq).desc(), (F.col(OP) != ChangeOp.UPSERT.value).desc(),
                *([F.to_json(F.struct(*values)).desc()] if values else []))
            rows = rows.withColumn("_rank", F.row_number().over(newest)) \
                .where("_rank = 1").drop("_rank")
        live = F.col(OP) == ChangeOp.UPSERT.value
        if self.changes.truncates:
            last = log.where(F.col(OP) == ChangeOp.TRUNCATE.value) \
                .agg(F.max(self.seq).alias("_truncated_at"))
            rows = rows.crossJoin(last)
            live = live & (F.col("_truncated_at").isNull()
                           | (F.col(self.seq) > F.col("_truncated_at")))
        return rows.where(live).drop(OP, "_truncated_at")

    def _versions(self, log: DataFrame, keys: DataFrame | None) -> DataFrame:
        """SCD2: each key's versions, folded from its events in sequence order."""
        # Every step below groups by key (a key and sequence, a key, a key and version): one
        # shuffle by key serves them all.
        events = self._of_keys(log.where(F.col(OP) != ChangeOp.TRUNCATE.value), keys)
        if self.changes.truncates:  # a truncate is a removal of every key at its sequence
            truncates = log.where(F.col(OP) == ChangeOp.TRUNCATE.value).select(self.seq, OP)
            present = events.select(*self.keys).distinct()
            events = events.unionByName(present.crossJoin(truncates), allowMissingColumns=True)
        events = events.repartition(*self.keys)
        values = [c for c in events.columns if c not in (*self.keys, self.seq, OP)]
        tracked = self._tracked(values)
        steps = events.withColumn(_REMOVAL, F.col(OP) != ChangeOp.UPSERT.value)
        # One step per key and sequence: a removal wins; of different upserts (a contradiction
        # at the source), the greatest by their JSON text, so the choice does not depend on
        # arrival. (The first row of each sequence in this order: the same window as the
        # fold's below, so one sort serves both.)
        first = Window.partitionBy(*self.keys).orderBy(
            F.col(self.seq), F.col(_REMOVAL).desc(), F.to_json(F.struct(*values)).desc())
        steps = steps.withColumn("_first", ~F.lag(self.seq).over(first).eqNullSafe(
            F.col(self.seq))).where("_first").drop("_first")
        order = Window.partitionBy(*self.keys).orderBy(self.seq)
        state = F.struct(*tracked) if tracked else F.lit(True)
        previous_removal = F.lag(_REMOVAL).over(order)
        opens = ~F.col(_REMOVAL) & (previous_removal.isNull() | previous_removal
                                    | ~F.lag(state).over(order).eqNullSafe(state))
        running = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        steps = steps.select(
            "*",
            F.sum(opens.cast("int")).over(running).alias(_VERSION),
            F.lead(self.seq).over(order).alias(_NEXT_SEQ),
            F.lead(_REMOVAL).over(order).alias(_NEXT_REMOVAL),
        ).where(~F.col(_REMOVAL))
        last = F.max_by(F.struct(*values, _NEXT_SEQ, _NEXT_REMOVAL, self.seq), F.col(self.seq))
        versions = steps.groupBy(*self.keys, _VERSION).agg(
            F.min(self.seq).alias(START_AT), last.alias("_last"))
        return versions.select(
            *self.keys,
            *[F.col(f"_last.{c}").alias(c) for c in values],
            F.col(f"_last.{self.seq}").alias(self.seq),
            F.col(START_AT),
            F.col(f"_last.{_NEXT_SEQ}").alias(END_AT),
            F.col(f"_last.{_NEXT_SEQ}").isNull().alias(IS_CURRENT),
            F.coalesce(F.col(f"_last.{_NEXT_REMOVAL}"), F.lit(False)).alias(DELETED),
        )

    def _ahead(self, events: DataFrame) -> tuple[DataFrame | None, dict[bool, int]]:
        """The batch's keys (no truncate in ``events``), with ``_ahead``: every event of the
        batch is newer than all the log holds of the key and than every truncate; None when
        every key is. Computed eagerly, as the log is about to take the batch's events. With
        how many keys are ahead (True) and how many not (False)."""
        log = read_table(events.sparkSession, self.logged_at)
        batch = events.groupBy(*self.keys).agg(F.min(self.seq).alias("_first_seq"))
        # A batch entirely newer than the log (a stream in order): every key is ahead, which
        # the log's newest sequence tells from its files' statistics, without reading it by key.
        newest = log.agg(F.max(self.seq).alias("_known"))
        first = events.agg(F.min(self.seq).alias("_first_seq"),
                           F.count_distinct(F.struct(*self.keys)).alias("_keys"))
        whole = first.crossJoin(newest).select(
            F.col("_known").isNull() | (F.col("_first_seq") > F.col("_known")), "_keys").first()
        if whole is not None and whole[0]:
            return None, {True: int(whole[1])}
        keys = F.broadcast(batch.select(*self.keys))
        known = self._of_keys(log.where(F.col(OP) != ChangeOp.TRUNCATE.value), keys) \
            .groupBy(*self.keys).agg(F.max(self.seq).alias("_known"))
        b, k = batch.alias("b"), known.alias("k")
        joined = b.join(k, same_values(b, k, self.keys), "left").select(
            *[F.col(f"b.{c}").alias(c) for c in self.keys], "_first_seq", "_known")
        ahead = F.col("_known").isNull() | (F.col("_first_seq") > F.col("_known"))
        if self.changes.truncates:
            last = log.where(F.col(OP) == ChangeOp.TRUNCATE.value) \
                .agg(F.max(self.seq).alias("_truncated_at"))
            joined = joined.crossJoin(F.broadcast(last))
            ahead = ahead & (F.col("_truncated_at").isNull()
                             | (F.col("_first_seq") > F.col("_truncated_at")))
        joined = joined.select(*self.keys, F.coalesce(ahead, F.lit(False)).alias("_ahead")) \
            .localCheckpoint(eager=True)
        return joined, {bool(r[0]): int(r[1])
                        for r in joined.groupBy("_ahead").count().collect()}

    def _versions_ahead(self, log: DataFrame, table: DataFrame, events: DataFrame,
                        ahead: DataFrame | None
                        ) -> tuple[DataFrame | None, DataFrame | None, DataFrame]:
        """SCD2 without a truncate in the batch: the versions recomputed from the log and the
        table's rows they replace (None, None when no key needs it), and the versions folded
        forward. A key ``ahead`` (a stream in order) changes from its current version on, so only
        that is folded: the current version (as two upserts: its start and its newest event), then
        the batch's events. Each folded version is new or changes the current one, and the key's
        other versions cannot change: they are written as they are, without comparison. Any other
        key is recomputed from its whole history in the log (``ahead`` None: every key is ahead)."""
        if ahead is None:
            forward = F.broadcast(events.select(*self.keys))
            batch = events
        else:
            forward = F.broadcast(ahead.where("_ahead").select(*self.keys))
            batch = self._of_keys(events, forward)
        current = self._of_keys(table, forward).where(F.col(IS_CURRENT))
        columns = [c for c in log.columns if c != OP]
        upsert = F.lit(ChangeOp.UPSERT.value).alias(OP)
        started = current.select(*[F.col(START_AT if c == self.seq else c).alias(c)
                                   for c in columns], upsert)
        newest = current.select(*columns, upsert)
        # (a column the batch lacks and the log has: null, as the log's append leaves it)
        folded = self._versions(
            batch.select(*[c for c in columns if c in batch.columns], OP)
            .unionByName(started, allowMissingColumns=True)
            .unionByName(newest, allowMissingColumns=True), None)
        if ahead is None:  # (the log is not read)
            return None, None, folded
        back = F.broadcast(ahead.where(~F.col("_ahead")).select(*self.keys))
        return self._versions(log, back), self._of_keys(table, back), folded

    def _tracked(self, values: list[str]) -> list[str]:
        changes = self.changes
        if changes.track_history is not None:
            return list(changes.track_history)
        excluded = set(changes.track_history_except or ())
        return [c for c in values if c not in excluded]

    # ------------------------------------------------------------------ the write
    def _write_difference(self, table: DataFrame, rows: DataFrame | None,
                          current: DataFrame | None, upserts: DataFrame | None = None
                          ) -> dict[str, int]:
        """One MERGE into ``table`` that makes its rows of the recomputed keys (``current``)
        equal ``rows``, and writes ``upserts`` (rows known to be new or changed) as they are."""
        match = [*self.keys, START_AT] if self.scd2 else list(self.keys)
        columns = table.columns
        rest = [c for c in columns if c not in match]
        parts = []
        if rows is not None and current is not None:
            parts.append(self._difference(rows.select(*columns), current, match, rest))
        if upserts is not None:
            parts.append(upserts.select(*columns, F.lit("upsert").alias(_ACTION)))
        diff = reduce(DataFrame.unionByName, parts)
        # The difference (reading the table and the log) computed once, eagerly, into the
        # executors' storage: MERGE reads its source more than once, and plans over these rows
        # instead of the recomputation's plan, which took longer to plan than to run. Should an
        # executor holding them be lost, the MERGE fails and the rerun batch recomputes the same
        # difference (a batch's application is idempotent).
        diff = diff.localCheckpoint(eager=True)
        on_sql = " AND ".join(f"t.{quote(c)} <=> s.{quote(c)}" for c in match)
        assignments = ", ".join(f"{quote(c)} = s.{quote(c)}" for c in rest)
        names = ", ".join(quote(c) for c in columns)
        values = ", ".join(f"s.{quote(c)}" for c in columns)
        clauses = [f"WHEN MATCHED AND s.{_ACTION} = 'delete' THEN DELETE"]
        if rest:
            clauses.append(f"WHEN MATCHED AND s.{_ACTION} IN ('update', 'upsert') THEN UPDATE "
                           f"SET {assignments}")
        clauses.append(f"WHEN NOT MATCHED AND s.{_ACTION} IN ('insert', 'upsert') THEN INSERT "
                       f"({names}) VALUES ({values})")
        return merge_clauses(diff, self.location, on_sql, clauses)

    def _difference(self, rows: DataFrame, current: DataFrame, match: list[str],
                    rest: list[str]) -> DataFrame:
        """The rows to insert, update, delete (column ``_action``) making ``current`` ``rows``."""
        columns = current.columns
        new, old = rows.alias("n"), current.alias("o")
        same = F.struct(*[F.col(f"n.{c}") for c in rest]).eqNullSafe(
            F.struct(*[F.col(f"o.{c}") for c in rest])) if rest else F.lit(True)
        # Which side a row is missing from: a marker, as keys may themselves be null.
        new = new.withColumn("_in_new", F.lit(True)).alias("n")
        old = old.withColumn("_in_old", F.lit(True)).alias("o")
        action = (F.when(F.col("o._in_old").isNull(), F.lit("insert"))
                  .when(F.col("n._in_new").isNull(), F.lit("delete"))
                  .when(~same, F.lit("update")))
        condition = reduce(operator.and_, [F.col(f"n.{c}").eqNullSafe(F.col(f"o.{c}"))
                                           for c in match])
        return new.join(old, condition, "full_outer").select(
            *[F.coalesce(F.col(f"n.{c}"), F.col(f"o.{c}")).alias(c) if c in match
              else F.col(f"n.{c}").alias(c) for c in columns],
            action.alias(_ACTION),
        ).where(F.col(_ACTION).isNotNull())


def same_values(left: DataFrame, right: DataFrame, columns: list[str]) -> Column:
    """``left``'s ``columns`` equal ``right``'s, null equal to null."""
    return reduce(operator.and_, [left[c].eqNullSafe(right[c]) for c in columns])


def sql_op(op: ChangeOp) -> str:
    return f"'{op.value}'"
