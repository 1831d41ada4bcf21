"""A bronze table rebuilt from the files it was fed (``medallion refresh bronze.<table>``).

The refresh empties the bronze table and its quarantine (``DELETE FROM``: the former rows
stay in the Delta history) and keeps the landing checkpoint and the file ledger. This job then
reads every batch of the ledger again, in batch order (the order the feed was read in), from
where its files are now: the archive (``location``), landing (``clean_source: off``), or a
backfill's folder. Each batch is written under its own batch id, with each row's
``_source_file`` as the first ingestion named it, so bronze holds the rows the first
ingestion gave, but for their ingestion times; the reader is the feed's current one (its
schema and options now: the point of a refresh after a spec change).

The batch's ledger partition is then replaced (one commit): its files get their new counts,
``ingestion = 'refresh'`` and their status and location as before; rows of files that failed
are carried over as they were. Each commit is tagged ``<operation>:<batch>``, so a refresh
killed halfway and completed by the next command skips the batches it wrote (their bronze,
quarantine and ledger commits are found by their tags) and goes on with the next.

Nothing is moved; the landing feed goes on from its checkpoint, after the last batch it read.
A feed whose files were deleted after ingestion (``clean_source: delete``) or purged from the
archive cannot be rebuilt: the refresh refuses before anything is emptied
(:meth:`LedgerReread.problem`, bronze's ``reread`` capability: :mod:`framework.layers`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, cast

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bronze.backfill import in_place
from bronze.batch import SOURCE_FILE, with_file_columns
from bronze.filebatch import FileBatchWriter, Landed
from bronze.job import Feed
from bronze.ledger import BatchCounts, BatchKey, Origin, ledger_frame
from bronze.reconcile import Reconciler
from bronze.spec import BronzeTableSpec, CleanSource, FileStatus, ledger_path
from framework.config.model import Layer, Table
from framework.delta import is_delta_table, read_table, replace_rows, sql_string
from framework.errors import JobError
from framework.job import Job, RunStatus, TableRunSummary
from framework.storage import Storage, local_path, storage_for
from framework.timeslice import TimeSlice

__all__ = ["BronzeReplayJob", "LedgerReread", "ReplayedFiles"]

REFRESH = "refresh"  # the ledger's ``ingestion`` of a file read again by a refresh

# The ledger statuses of a file whose rows are in bronze and that is still there to read
# again: in landing, or archived.
READ_STATUSES = (FileStatus.INGESTED, FileStatus.ARCHIVED)


def replayed(row: dict[str, Any], replay_slice: TimeSlice | None = None) -> bool:
    """Whether a refresh reads a ledger row's file again: it gave rows, is still there to read,
    and was delivered (modified) in ``replay_slice`` when one is given."""
    if row["status"] not in READ_STATUSES or not row["location"] or not (row["rows"] or 0):
        return False
    # (the ledger's times are UTC, read back as naive datetimes)
    delivered = row["modification_time"].replace(tzinfo=UTC).timestamp() * 1000
    return replay_slice is None or replay_slice.takes(delivered)


def ledger_batches(spark: Any, ledger: str) -> dict[int, list[dict[str, Any]]]:
    """The ledger's rows of every batch a query read (landing's and backfills'), by batch."""
    rows = read_table(spark, ledger).where(F.col("batch_id") >= 0).collect()
    batches: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        batches.setdefault(int(row["batch_id"]), []).append(row.asDict())
    return dict(sorted(batches.items()))


