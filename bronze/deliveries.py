"""Deliveries: a file landed again under a name bronze has already read.

Spark's file stream source remembers the paths it has listed (its checkpoint's seen files), not
their bytes: a file landed again under a listed path is never listed again, whatever its size or
time, and a run silently reads nothing. Conversely, a query on a new checkpoint lists every file
still in landing, so with ``clean_source: off`` a checkpoint moved aside would ingest them all a
second time. Here a delivery is a file's bytes (decision 17), told apart by the size and
modification time the file ledger (``<table>_files``) records for each file read.

At the start of a run, before the query lists landing, :meth:`Deliveries.check`:

1. lists the landing folder through the job's storage, keeping the files Spark's file source
   would list (:class:`LandingPattern`: the glob of ``source.path``, ``path_glob_filter``,
   ``recursive_file_lookup``; never names starting with ``_`` or ``.``), and reads the ledger
   rows of those paths in one filtered read, none when landing holds no such file;
2. for each landing file whose path the ledger holds:

   - with the size and modification time of a row ``ingested``, ``archived`` or ``deleted``:
     the same bytes, landed again. Nothing is done; a warning (``bronze.file.already_ingested``)
     says so, except for a file of a batch the query replays (its moves are pending) and for one
     whose row is ``ingested`` (in landing by design: ``clean_source: off``, or a move the store
     refused) unless the checkpoint has committed no batch yet;
   - else a new delivery (``bronze.file.redelivered``). With ``redelivery: ingest`` (the
     default) it is renamed within its folder to a name Spark has never listed that keeps its
     extensions and still matches the source's glob and filter (:func:`delivery_name`:
     ``e1.json`` -> ``e1.delivery-20261125T013000123Z.json``, the UTC time of its
     modification, with ``-2``, ``-3``... when that name is taken in landing or the archive):
     the query ingests it once, as a file of its own in the ledger, and archives it beside the
     earlier copy. With ``redelivery: skip`` it is moved whole to the quarantine folder (the
     layout of :func:`~framework.storage.archive_target`, under its delivery name, so an
     earlier copy there stays), with a ledger row ``quarantined`` whose error names the reason
     (``bronze.file.redelivery_quarantined``). A delivery whose new name the source's glob or
     filter would not match is quarantined alike, whatever the setting. ``skip`` applies to
     names already ingested: a file sent again after its earlier copy failed is the fix, and is
     ingested.

3. The same-bytes files make the set of known files (path, size, modification time) that
   :class:`bronze.filebatch.KnownFiles` takes out of each micro-batch before it is read: a file
   the ledger holds as ingested in an earlier batch (a new checkpoint lists it again) is not
   read again, gets no new ledger row and is reported (``bronze.file.skipped_known``, and
   ``skipped_files`` in the run's counts). The set holds what landing held at the start, so a
   batch looks its files up in a dict, whatever the ledger's size; files landed while a
   continuous query runs wait for the next run's start.

Cost: only the listing when landing holds no file Spark would read; else one Spark read of the
ledger (a filtered scan, collected), whatever landing holds. ``bench/deliveries_check.py``
against a ledger of 1,000 rows in 50 commits, on two cores: medians of 0.52 s per check with 20
files in landing and 0.76 s with 200 at a load of 3, 1.7 to 2.1 s at a load of 5 to 9; the
first check of a session 2 to 11 s. Loading the table took 0.03 s of a check, the scan's Spark
jobs the rest. The listing is a call per file through a Hadoop store, ``os`` calls on a local
disk. With ``clean_source: off`` landing keeps every file, and each run looks all of them up.

Ledger rows of skipped deliveries are in the batch partition :data:`REDELIVERY_BATCH` (-1),
which no micro-batch has: the stream's batches (and so ``read_batch``, the commits' tags and
the reconciler's replaces) are numbered from 0, and the reconciler reads rows of pending
statuses (``ingested``, ``failed``) only, never ``quarantined`` ones. The checkpoint's marks
(``reconciled/``, ``recorded/``) count the query's batches and do not look at the ledger.

Exactly once under a kill: a rename either happened or did not (a renamed file is new to Spark
and has no ledger row: the next run ingests it once). A skipped delivery's ledger row is
appended before its file is moved, after a look for it in the rows just read: a run stopped
between the two finds the row (same path, size and time, in partition -1) with the file still
in landing, and only moves it to the location the row names.

A file landed again under a delivery name (``e1.delivery-....json``) is named again from its
original stem, not nested. A new name is checked against landing, the archive and the rows
read, not every path the ledger holds: a name taken only by a deleted file of the same name
and time to the millisecond (Spark would skip the renamed file) is renamed again next run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze.ledger import UNREAD, BatchKey, FileStatus, Origin, ledger_frame, stored_in
from bronze.reconcile import write_manifest
from bronze.spec import BronzeTableSpec, CleanSource, Redelivery
from framework.checkpoint import batch_source_files, last_committed_batch
from framework.config.model import Table
from framework.delta import append, read_table
from framework.errors import StorageError
from framework.storage import FileInfo, Storage, archive_target, from_uri, local_path

__all__ = ["REDELIVERY_BATCH", "Deliveries", "LandingPattern", "delivery_name"]

# The ledger partition of deliveries quarantined with ``redelivery: skip`` and of copies of
# backfilled files: files settled without a read (see the module).
REDELIVERY_BATCH = UNREAD.stored
# The tag of their ledger commits (``<writer>:<batch>``, as framework.delta.append writes).
WRITER = "redelivery"
# Statuses of a file whose rows were committed.
INGESTED = {FileStatus.INGESTED.value, FileStatus.ARCHIVED.value, FileStatus.DELETED.value}
# A delivery name's marker: ``.delivery-<UTC yyyymmddThhmmssSSS>Z``, maybe ``-<n>``.
MARKER = re.compile(r"\.delivery-\d{8}T\d{9}Z(?:-\d+)?$")
# An extension kept after the marker: a letter, then letters or digits (``.gz``, ``.bz2``).
EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,9}$")
MAX_EXTENSIONS = 3


def delivery_name(name: str, modified_ms: int, n: int = 1) -> str:
    """A new name for a file landed again under ``name``: its original stem, the UTC time of
    its modification to the millisecond, ``-n`` from the second try on, then its extensions
    (the codec's last, where Spark's readers look for it): ``x.csv.gz`` ->
    ``x.delivery-20261125T013000123Z.csv.gz``."""
    stem, extensions = name, ""
    for _ in range(MAX_EXTENSIONS):
        found = EXTENSION.search(stem)
        if found is None or found.start() == 0:
            break
        stem, extensions = stem[:found.start()], found.group() + extensions
    stem = MARKER.sub("", stem) or stem
    at = datetime.fromtimestamp(modified_ms // 1000, UTC)
    stamp = f"{at:%Y%m%dT%H%M%S}{modified_ms % 1000:03d}Z"
    return f"{stem}.delivery-{stamp}{f'-{n}' if n > 1 else ''}{extensions}"


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A Hadoop glob (``*``, ``?``, ``[a-c]``, ``[!a]``, ``{a,b}``, ``\\`` escapes) of one
    path component, as a regular expression matching whole names. A glob Hadoop would refuse
    (an unclosed ``[``) matches itself only."""
    out: list[str] = []
    curly, in_class, i = 0, False, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if in_class:
            in_class = c != "]"
            out.append(c if c in "]-" else re.escape(c))
        elif c == "[":
            in_class = True
            negated = pattern[i + 1:i + 2] in ("!", "^")
            out.append("[^" if negated else "[")
            i += negated
        elif c in "*?":
            out.append(".*" if c == "*" else ".")
        elif c == "{":
            curly += 1
            out.append("(?:")
        elif c in ",}" and curly:
            curly -= c == "}"
            out.append("|" if c == "," else ")")
        else:
            out.append(re.escape(c))
        i += 1
    try:
        return re.compile("".join(out), re.DOTALL)
    except re.error:
        return re.compile(re.escape(pattern))


