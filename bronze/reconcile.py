"""Settling landing files: out of landing once their batch's rows and ledger rows commit.

In each micro-batch, once its rows are committed to bronze and its quarantine, the batch's
ledger rows are appended as they will stand once its files are settled (``archived`` with the
archive path, ``deleted``, or ``quarantined`` with the quarantine folder's path for a failed
file), and then the files are moved (:meth:`Reconciler.settle`), before Spark commits the batch
to its checkpoint. The ledger commit comes first so that it is the point of no return: a batch
replayed after a crash finds its ledger rows (the commit is tagged with the batch) and only
finishes the moves, without reading its files again. A file whose move the store refuses goes
back to ``ingested`` (or ``failed``) in the ledger, at its landing path, in the same batch
(``replaceWhere`` on the batch's partition): the next reconcile tries again. The window in
which the ledger is ahead of the files is the batch's own moves.

After the query, :meth:`Reconciler.reconcile` settles what is left: the files whose move was
refused, and what an earlier run left. The checkpoint keeps a mark (``reconciled/<batch>``) of
the last batch whose files are all settled, so only when an earlier run left files behind is
the ledger read for them.

Spark's own ``cleanSource`` is not used: it moves a batch's files only when the next batch
starts, so the last batch's files stayed in landing until a reconcile after the query moved
them and replaced their ledger rows, a second ledger commit in every run. That replace rebuilt
the ledger's state (which files hold the batch's partition) and cost 0.8 to 1.4 s of a bronze
run of a million records (``bench/bronze_ingest.py``), more as the ledger grows; an append
needs no state.

Archive times: the files archived are listed in a manifest under the archive folder
(``_manifests/<ms>.json``), so that ``purge-archive`` ages them from when they were archived
(:func:`purge_archive`), on any store: a file keeps its landing time when it is renamed, and a
backlog ingested late must not be purged soon after.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze.ledger import FileStatus, ledger_frame
from bronze.spec import CleanSource
from framework.checkpoint import last_committed_batch, last_reconciled_batch, mark_reconciled
from framework.delta import read_table, replace_rows
from framework.errors import StorageError
from framework.storage import FileInfo, Storage, archive_target, local_path

MANIFESTS = "_manifests"


def settle_file(storage: Storage, path: str, status: str, mode: CleanSource,
                archive_dir: str, quarantine_dir: str) -> tuple[FileStatus, str | None] | None:
    """Move an ingested file to the archive (or delete it), or a failed one to the quarantine
    folder; its new status and location, or None if it is not there (yet). ``status`` is its
    ledger status (``ingested``, ``failed``, or what it will be once settled). Safe to repeat:
    a file already moved is recognised at its target."""
    archived_at = archive_target(archive_dir, path)
    if status in FAILED:
        target = archive_target(quarantine_dir, path)
        moved = storage.try_move(path, target) or storage.try_move(archived_at, target)
        return (FileStatus.QUARANTINED, target) if moved or storage.exists(target) else None
    if mode is CleanSource.ARCHIVE:
        moved = storage.try_move(path, archived_at)
        return (FileStatus.ARCHIVED, archived_at) \
            if moved or storage.exists(archived_at) else None
    if mode is CleanSource.DELETE:
        storage.delete(path)
        return FileStatus.DELETED, None
    return None


# Statuses of a failed file: before its move, and once (or as it will be once) moved.
FAILED = {FileStatus.FAILED, FileStatus.QUARANTINED}


class Reconciler:
    """Settles the landing files of a feed's batches (see the module's text)."""

    def __init__(self, spark: SparkSession, storage: Storage, *, checkpoint: str, ledger: str,
                 mode: CleanSource, archive_dir: str, quarantine_dir: str, log: Any) -> None:
        self.spark = spark
        self.storage = storage
        self.checkpoint = checkpoint
        self.ledger = ledger
        self.mode = mode
        self.archive_dir = archive_dir
        self.quarantine_dir = quarantine_dir
        self.log = log

    def planned(self, row: dict[str, Any]) -> dict[str, Any]:
        """A ledger row as it will stand once its file is settled."""
        if row["status"] == FileStatus.FAILED:
            return row | {"status": FileStatus.QUARANTINED.value,
                          "location": archive_target(self.quarantine_dir, row["path"])}
        if row["status"] == FileStatus.INGESTED and self.mode is CleanSource.ARCHIVE:
            return row | {"status": FileStatus.ARCHIVED.value,
                          "location": archive_target(self.archive_dir, row["path"])}
        if row["status"] == FileStatus.INGESTED and self.mode is CleanSource.DELETE:
            return row | {"status": FileStatus.DELETED.value, "location": None}
        return dict(row)

    def settle(self, batch_id: int, rows: list[dict[str, Any]]) -> dict[str, int]:
        """Move the files of a batch whose ledger rows (as :meth:`planned`) are committed;
        rows whose file could not be moved go back to their status before the move, in the
        ledger too. Returns the files archived, deleted, quarantined and left in landing."""
        wanted = {r["path"]: (r["status"], r["location"]) for r in rows}
        counted = self._move({batch_id: rows}, set(FileStatus))
        if any((r["status"], r["location"]) != wanted[r["path"]] for r in rows):
            self._replace({batch_id: rows}, [batch_id])
        return counted

    def reconcile(self, run_rows: dict[int, list[dict[str, Any]]], *, read_ledger: bool
                  ) -> dict[str, int]:
        """Settle the files of ``run_rows`` (this run's ledger rows, by batch) whose batch is
        committed and, with ``read_ledger`` or when an earlier run left files unsettled, the
        ones the ledger still has pending. Returns the files archived, deleted, quarantined, and
        those left where they were (a move the store refused: the next run tries again)."""
        committed = last_committed_batch(self.checkpoint, self.storage)
        failed_only = self.mode is CleanSource.OFF
        pending = ({FileStatus.FAILED} if failed_only
                   else {FileStatus.INGESTED, FileStatus.FAILED})
        batches = {b: rows for b, rows in run_rows.items() if b <= committed}
        start = min(run_rows, default=committed + 1)
        if read_ledger or last_reconciled_batch(self.checkpoint, self.storage,
                                                failed_only=failed_only) < start - 1:
            batches |= self._unsettled(committed, pending, skip=batches)
        self.log.debug("bronze.landing.reconciling", committed_batch=committed,
                       batches=len(batches))
        before = {b: [r["status"] for r in rows] for b, rows in batches.items()}
        counted = self._move(batches, pending)
        changed = [b for b, rows in sorted(batches.items())
                   if [r["status"] for r in rows] != before[b]]
        if changed:
            self._replace(batches, changed)
        if not counted["files_unsettled"] and committed >= 0:
            mark_reconciled(self.checkpoint, committed, self.storage, failed_only=failed_only)
        log = self.log.warning if counted["files_unsettled"] else self.log.info
        log("bronze.landing.reconciled", committed_batch=committed, **counted)
        return counted

    def _move(self, batches: dict[int, list[dict[str, Any]]], statuses: set[FileStatus]
              ) -> dict[str, int]:
        """Settle the files of the rows in one of ``statuses``, updating the rows: a file
        settled gets its new status and location, one that is not there (yet) the status it
        has before a move, at its landing path. The files archived go to a manifest."""
        now = datetime.now(UTC).replace(tzinfo=None)
        counted = {"files_archived": 0, "files_deleted": 0, "files_quarantined": 0,
                   "files_unsettled": 0}
        archived: list[str] = []
        for batch_id, rows in sorted(batches.items()):
            for row in rows:
                if row["status"] not in statuses or (
                        self.mode is CleanSource.OFF and row["status"] not in FAILED):
                    continue
                try:
                    settled = settle_file(self.storage, row["path"], row["status"], self.mode,
                                          self.archive_dir, self.quarantine_dir)
                except StorageError as exc:  # left in landing: the next run settles it
                    self.log.warning("bronze.file.unsettled", path=row["path"],
                                     batch_id=batch_id, error=str(exc))
                    settled = None
                if settled is None:
                    counted["files_unsettled"] += 1
                    status = FileStatus.FAILED if row["status"] in FAILED \
                        else FileStatus.INGESTED
                    row["status"], row["location"] = status.value, row["path"]
                    continue
                status, location = settled
                if (row["status"], row["location"]) != (status.value, location):
                    row["status"], row["location"], row["updated_at"] = \
                        status.value, location, now
                counted[f"files_{status.value}"] += 1
                if status is FileStatus.ARCHIVED and location:
                    archived.append(location)
        if archived:
            self._write_manifest(archived)
        return counted

    def _replace(self, batches: dict[int, list[dict[str, Any]]], changed: list[int]) -> None:
        """Replace the ledger rows of the ``changed`` batches in one commit (the batches'
        partitions: Delta drops their files without reading them)."""
        self.log.debug("bronze.ledger.replacing", batches=changed)
        replace_rows(ledger_frame(self.spark, [r for b in changed for r in batches[b]]),
                     self.ledger, f"batch_id IN ({', '.join(map(str, changed))})")

    def _unsettled(self, committed: int, pending: set[FileStatus], skip: Iterable[int]
                   ) -> dict[int, list[dict[str, Any]]]:
        """Every ledger row of the committed batches (not in ``skip``) that have a file in a
        ``pending`` status, by batch."""
        ledger = read_table(self.spark, self.ledger)
        # (not partition -1: deliveries settled at a run's start, never by a batch)
        ledger = ledger.where((F.col("batch_id") >= 0) & (F.col("batch_id") <= committed)
                              & ~F.col("batch_id").isin(list(skip)))
        ids = [r["batch_id"] for r in ledger.where(F.col("status").isin(sorted(pending)))
               .select("batch_id").distinct().collect()]
        batches: dict[int, list[dict[str, Any]]] = {}
        if ids:
            for row in ledger.where(F.col("batch_id").isin(ids)).collect():
                batches.setdefault(row["batch_id"], []).append(row.asDict())
        return batches

    def _write_manifest(self, files: list[str]) -> None:
        write_manifest(self.storage, self.archive_dir, files)


def write_manifest(storage: Storage, archive_dir: str, files: list[str]) -> None:
    """List ``files``, archived now, in a manifest of the archive (for their age)."""
    at = int(time.time() * 1000)
    body = json.dumps({"archived_at_ms": at, "files": files}).encode()
    storage.write_bytes(f"{archive_dir.rstrip('/')}/{MANIFESTS}/{at}.json", body)


def purge_archive(storage: Storage, archive_dir: str, older_than_ms: int, now_ms: int,
                  dry_run: bool = False) -> list[FileInfo]:
    """Delete the files archived more than ``older_than_ms`` before ``now_ms``; returns them
    (all that would go, with ``dry_run``). A file's age is from its archive manifest (see the
    module's text), else (archived before manifests were kept) from its modification time."""
    if not storage.exists(archive_dir):
        return []
    prefix = local_path(f"{archive_dir.rstrip('/')}/{MANIFESTS}/")
    listed = list(storage.list_files(archive_dir))
    manifests = [f for f in listed if local_path(f.path).startswith(prefix)]
    files = {local_path(f.path): f for f in listed if not local_path(f.path).startswith(prefix)}
    expired: list[FileInfo] = []
    spent: list[FileInfo] = []  # manifests all of whose files expire
    listed_in_manifest: set[str] = set()
    for manifest in manifests:
        with storage.open(manifest.path) as fh:
            content = json.loads(fh.read())
        paths = {local_path(str(p)) for p in content["files"]}
        listed_in_manifest |= paths
        if int(content["archived_at_ms"]) < now_ms - older_than_ms:
            expired += [files[p] for p in sorted(paths) if p in files]
            spent.append(manifest)
    expired += [f for p, f in files.items()
                if p not in listed_in_manifest and f.modified_ms < now_ms - older_than_ms]
    if not dry_run:
        for f in [*expired, *spent]:  # a manifest after its files: a repeat finds the rest
            storage.delete(f.path)
    return expired