class LedgerReread:
    """A file feed's files read again by a refresh, as its ledger lists them
    (:class:`framework.layers.Reread`)."""

    def problem(self, spark: SparkSession, table: Table,
                since: TimeSlice | None) -> str | None:
        """Some file it ingested (delivered in ``since``, when given) is gone: deleted after
        ingestion (``clean_source: delete``), or purged from the archive (its ledger rows say
        where each file is)."""
        if cast(BronzeTableSpec, table.spec).source.clean_source is CleanSource.DELETE:
            return ("its files were deleted after ingestion (clean_source: delete): there is "
                    "nothing to read it again from")
        store = storage_for(table.location, table.env, spark)
        wanted = [r["location"] for r in _replayed(spark, table, since)]
        gone = [p for p in wanted if not store.exists(p)]
        if gone:
            return (f"{len(gone)} of the {len(wanted)} files it ingested are not where its "
                    f"ledger says (purged from the archive?), e.g. {gone[0]}")
        return None

    def where(self, spark: SparkSession, table: Table, since: TimeSlice) -> str | None:
        """The rows of the files delivered in ``since``, by batch and ``_source_file`` (a file
        delivered again under its name is another batch's), in bronze and its quarantine: one
        flat ``IN`` list of the pairs, as the ledger spells each file and as the tables' rows do
        (rows written before ``_source_file`` took the ledger's form spell it as Spark's URI)."""
        chosen = {(int(r["batch_id"]), r["path"]) for r in _replayed(spark, table, since)}
        if not chosen:
            return None
        batches = sorted({batch for batch, _ in chosen})
        pairs = set(chosen)
        for location in (table.location, table.companion_location("quarantine")):
            if not is_delta_table(spark, location):
                continue
            found = read_table(spark, location) \
                .where(F.col("_batch_id").isin(batches)) \
                .select("_batch_id", "_source_file").distinct().collect()
            pairs |= {(int(r[0]), r[1]) for r in found
                      if r[1] is not None and (int(r[0]), ledger_path(r[1])) in chosen}
        listed = ", ".join(f"({batch}L, {sql_string(path)})" for batch, path in sorted(pairs))
        return f"(_batch_id, _source_file) IN ({listed})"


def _replayed(spark: SparkSession, table: Table,
              since: TimeSlice | None) -> list[dict[str, Any]]:
    """The ledger rows of the files a refresh reads again (:func:`replayed`)."""
    ledger = table.companion_location("files")
    if not is_delta_table(spark, ledger):
        return []
    return [r for rows in ledger_batches(spark, ledger).values() for r in rows
            if replayed(r, since)]


@dataclass(frozen=True)
class ReplayedFiles:
    """A refresh's batches (see the module's text), of the files delivered in ``replay_slice``."""

    batches: Mapping[int, list[dict[str, Any]]] = field(default_factory=dict)
    replay_slice: TimeSlice | None = None
    operation: str = ""

    def origin(self, batch_id: int) -> dict[str, str]:
        """The batch's files read again: where each is now -> its path at ingestion."""
        return {local_path(r["location"]): r["path"] for r in self.batches.get(batch_id, [])
                if replayed(r, self.replay_slice)}

    def batch_of(self, query_batch: int) -> BatchKey:
        return BatchKey(Origin.LANDING, query_batch)  # (a landing batch read again)

    def planned(self, writer: FileBatchWriter, key: BatchKey
                ) -> tuple[dict[str, int], tuple[str, ...]]:
        return {path: 0 for path in self.origin(key.stored)}, ()

    def unseen(self, writer: FileBatchWriter, files: dict[str, str], batch_id: int
               ) -> tuple[dict[str, str], tuple[str, ...]]:
        return files, ()  # (it reads the batches' files, none of landing's)

    def file_columns(self, frame: DataFrame, batch_id: int) -> DataFrame:
        """The rows' ``_source_file`` as the first ingestion named it."""
        df = with_file_columns(frame)
        pairs = [F.lit(x) for kv in self.origin(batch_id).items() for x in kv]
        return df.withColumn(SOURCE_FILE, F.coalesce(
            F.create_map(*pairs)[F.col(SOURCE_FILE)], F.col(SOURCE_FILE)))

    def by_location(self, rows: dict[str, int], batch_id: int) -> dict[str, int]:
        location = {path: loc for loc, path in self.origin(batch_id).items()}
        return {location.get(path, path): n for path, n in rows.items()}

    def settle(self, writer: FileBatchWriter, batch_id: int, rows: list[dict[str, Any]],
               counts: BatchCounts, committed: bool) -> tuple[list[dict[str, Any]],
                                                              dict[str, int]]:
        """Replace the batch's ledger partition: the files read again with their new
        counts, as they stood otherwise; the others as they were."""
        if not committed:
            origin = self.origin(batch_id)
            was = self.batches[batch_id]
            before = {local_path(r["location"]): r for r in was
                      if local_path(r["location"] or "") in origin}
            failed = [r for r in rows if r["error"]]
            if failed:  # its rows would be lost: the refresh stays open until it reads
                raise JobError(writer.table.full_name, f"batch {batch_id}",
                               f"expected the files ingested before to be read again, found "
                               f"{failed[0]['path']} failing: {failed[0]['error']}")
            now = [before[local_path(row["path"])]
                   | {k: row[k] for k in ("rows", "good_rows", "quarantined_rows", "notes",
                                          "ingested_at", "updated_at")}
                   | {"ingestion": REFRESH} for row in rows]
            kept = [r for r in was if local_path(r["location"] or "") not in origin]
            writer.log.info("bronze.replay.ledger.replacing", batch_id=batch_id, files=len(now))
            replace_rows(ledger_frame(writer.spark, [*now, *kept]),
                         writer.locations[writer.ledger], f"batch_id = {batch_id}",
                         tag=f"{self.operation}:{batch_id}")
            rows = now
        writer.log.info("bronze.replay.batch.committed", batch_id=batch_id,
                        records=counts.records)
        return rows, {}

    def reconciler(self, spark: SparkSession, storage: Storage, table: Table,
                   log: Any) -> Reconciler:
        return in_place(spark, storage, table, log)