def hidden(name: str) -> bool:
    """Whether Spark's file index leaves a file or folder of this name out of a listing
    (``InMemoryFileIndex.shouldFilterOutPathName``): names starting with ``.``, or with ``_``
    unless they hold ``=`` (a partition folder), files being copied (``._COPYING_``); Parquet's
    ``_metadata`` and ``_common_metadata`` are kept."""
    left_out = (name.startswith("_") and "=" not in name) or name.startswith(".") \
        or name.endswith("._COPYING_")
    return left_out and not name.startswith(("_common_metadata", "_metadata"))


class LandingPattern:
    """Which files under a feed's landing folder its query lists, as Spark's file source does:
    the paths the glob of ``source.path`` matches; below a matched folder, every file when the
    lookup is recursive, else its own files and those of partition folders (``k=v``) below it;
    no name left out by :func:`hidden`; names matching ``path_glob_filter``."""

    def __init__(self, spec: BronzeTableSpec, table: Table) -> None:
        landing = spec.landing(table)
        self.folder = local_path(spec.landing_folder(table)).rstrip("/")
        self.globs = [glob_regex(p) for p in landing[len(spec.landing_folder(table)):]
                      .split("/") if p]
        self.recursive = spec.source.recursive_file_lookup
        name_filter = spec.source.path_glob_filter
        self.name_filter = glob_regex(name_filter) if name_filter else None

    def reads(self, path: str) -> bool:
        """Whether the query lists the file at ``path``."""
        path = local_path(path)
        if not path.startswith(self.folder + "/"):
            return False
        parts = path[len(self.folder) + 1:].split("/")
        if len(parts) < len(self.globs) or not all(
                g.fullmatch(p) for g, p in zip(self.globs, parts, strict=False)):
            return False
        below = parts[len(self.globs):] or parts[-1:]
        if any(hidden(p) for p in below):
            return False
        if not self.recursive and any("=" not in folder for folder in below[:-1]):
            return False
        return self.name_filter is None or self.name_filter.fullmatch(parts[-1]) is not None


