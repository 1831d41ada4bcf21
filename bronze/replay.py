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
(:meth:`BronzeTableSpec.rebuild_problem <bronze.spec.BronzeTableSpec.rebuild_problem>`).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bronze.backfill import InPlace
from bronze.batch import SOURCE_FILE, with_file_columns
from bronze.job import BronzeJob
from bronze.ledger import BatchCounts, ledger_frame
from bronze.reconcile import Reconciler
from bronze.spec import CleanSource, replayed
from framework.delta import replace_rows
from framework.errors import JobError
from framework.job import Job, RunStatus, TableRunSummary
from framework.storage import local_path

__all__ = ["BronzeReplayJob"]

REFRESH = "refresh"  # the ledger's ``ingestion`` of a file read again by a refresh


def ledger_batches(spark: Any, ledger: str) -> dict[int, list[dict[str, Any]]]:
    """The ledger's rows of every batch a query read (landing's and backfills'), by batch."""
    rows = spark.read.format("delta").load(ledger).where(F.col("batch_id") >= 0).collect()
    batches: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        batches.setdefault(int(row["batch_id"]), []).append(row.asDict())
    return dict(sorted(batches.items()))


class _Passthrough:
    """A refresh reads the batches' files, none of landing's: nothing is left out."""

    skipped: dict[int, list[str]] = {}
    skipped_files = 0

    def unseen(self, files: dict[str, str], batch_id: int) -> dict[str, str]:
        return files


class BronzeReplayJob(BronzeJob):
    """The feed's batches read again from their files (see the module's text)."""

    def prepare(self) -> None:
        if self.ctx.operation is None:
            raise JobError(self.table.full_name, "prepare",
                           "expected a refresh to replay bronze's batches, found none")
        super().prepare()
        self.commits.writer_id = self.ctx.operation
        self.batches_planned = ledger_batches(self.spark, self.locations[self.ledger_table])
        # any batch may have been written before a kill: each looks for its tagged commits
        self.commits.replayable = range(0, max(self.batches_planned, default=-1) + 1)
        self._origin: dict[str, str] = {}  # a file's location -> its path at ingestion
        self.written: list[int] = []

    def _deliveries(self) -> Any:
        return _Passthrough()

    def execute(self) -> RunStatus:
        self.started = True
        for batch_id, rows in self.batches_planned.items():
            if self.ctx.stop.is_set():
                self.log.warning("bronze.replay.stopped", batch_id=batch_id)
                return RunStatus.STOPPED
            self._rows = rows
            self._origin = {local_path(r["location"]): r["path"] for r in rows
                            if replayed(r, self.ctx.replay_slice)}
            if not self._origin:
                continue
            self.log.info("bronze.replay.batch.started", batch_id=batch_id,
                          files=len(self._origin))
            self._step(f"batch {batch_id}", self._process_batch, None, batch_id)
            self.written.append(batch_id)
        return RunStatus.SUCCEEDED

    def release(self) -> None:
        pass

    def report(self, summary: TableRunSummary) -> None:
        if self.written:
            summary.batches = len(self.written)
            summary.first_batch, summary.last_batch = self.written[0], self.written[-1]

    def history_rows(self, summary: TableRunSummary) -> list[dict[str, Any]]:
        return Job.history_rows(self, summary)  # one row for the run: it has no query

    def _source_files(self, batch_id: int) -> dict[str, int]:
        return {path: 0 for path in self._origin}

    def _file_columns(self, frame: DataFrame) -> DataFrame:
        """The rows' ``_source_file`` as the first ingestion named it."""
        df = with_file_columns(frame)
        pairs = [F.lit(x) for kv in self._origin.items() for x in kv]
        return df.withColumn(SOURCE_FILE, F.coalesce(
            F.create_map(*pairs)[F.col(SOURCE_FILE)], F.col(SOURCE_FILE)))

    def _rows_per_file(self, table: str, batch_id: int) -> dict[str, int]:
        by_origin = super()._rows_per_file(table, batch_id)
        location = {path: loc for loc, path in self._origin.items()}
        return {location.get(path, path): n for path, n in by_origin.items()}

    def _settle(self, batch_id: int, rows: list[dict[str, Any]], counts: BatchCounts, *,
                committed: bool = False) -> None:
        """Replace the batch's ledger partition: the files read again with their new
        counts, as they stood otherwise; the others as they were."""
        if not committed:
            before = {local_path(r["location"]): r for r in self._rows
                      if local_path(r["location"] or "") in self._origin}
            failed = [r for r in rows if r["error"]]
            if failed:  # its rows would be lost: the refresh stays open until it reads
                raise JobError(self.table.full_name, f"batch {batch_id}",
                               f"expected the files ingested before to be read again, found "
                               f"{failed[0]['path']} failing: {failed[0]['error']}")
            now = []
            for row in rows:
                was = before[local_path(row["path"])]
                now.append(was | {k: row[k] for k in ("rows", "good_rows", "quarantined_rows",
                                                       "notes", "ingested_at", "updated_at")}
                           | {"ingestion": REFRESH})
            kept = [r for r in self._rows if local_path(r["location"] or "") not in self._origin]
            self.log.info("bronze.replay.ledger.replacing", batch_id=batch_id, files=len(now))
            replace_rows(ledger_frame(self.spark, [*now, *kept]),
                         self.locations[self.ledger_table], f"batch_id = {batch_id}",
                         tag=f"{self.ctx.operation}:{batch_id}")
            rows = now
        self.log.info("bronze.replay.batch.committed", batch_id=batch_id, records=counts.records)
        self._ledger_rows[batch_id] = rows
        self.batches[batch_id] = counts

    def reconciler(self) -> Reconciler:
        return InPlace(self.spark, self.files, checkpoint=self.table.checkpoint,
                       ledger=self.locations[self.ledger_table], mode=CleanSource.OFF,
                       archive_dir=self.spec.archive_dir(self.table),
                       quarantine_dir=self.spec.quarantine_dir(self.table), log=self.log)