class BronzeReplayJob(Job):
    """The feed's batches read again by its file-batch writer (see the module's text)."""

    layer = Layer.BRONZE

    def __init__(self, spark: SparkSession, table: Table, ctx: Any) -> None:
        super().__init__(spark, table, ctx)
        self.files = storage_for(table.env.root, table.env, spark)
        self.feed = Feed(spark, table, self.log)
        self.source = ReplayedFiles()
        self.written: list[int] = []

    def prepare(self) -> None:
        if self.ctx.operation is None:
            raise JobError(self.table.full_name, "prepare",
                           "expected a refresh to replay bronze's batches, found none")
        super().prepare()
        self.feed.prepare(0)
        batches = ledger_batches(self.spark, self.table.companion_location("files"))
        self.source = ReplayedFiles(batches, self.ctx.reread_slice, self.ctx.operation)

    def execute(self) -> RunStatus:
        self.started = True
        # any batch may have been written before a kill: each looks for its tagged commits
        writer = self.feed.batches_of(
            self.source, replayable=range(0, max(self.source.batches, default=-1) + 1),
            writer_id=self.ctx.operation, log_context=self.log_context, stop=self.ctx.stop,
            storage=self.files)(self.spark)
        for batch_id in self.source.batches:
            if self.ctx.stop.is_set():
                self.log.warning("bronze.replay.stopped", batch_id=batch_id)
                return RunStatus.STOPPED
            files = self.source.origin(batch_id)
            if not files:
                continue
            self.log.info("bronze.replay.batch.started", batch_id=batch_id, files=len(files))
            landed: Landed = self._step(f"batch {batch_id}", writer.write, None, batch_id)
            self.feed.fold(landed)
            self.written.append(batch_id)
        return RunStatus.SUCCEEDED

    def report(self, summary: TableRunSummary) -> None:
        if self.written:
            summary.batches = len(self.written)
            summary.first_batch, summary.last_batch = self.written[0], self.written[-1]

    def finish(self) -> dict[str, int]:
        return self.feed.counts(self.source.reconciler(self.spark, self.files, self.table,
                                                       self.log),
                                read_ledger=False, seconds=dict(self.recorder.seconds))