@dataclass(frozen=True)
class Entry:
    """A ledger row of a landing file's path, as far as deliveries need it."""

    path: str
    size: int
    modified_ms: int
    batch_id: int
    status: str
    location: str | None
    error: str | None
    ingestion: str | None = None
    file_key: str | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Entry:
        mtime: datetime = row["modification_time"]
        # (naive UTC, as the ledger writes it: bronze.ledger.ledger_rows)
        ms = round(mtime.replace(tzinfo=UTC).timestamp() * 1000) if mtime else 0
        return cls(row["path"], int(row["size"] or 0), ms, int(row["batch_id"]), row["status"],
                   row["location"], row["error"], row["ingestion"], row["file_key"])

    @property
    def backfilled(self) -> bool:
        """A row of a file a backfill read (in its folder), or of a landing file settled as
        one a backfill had read."""
        return self.ingestion == Origin.BACKFILL

    @property
    def key(self) -> BatchKey:
        """The key of the batch that read the file (or of the unread files)."""
        return BatchKey.of(self.batch_id)


class Deliveries:
    """Files landed again under a path the ledger holds, checked at a run's start (:meth:`check`),
    and the files known to the ledger (:attr:`known`) each micro-batch leaves out."""

    def __init__(self, spark: SparkSession, storage: Storage, table: Table, *, ledger: str,
                 replayable: range, log: Any) -> None:
        spec = cast(BronzeTableSpec, table.spec)
        self.spark = spark
        self.storage = storage
        self.spec = spec
        self.pattern = LandingPattern(spec, table)
        self.ledger = ledger
        self.checkpoint = table.checkpoint
        self.archive_dir = spec.archive_dir(table)
        self.quarantine_dir = spec.quarantine_dir(table)
        self.replayable = replayable  # batches the query replays: their moves may be pending
        self.log = log
        # (path, size, modification time in ms) -> the batch that ingested those bytes
        self.known: dict[tuple[str, int, int], int] = {}
        self._ledger_paths: set[str] = set()  # of the rows read at the start
        self._new_checkpoint: bool | None = None

    @classmethod
    def at_start(cls, spark: SparkSession, storage: Storage, table: Table, *, ledger: str,
                 replayable: range, log: Any) -> Deliveries:
        """The deliveries of a run, checked (:meth:`check`)."""
        made = cls(spark, storage, table, ledger=ledger, replayable=replayable, log=log)
        made.check()
        return made

    # ------------------------------------------------------------------ at the start
    def check(self) -> None:
        """Compare the landing files with the ledger rows of their paths; rename or quarantine
        new deliveries under known names, warn of the same bytes landed again, and keep the
        known files (:attr:`known`)."""
        started = time.perf_counter()
        folder = self.pattern.folder
        listed = [f for f in self.storage.list_files(folder) if self.pattern.reads(f.path)] \
            if self.storage.exists(folder) else []
        if not listed:
            return
        entries: dict[str, list[Entry]] = {}
        backfilled: dict[tuple[str, int], Entry] = {}  # (path under its folder, size)
        keys = {local_path(f.path): local_path(f.path)[len(folder) + 1:] for f in listed}
        for entry in self._ledger_rows(list(keys), list(keys.values())):
            if entry.backfilled and entry.key.origin is Origin.BACKFILL:
                if entry.status in INGESTED and entry.file_key:
                    backfilled[(entry.file_key, entry.size)] = entry
            else:
                entries.setdefault(entry.path, []).append(entry)
        self._ledger_paths = set(entries)
        self.log.debug("bronze.deliveries.checked", landing_files=len(listed),
                       known_paths=len(entries),
                       seconds=round(time.perf_counter() - started, 3))
        skips: list[tuple[FileInfo, Entry | None, str]] = []
        copies: list[tuple[FileInfo, Entry]] = []
        pending = self._pending() if backfilled else set()
        for info in listed:
            path = local_path(info.path)
            rows = entries.get(path) or []
            earlier = backfilled.get((keys[path], info.size))
            # a backfilled file's copy: not these bytes read by landing already, not settled
            # as a copy already, not in a batch the query replays (it reads it)
            if earlier is not None and path not in pending and not any(
                    (r.key != UNREAD and (r.size, r.modified_ms) == (info.size, info.modified_ms))
                    or (r.backfilled and r.key == UNREAD) for r in rows):
                copies.append((FileInfo(path, info.size, info.modified_ms), earlier))
            elif rows:
                skip = self._one(FileInfo(path, info.size, info.modified_ms), rows)
                if skip is not None:
                    skips.append(skip)
        self._quarantine(skips)
        self._settle_backfilled(copies)

    def _one(self, info: FileInfo, rows: list[Entry]
             ) -> tuple[FileInfo, Entry | None, str] | None:
        """Settle one landing file whose path the ledger holds; a delivery to quarantine is
        returned (with its pending row, if a run stopped before moving it, and the reason)."""
        same = [r for r in rows if (r.size, r.modified_ms) == (info.size, info.modified_ms)]
        copied = next((r for r in same if r.backfilled and r.key == UNREAD),
                      None)
        if copied is not None and copied.status != FileStatus.INGESTED and (
                copied.status == FileStatus.DELETED or not (
                    copied.location and self.storage.exists(copied.location))):
            # settled as backfilled, its move or delete cut short: made now
            self.known[(info.path, info.size, info.modified_ms)] = REDELIVERY_BATCH
            if self._settle_copy(info.path, copied.location, copied.status) and \
                    copied.location:
                write_manifest(self.storage, self.archive_dir, [copied.location])
            return None
        if copied is not None:  # kept in landing (clean_source: off, a refused move), or
            # landed again
            self.known[(info.path, info.size, info.modified_ms)] = REDELIVERY_BATCH
            if copied.status != FileStatus.INGESTED:
                self.log.warning("bronze.file.already_ingested", path=info.path,
                                 ingested_by="a backfill", status=copied.status)
            return None
        ingested = [r for r in rows if r.status in INGESTED and r.key != UNREAD]
        copy = max((r for r in same if r in ingested), key=lambda r: r.batch_id, default=None)
        if copy is not None:
            self._same_bytes(info, copy)
            return None
        pending = [r for r in same if r.key == UNREAD]
        unmoved = next((r for r in pending if r.location and not self.storage.exists(r.location)),
                       None)
        if unmoved is not None:  # its row is in, the move is not: a run stopped between them
            return info, unmoved, unmoved.error or "delivered again; redelivery: skip"
        if any(r.batch_id in self.replayable or r.status == FileStatus.FAILED for r in same):
            return None  # waits in landing for its batch's (or the reconcile's) move
        earlier = max(ingested or [r for r in rows if r.key != UNREAD] or rows,
                      key=lambda r: r.batch_id)
        seen = f"{'ingested' if ingested else 'read'} (batch {earlier.batch_id})"
        if ingested and self.spec.source.redelivery is Redelivery.SKIP:
            return info, None, f"delivered again under a name already {seen}; redelivery: skip"
        renamed = self._new_name(info)
        if renamed is None:
            return info, None, (f"delivered again under a name already {seen}; no new name "
                                "for it matches source.path and source.path_glob_filter")
        self.log.debug("bronze.file.redelivering", path=info.path, renamed_to=renamed)
        try:
            self.storage.move(info.path, renamed)
        except StorageError as exc:
            self._unmoved(info.path, renamed, exc)
            return None
        self.log.warning("bronze.file.redelivered", path=info.path, renamed_to=renamed,
                         earlier_batch=earlier.batch_id, size=info.size,
                         earlier_size=earlier.size)
        return None

    def _unmoved(self, path: str, target: str, error: StorageError) -> None:
        """A move the store refused: the file stays in landing (Spark does not list it again),
        and the next run's start tries again."""
        self.log.warning("bronze.file.redelivery_unsettled", path=path, target=target,
                         error=str(error))

    def _same_bytes(self, info: FileInfo, copy: Entry) -> None:
        """A landing file with the path, size and time of a file a batch ingested."""
        if copy.batch_id in self.replayable:
            return  # the batch is replayed: it moves its files
        self.known[(info.path, info.size, info.modified_ms)] = copy.batch_id
        if copy.status == FileStatus.INGESTED and not self.new_checkpoint():
            return  # still in landing by design (clean_source off, or a refused move)
        self.log.warning("bronze.file.already_ingested", path=info.path,
                         ingested_in_batch=copy.batch_id, status=copy.status)

    def new_checkpoint(self) -> bool:
        """Whether the checkpoint has committed no batch (new or reset): it lists all of landing."""
        if self._new_checkpoint is None:
            self._new_checkpoint = last_committed_batch(self.checkpoint, self.storage) < 0
        return self._new_checkpoint

    def _new_name(self, info: FileInfo) -> str | None:
        """A path in the file's folder that Spark has not listed and will list, free in
        landing and in the archive; None when the source's patterns match no such name."""
        folder, _, name = info.path.rpartition("/")
        for n in range(1, 1000):
            candidate = f"{folder}/{delivery_name(name, info.modified_ms, n)}"
            if not self.pattern.reads(candidate):
                return None
            archived = self.spec.source.clean_source is CleanSource.ARCHIVE and \
                self.storage.exists(archive_target(self.archive_dir, candidate))
            if not archived and candidate not in self._ledger_paths \
                    and not self.storage.exists(candidate):
                return candidate
        raise StorageError(f"expected a free name for {info.path} in landing and in the "
                           f"archive, found {delivery_name(name, info.modified_ms, 999)} and "
                           "every name before it taken")

    def _quarantine(self, skips: list[tuple[FileInfo, Entry | None, str]]) -> None:
        """Move deliveries not to be ingested to the quarantine folder: their ledger rows
        first (one commit), then the files (see the module's text)."""
        if not skips:
            return
        now = datetime.now(UTC).replace(tzinfo=None)
        moves: list[tuple[FileInfo, str, str]] = []
        rows: list[dict[str, Any]] = []
        taken: set[str] = set()
        for info, pending, reason in skips:
            if pending is not None and pending.location:
                moves.append((info, pending.location, reason))
                continue
            target = self._quarantine_target(info, taken)
            taken.add(target)
            moves.append((info, target, reason))
            mtime = datetime.fromtimestamp(info.modified_ms / 1000, UTC).replace(tzinfo=None)
            rows.append({"path": info.path, "size": info.size, "modification_time": mtime,
                         "batch_id": REDELIVERY_BATCH, "rows": 0, "good_rows": 0,
                         "quarantined_rows": 0, "status": FileStatus.QUARANTINED.value,
                         "error": reason, "location": target, "ingested_at": now,
                         "updated_at": now})
        self.log.debug("bronze.deliveries.quarantining", files=len(moves), new_rows=len(rows))
        if rows:
            append(ledger_frame(self.spark, rows), self.ledger, WRITER, REDELIVERY_BATCH)
        for info, target, reason in moves:
            try:
                self.storage.try_move(info.path, target)
            except StorageError as exc:  # its row names the target: the next run moves it
                self._unmoved(info.path, target, exc)
                continue
            self.log.warning("bronze.file.redelivery_quarantined", path=info.path,
                             location=target, reason=reason)

    def _quarantine_target(self, info: FileInfo, taken: Iterable[str]) -> str:
        """A free path in the quarantine folder for the delivery (its delivery name)."""
        folder, _, name = info.path.rpartition("/")
        for n in range(1, 1000):
            target = archive_target(self.quarantine_dir,
                                    f"{folder}/{delivery_name(name, info.modified_ms, n)}")
            if target not in taken and not self.storage.exists(target):
                return target
        raise StorageError(f"expected a free name for {info.path} in the quarantine folder "
                           f"{self.quarantine_dir}, found every name taken")

    def _ledger_rows(self, paths: list[str], keys: list[str]) -> list[Entry]:
        """In one read, the ledger rows of ``paths`` and of files backfilled under ``keys``."""
        rows = read_table(self.spark, self.ledger) \
            .where(F.col("path").isin(sorted(set(paths)))
                   | (stored_in(F.col("batch_id"), Origin.BACKFILL)
                      & F.col("file_key").isin(sorted(set(keys))))) \
            .select("path", "size", "modification_time", "batch_id", "status", "location",
                    "error", "ingestion", "file_key") \
            .collect()
        return [Entry.of(r.asDict()) for r in rows]

    def _settle_backfilled(self, copies: list[tuple[FileInfo, Entry]]) -> None:
        """Landing files a backfill ingested (the same path under its folder, and size):
        not read again, but settled as the feed settles what it ingests (archived, deleted,
        or left with ``clean_source: off``), each with a ledger row in the partition of
        deliveries that no batch read (its rows are the backfill's). The rows first (one
        commit), then the moves: a run stopped between finds the rows and makes the moves."""
        if not copies:
            return
        now = datetime.now(UTC).replace(tzinfo=None)
        mode = self.spec.source.clean_source
        rows: list[dict[str, Any]] = []
        for info, earlier in copies:
            if mode is CleanSource.ARCHIVE:
                status, location = FileStatus.ARCHIVED, archive_target(self.archive_dir,
                                                                        info.path)
            elif mode is CleanSource.DELETE:
                status, location = FileStatus.DELETED, None
            else:
                status, location = FileStatus.INGESTED, info.path
            mtime = datetime.fromtimestamp(info.modified_ms / 1000, UTC).replace(tzinfo=None)
            rows.append({"path": info.path, "size": info.size, "modification_time": mtime,
                         "batch_id": REDELIVERY_BATCH, "rows": 0, "good_rows": 0,
                         "quarantined_rows": 0, "status": status.value, "error": None,
                         "location": location, "ingested_at": now, "updated_at": now,
                         "notes": f"ingested by a backfill (batch {earlier.batch_id}) from "
                                  f"{earlier.path}",
                         "ingestion": Origin.BACKFILL.value, "file_key": earlier.file_key})
            self.log.warning("bronze.file.backfilled_earlier", path=info.path,
                             backfilled_from=earlier.path, batch_id=earlier.batch_id,
                             settled=status.value)
        append(ledger_frame(self.spark, rows), self.ledger, WRITER, REDELIVERY_BATCH)
        # aged by purge-archive from now, as the feed's own archived files: listed before
        # the moves (a kill between cannot leave one unlisted; purge passes a missing file)
        archived = [r["location"] for r in rows if r["status"] == FileStatus.ARCHIVED]
        if archived:
            write_manifest(self.storage, self.archive_dir, archived)
        for (info, _), row in zip(copies, rows, strict=True):
            # never read by landing, moved or not (a refused move: the next run moves it)
            self.known[(info.path, info.size, info.modified_ms)] = REDELIVERY_BATCH
            self._settle_copy(row["path"], row["location"], row["status"])

    def _pending(self) -> set[str]:
        """The files of the batches the query replays (planned before a restart): theirs to read,
        whatever a backfill read since."""
        files: set[str] = set()
        for batch_id in self.replayable:
            files |= {from_uri(p) for p in batch_source_files(self.checkpoint, batch_id,
                                                              storage=self.storage)}
        return files

    def _settle_copy(self, path: str, location: str | None, status: str) -> bool:
        """Archive or delete a landing file settled as backfilled (its row is in); whether
        it was archived now."""
        try:
            if status == FileStatus.ARCHIVED and location:
                if self.storage.try_move(path, location):
                    return True
                if self.storage.exists(path):
                    self.log.warning("bronze.file.redelivery_unsettled", path=path,
                                     target=location, error="the target exists")
            elif status == FileStatus.DELETED:
                self.storage.delete(path)
        except StorageError as exc:  # its row names the target: the next run settles it
            self._unmoved(path, location or "(deleted)", exc)
        return False
