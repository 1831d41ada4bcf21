"""After a run: the landing files of committed batches leave landing, and the ledger says so.

Spark's ``cleanSource`` moves a batch's files only when the next batch starts, so the last
batch's files would stay in landing forever. :class:`Reconciler` archives (or deletes) the files
of every batch the checkpoint has committed, moves failed files whole to the quarantine folder,
and replaces those batches' ledger rows in one commit (``replaceWhere`` on the batch partition:
Delta drops the partition's files without reading them, where a MERGE of the same rows ran a
dozen Spark jobs). A file is never moved before its batch commits.

The files settled are this run's (the ledger rows it appended); the checkpoint keeps a mark
(``reconciled/<batch>``) of the last batch whose files are all settled, written after the
ledger commit, so only when an earlier run left files behind is the ledger read for them. An
interrupted reconcile is repaired by the next run: a file already moved is recognised at its
target.

Archive times: the files archived by a reconcile are listed in a manifest under the archive
folder (``_manifests/<ms>.json``, written before the ledger commit), so that ``purge-archive``
ages them from when they were archived (:func:`purge_archive`), on any store: a file keeps its
landing time when it is renamed, and a backlog ingested late must not be purged soon after.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze.ledger import LEDGER_SCHEMA, FileStatus
from bronze.spec import CleanSource
from framework.checkpoint import last_committed_batch, last_reconciled_batch, mark_reconciled
from framework.delta import literal_rows, replace_rows
from framework.errors import StorageError
from framework.storage import FileInfo, Storage, archive_target, local_path

MANIFESTS = "_manifests"


def settle_file(storage: Storage, path: str, status: str, mode: CleanSource,
                archive_dir: str, quarantine_dir: str) -> tuple[FileStatus, str | None] | None:
    """Move an ingested file to the archive (or delete it), or a failed one to the quarantine
    folder; returns its new status and location, or None if it is not there (yet).

    Safe to repeat: a file already moved (by Spark's cleanSource or an interrupted earlier
    call) is recognised at its target.
    """
    archived_at = archive_target(archive_dir, path)
    if status == FileStatus.FAILED:
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


class Reconciler:
    """Settles the landing files of a feed's committed batches (see the module's text)."""

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
        now = datetime.now(UTC).replace(tzinfo=None)
        counted = {"files_archived": 0, "files_deleted": 0, "files_quarantined": 0}
        changed: list[int] = []
        archived: list[str] = []
        unsettled = 0
        self.log.debug("bronze.landing.reconciling", committed_batch=committed,
                       batches=len(batches))
        for batch_id, rows in sorted(batches.items()):
            for row in rows:
                if row["status"] not in pending:
                    continue
                try:
                    settled = settle_file(self.storage, row["path"], row["status"], self.mode,
                                          self.archive_dir, self.quarantine_dir)
                except StorageError as exc:  # left in landing: the next run settles it
                    self.log.warning("bronze.file.unsettled", path=row["path"],
                                     batch_id=batch_id, error=str(exc))
                    settled = None
                if settled is None:
                    unsettled += 1
                    continue
                status, row["location"] = settled
                row["status"], row["updated_at"] = status.value, now
                counted[f"files_{status.value}"] += 1
                if status is FileStatus.ARCHIVED and row["location"]:
                    archived.append(row["location"])
                if not changed or changed[-1] != batch_id:
                    changed.append(batch_id)
        if archived:
            self._write_manifest(archived)
        if changed:
            self.log.debug("bronze.ledger.replacing", batches=changed)
            df = literal_rows(
                self.spark,
                [tuple(r[f] for f in LEDGER_SCHEMA.names) for b in changed for r in batches[b]],
                LEDGER_SCHEMA)
            replace_rows(df, self.ledger, f"batch_id IN ({', '.join(map(str, changed))})")
        if not unsettled and committed >= 0:
            mark_reconciled(self.checkpoint, committed, self.storage, failed_only=failed_only)
        counted["files_unsettled"] = unsettled
        log = self.log.warning if unsettled else self.log.info
        log("bronze.landing.reconciled", committed_batch=committed, **counted)
        return counted

    def _unsettled(self, committed: int, pending: set[FileStatus], skip: Iterable[int]
                   ) -> dict[int, list[dict[str, Any]]]:
        """Every ledger row of the committed batches (not in ``skip``) that have a file in a
        ``pending`` status, by batch."""
        ledger = self.spark.read.format("delta").load(self.ledger)
        ledger = ledger.where((F.col("batch_id") <= committed)
                              & ~F.col("batch_id").isin(list(skip)))
        ids = [r["batch_id"] for r in ledger.where(F.col("status").isin(sorted(pending)))
               .select("batch_id").distinct().collect()]
        batches: dict[int, list[dict[str, Any]]] = {}
        if ids:
            for row in ledger.where(F.col("batch_id").isin(ids)).collect():
                batches.setdefault(row["batch_id"], []).append(row.asDict())
        return batches

    def _write_manifest(self, files: list[str]) -> None:
        at = int(time.time() * 1000)
        body = json.dumps({"archived_at_ms": at, "files": files}).encode()
        self.storage.write_bytes(f"{self.archive_dir.rstrip('/')}/{MANIFESTS}/{at}.json", body)


def purge_archive(storage: Storage, archive_dir: str, older_than_ms: int, now_ms: int,
                  dry_run: bool = False) -> list[FileInfo]:
    """Delete the files archived more than ``older_than_ms`` before ``now_ms``; returns them
    (all that would go, with ``dry_run``).

    A file's age is from its archive manifest (see the module's text); a file no manifest
    lists (archived before manifests were kept) is aged from its modification time.
    """
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
