"""Change data from full snapshots (``snapshot_by`` in ``upsert:`` or ``scd2:``): the inserts,
updates and deletes between consecutive snapshots of an entity, applied as SCD type 1 or 2 by
:mod:`framework.changes`.

Each source row belongs to one *snapshot*: a complete extract of the entity, named and ordered by
its ``snapshot_by`` value (an extract date, say, or an expression over bronze's ``_source_file``
listed in ``columns:``). Each distinct snapshot id in a micro-batch is taken for one whole
snapshot: a snapshot must arrive whole in one upstream commit (one file per extract, or a folder
landed at once, read by bronze without ``max_files_per_trigger``), and silver reads whole
upstream commits (a file or byte limit on its source, which can split a commit of several
files, is applied with a warning).

How a micro-batch is applied:

1. **Order.** The newest snapshot id in the change log before the batch is looked up; for a
   batch replayed after a crash, in the log as it was just before the batch's own commit (found
   by its tag), so the replay decides as the first run did. The rows of an older snapshot are
   quarantined (rule ``snapshot_in_order``, counted as any rule): a late extract is never
   applied over newer ones, nor dropped silently. A snapshot with that newest id is a
   re-delivery (or the batch's replay): it derives events the log holds already and changes
   nothing. An older snapshot delivered again is out of order too: the log cannot tell it from
   a late one (one that left no change leaves no trace). A row without a snapshot id is
   quarantined (``has_<snapshot_by>``), as a change without a sequence is.
2. **Derivation** (:meth:`SnapshotApplier.classify`). The batch's snapshots are compared in
   ascending order, each with the state just before it: the batch's previous snapshot, or for
   the first one the state the log's events *older than it* give (each key's newest such event:
   an upsert leaves its values, a delete nothing). Older than it, not all of them: a replayed
   snapshot, whose events are logged already, is compared with the same state as the first
   time, and derives the same events. A key new or with changed values (any column but the keys
   and the snapshot id) is an **upsert** at the snapshot id; a key present before and absent now
   is a **delete** there. One window over each key's rows (its state before the batch, then its
   row in each snapshot) finds both, whatever the number of snapshots. Of two different rows of
   a key in one snapshot (a contradiction in the extract) the greatest by its JSON text is
   taken, so the choice does not depend on arrival.
3. **Application** as any change data (:class:`ChangeApplier`). The log keeps every event, for
   SCD type 1 too: the state before a snapshot is a function of the log's history, not of each
   key's newest event alone. A snapshot equal to the state before it writes nothing.

The table is thus the SCD1 or SCD2 table of the events derived from the snapshots in order: in
SCD2 ``__start_at`` and ``__end_at`` are snapshot ids (where a version appeared, and where it
changed or was gone); the ``snapshot_by`` column is kept as ``sequence_by`` is (the snapshot of
the key's newest change).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType

from framework.changes import OP, ChangeApplier, ChangeOp
from framework.delta import read_table

IN_ORDER = "_snapshot_in_order"  # a column the batch carries until the rules are evaluated
IN_ORDER_RULE = "snapshot_in_order"
_NEWEST, _POS, _NEXT, _PREV_POS, _PREV, _NEXT_POS, _EVENT = \
    "_newest", "_pos", "_next", "_prev_pos", "_prev", "_next_pos", "_event"


class SnapshotApplier(ChangeApplier):
    """Applies micro-batches of full snapshots to one table (``location``): derives their
    events (:meth:`classify`) and applies them through the change log (``log_location``)."""

    # ------------------------------------------------------------------ order
    def newest_applied(self, spark: SparkSession, replayed_at: int | None) -> Any:
        """The newest snapshot id in the change log (None while it has none); for a batch
        replayed after a crash (``replayed_at``: the log's version its own commit made), as the
        log was just before it."""
        version = replayed_at - 1 if replayed_at is not None else None
        row = read_table(spark, self.logged_at, version=version).agg(F.max(self.seq)).first()
        return row[0] if row is not None else None

    def mark_order(self, batch: DataFrame, newest: Any) -> DataFrame:
        """``batch`` with the column :data:`IN_ORDER`: false for the rows of a snapshot older
        than ``newest`` (the newest applied), else true (a row without an id too: the rule
        ``has_<snapshot_by>`` quarantines it)."""
        # A value collected from Spark goes back through a DataFrame of its own type: a literal
        # of the Python value would infer its type (a TIMESTAMP_NTZ would pass the time zone).
        kind = batch.schema[self.seq].dataType
        applied = batch.sparkSession.createDataFrame(
            [(newest,)], StructType([StructField(_NEWEST, kind)]))
        snapshot = F.col(self.seq)
        in_order = F.col(_NEWEST).isNull() | snapshot.isNull() | (snapshot >= F.col(_NEWEST))
        return batch.crossJoin(F.broadcast(applied)).withColumn(IN_ORDER, in_order) \
            .drop(_NEWEST)

    # ------------------------------------------------------------------ derivation
    def classify(self, batch: DataFrame) -> DataFrame:
        """The events between the batch's snapshots (its rows: in order, each with an id), in
        the log's columns (the batch's but the ``except_columns``, then ``_op``), a delete's
        values null."""
        rows = batch.drop(*self.changes.except_columns)
        columns = rows.columns
        values = [c for c in columns if c not in (*self.keys, self.seq)]
        kind = rows.schema[self.seq].dataType
        ids = [r[0] for r in rows.select(self.seq).distinct().orderBy(self.seq).collect()]
        if not ids:
            return rows.withColumn(OP, F.lit(ChangeOp.UPSERT.value)).limit(0)
        spark = rows.sparkSession
        # Each snapshot's place in the batch (1, 2, ...) and the id of the one after it.
        positions = spark.createDataFrame(
            [(s, i + 1, ids[i + 1] if i + 1 < len(ids) else None) for i, s in enumerate(ids)],
            StructType([StructField(self.seq, kind), StructField(_POS, IntegerType()),
                        StructField(_NEXT, kind)]))
        snapshots = rows.join(F.broadcast(positions), self.seq) \
            .select(*self.keys, *values, self.seq, _POS, _NEXT)
        first = positions.where(F.col(_POS) == 1).select(F.col(self.seq).alias(_NEXT))
        both = snapshots.unionByName(self._state_before(first, values), allowMissingColumns=True)

        text = F.to_json(F.struct(*values)) if values else F.lit("")
        state = F.struct(*values) if values else F.lit(True)
        # One row per key and place: of two rows of a key in one snapshot, the greatest.
        ranked = Window.partitionBy(*self.keys).orderBy(_POS, text.desc())
        both = both.withColumn(_PREV_POS, F.lag(_POS).over(ranked)) \
            .where(F.col(_PREV_POS).isNull() | (F.col(_PREV_POS) != F.col(_POS)))
        order = Window.partitionBy(*self.keys).orderBy(_POS)
        steps = both.select(*self.keys, *values, self.seq, _POS, _NEXT,
                            F.lag(_POS).over(order).alias(_PREV_POS),
                            F.lag(state).over(order).alias(_PREV),
                            F.lead(_POS).over(order).alias(_NEXT_POS))
        pos, prev_pos, next_pos = F.col(_POS), F.col(_PREV_POS), F.col(_NEXT_POS)
        # In a snapshot, and absent just before it or with other values: an upsert at its id.
        upsert = (pos > 0) & (prev_pos.isNull() | (prev_pos != pos - 1)
                              | ~F.col(_PREV).eqNullSafe(state))
        # Present (in a snapshot or before the batch), absent from the next: a delete there.
        delete = F.col(_NEXT).isNotNull() & (next_pos.isNull() | (next_pos != pos + 1))

        def event(op: ChangeOp, at: Column) -> list[Column]:
            def value(c: str) -> Column:
                if c == self.seq:
                    return at
                if c in self.keys or op is ChangeOp.UPSERT:
                    return F.col(c)
                return F.lit(None).cast(rows.schema[c].dataType)
            return [*[value(c).alias(c) for c in columns], F.lit(op.value).alias(OP)]

        return steps.where(upsert).select(*event(ChangeOp.UPSERT, F.col(self.seq))) \
            .unionByName(steps.where(delete).select(*event(ChangeOp.DELETE, F.col(_NEXT))))

    def _state_before(self, first: DataFrame, values: list[str]) -> DataFrame:
        """The keys present before the batch's first snapshot (``first``: its id, as column
        ``_next``), with their values: each key's newest event in the log older than it, when
        an upsert (a delete wins a tie, then the greatest values by JSON text, as in SCD2's
        fold); place 0, followed by the first snapshot."""
        log = read_table(first.sparkSession, self.logged_at)
        removal = F.col(OP) != ChangeOp.UPSERT.value
        text = F.to_json(F.struct(*values)) if values else F.lit("")
        newest = log.crossJoin(F.broadcast(first)).where(F.col(self.seq) < F.col(_NEXT)) \
            .groupBy(*self.keys).agg(F.max_by(F.struct(*values, OP, _NEXT),
                                              F.struct(self.seq, removal, text)).alias(_EVENT))
        return newest.where(F.col(f"{_EVENT}.{OP}") == ChangeOp.UPSERT.value).select(
            *self.keys, *[F.col(f"{_EVENT}.{c}").alias(c) for c in values],
            F.lit(0).alias(_POS), F.col(f"{_EVENT}.{_NEXT}").alias(_NEXT))
