"""What a query's checkpoint says about progress.

Every function reads (or writes) through the :class:`~framework.storage.Storage` it is given:
a job passes its session's Hadoop file system, so checkpoints on HDFS or ADLS read as local
ones do; without one, the store is chosen by the path's scheme.

Spark's checkpoint files are read here for two reasons, each measured against the public
alternative: the last committed and planned batch ids (``commits/``, ``offsets/``: the names of
the files, nothing in them) decide which batches a restart may replay, which no API says before
the query starts; and :func:`batch_source_files` names the files of a file stream source's
micro-batch, which the batch's DataFrame does not expose to ``foreachBatch`` (its
``inputFiles()`` is empty there: the plan is an RDD of the batch's rows). The run history
(:mod:`framework.history`) also lists ``commits/`` with the query's id (``metadata``), to find
the committed batches whose row a stopped driver did not write.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from framework.storage import Storage, clear_debris, storage_for

# The folders of the job's own marks, next to Spark's logs: the batch up to which the files are
# settled (bronze's reconcile), and up to which the run history has a row per batch.
RECONCILED = "reconciled"
RECORDED = "recorded"
# The suffix of a reconciled mark that settled failed files only (see mark_reconciled).
FAILED_ONLY = ".failed"


def last_committed_batch(checkpoint: str, storage: Storage | None = None) -> int:
    """The highest batch id in the checkpoint's commit log, or -1 when none committed.

    An id is in ``commits/`` only once its sink write succeeded; batches commit in order, so every
    id up to this one is committed too."""
    return _last_logged(checkpoint.rstrip("/") + "/commits", storage)


def last_planned_batch(checkpoint: str, storage: Storage | None = None) -> int:
    """The highest batch id in the checkpoint's offset log, or -1 when none was planned.

    A batch is planned (its offsets written) before it runs; one planned but not committed ran,
    wholly or in part, before the query stopped: the next start runs it again."""
    return _last_logged(checkpoint.rstrip("/") + "/offsets", storage)


def committed_batches(checkpoint: str, storage: Storage | None = None) -> dict[int, int]:
    """The batch ids in the checkpoint's commit log (Spark keeps the last 100 by default), each
    with its commit's modification time (ms since the epoch)."""
    folder = checkpoint.rstrip("/") + "/commits"
    store = storage or storage_for(folder)
    if not store.exists(folder):
        return {}
    return {b: f.modified_ms for f in store.list_files(folder)
            if (b := _batch_id(f.path.rsplit("/", 1)[-1])) is not None}


def query_id(checkpoint: str, storage: Storage | None = None) -> str | None:
    """The id of the query that writes this checkpoint (its ``metadata`` file, written at the
    first start and kept across restarts), None before the first start."""
    path = checkpoint.rstrip("/") + "/metadata"
    store = storage or storage_for(path)
    if not store.exists(path):
        return None
    with store.open(path) as fh:
        text = fh.read().decode("utf-8").strip()
    try:
        value = json.loads(text.splitlines()[0]) if text else {}
    except ValueError:
        return None
    return str(value["id"]) if isinstance(value, dict) and value.get("id") else None


def last_reconciled_batch(checkpoint: str, storage: Storage | None = None, *,
                          failed_only: bool = False) -> int:
    """The batch up to which the job settled every file after its query (see
    :func:`mark_reconciled`), or -1 when it never recorded one. With ``failed_only`` a mark
    that settled only failed files counts too."""
    def counted(name: str) -> int | None:
        mark = _mark(name)
        return mark[0] if mark and (failed_only or not mark[1]) else None

    return _last_logged(_marks(checkpoint, RECONCILED), storage, counted)


def mark_reconciled(checkpoint: str, batch_id: int, storage: Storage | None = None, *,
                    failed_only: bool = False) -> None:
    """Record that every file of the batches up to ``batch_id`` is settled: an empty file
    ``reconciled/<batch_id>`` next to Spark's logs, earlier marks removed. Written after the
    settling, so a run stopped before it leaves the earlier mark and the next run looks again.

    ``failed_only``: only failed files were to be settled (``cleanSource`` off leaves ingested
    files in landing). That mark, ``<batch_id>.failed``, does not count for a run that archives
    or deletes ingested files, which then finds them in the ledger."""
    _write_mark(_marks(checkpoint, RECONCILED), f"{batch_id}{FAILED_ONLY if failed_only else ''}",
                batch_id, storage)


def last_recorded_batch(checkpoint: str, storage: Storage | None = None) -> int:
    """The batch up to which every committed batch has its run history row (see
    :func:`mark_recorded`), or -1 when none was marked."""
    return _last_logged(_marks(checkpoint, RECORDED), storage)


def mark_recorded(checkpoint: str, batch_id: int, storage: Storage | None = None) -> None:
    """Record that every committed batch up to ``batch_id`` has its row in the run history
    (``recorded/<batch_id>``, the earlier marks removed), after the append that wrote them: a
    start whose last committed batch is marked reads nothing of the history."""
    _write_mark(_marks(checkpoint, RECORDED), str(batch_id), batch_id, storage)


def _write_mark(folder: str, name: str, batch_id: int, storage: Storage | None) -> None:
    """An empty file ``folder/name``, and the marks of earlier batches removed."""
    store = storage or storage_for(folder)
    target = f"{folder}/{name}"
    if not store.exists(target):
        store.write_bytes(target, b"")
    for f in list(store.list_files(folder)):
        mark = _mark(f.path.rsplit("/", 1)[-1])
        if mark and mark[0] < batch_id:
            store.delete(f.path)


def clear_unplanned_debris(checkpoint: str, storage: Storage | None = None) -> list[str]:
    """Remove, and return the paths of, what a driver killed before its query planned a first
    batch left in the logs Spark checks at a first start.

    Spark writes each log file under a hidden temporary name and renames it into place
    (``CheckpointFileManager.createAtomic``: ``.<name>.<uuid>.tmp``, beside it Hadoop's checksum
    ``..<name>.<uuid>.tmp.crc`` on a local file system); a kill in between leaves the temporary
    file. Spark's readers skip it, but a query whose offset log holds no batch requires
    ``offsets/``, ``commits/`` and ``state/`` to be empty
    (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``; Spark 4.0 does not check), so a kill during
    the first offset write would fail every later start. Call this only when the offset log holds
    no batch: a folder of nothing but such files is emptied; one holding anything else is left for
    Spark's check to report."""
    root = checkpoint.rstrip("/")
    store = storage or storage_for(root)
    removed: list[str] = []
    for log in ("offsets", "commits", "state"):
        removed += clear_debris(store, f"{root}/{log}", _is_temporary) or []
    return removed


def _is_temporary(path: str) -> bool:
    """A file Spark's atomic writer had not renamed into place (:func:`clear_unplanned_debris`)."""
    name = path.rsplit("/", 1)[-1]
    return name.startswith(".") and name.endswith((".tmp", ".tmp.crc"))


def _mark(name: str) -> tuple[int, bool] | None:
    """A mark's batch and whether it settled failed files only; None for another file."""
    batch = name.removesuffix(FAILED_ONLY)
    return (int(batch), batch != name) if batch.isdigit() else None


def _batch_id(name: str) -> int | None:
    return int(name) if name.isdigit() else None


def _marks(checkpoint: str, kind: str) -> str:
    return f"{checkpoint.rstrip('/')}/{kind}"


def _last_logged(folder: str, storage: Storage | None,
                 batch_of: Callable[[str], int | None] = _batch_id) -> int:
    """The highest batch among the files of ``folder`` (``batch_of`` a file's name, None for a
    file that does not count), or -1 when there is none."""
    store = storage or storage_for(folder)
    if not store.exists(folder):
        return -1
    ids = [b for f in store.list_files(folder)
           if (b := batch_of(f.path.rsplit("/", 1)[-1])) is not None]
    return max(ids, default=-1)


def batch_source_files(checkpoint: str, batch_id: int, source: int = 0,
                       storage: Storage | None = None) -> dict[str, int]:
    """The files a file stream source put into ``batch_id``: path -> modification time (ms).

    The batch covers the source's log entries after the previous batch's offset up to its own
    (both in the offset log): usually one entry with the batch's id, but a query stopped between
    the source logging its next files and the offset log recording the batch leaves an entry no
    batch has read, which the next batch reads with its own. The source's log
    (``sources/<n>/<id>``) is written before the batch runs, so it lists every file of the batch,
    empty ones included. Every ``spark.sql.streaming.fileSource.log.compactInterval`` entries it
    is compacted into ``<id>.compact``, which holds all entries up to that one."""
    end = _source_offset(checkpoint, batch_id, source, storage)
    start = _source_offset(checkpoint, batch_id - 1, source, storage) if batch_id > 0 else -1
    wanted = range(start + 1, end + 1)
    folder = f"{checkpoint.rstrip('/')}/sources/{source}"
    store = storage or storage_for(folder)
    candidates = [f"{folder}/{i}" for i in wanted if store.exists(f"{folder}/{i}")]
    if len(candidates) < len(wanted) and store.exists(folder):
        compacts = sorted(
            (int(name.split(".")[0]), f.path)
            for f in store.list_files(folder)
            if (name := f.path.rsplit("/", 1)[-1]).endswith(".compact")
            and name.split(".")[0].isdigit()
        )
        candidates += [path for cid, path in compacts if cid >= start + 1][:1]
    files: dict[str, int] = {}
    for path in candidates:
        with store.open(path) as fh:
            lines = fh.read().decode("utf-8").splitlines()
        for line in lines[1:]:  # the first line is the log's version, "v1"
            if line.strip():
                entry = json.loads(line)
                if int(entry["batchId"]) in wanted:
                    files[entry["path"]] = int(entry["timestamp"])
    return files


def _source_offset(checkpoint: str, batch_id: int, source: int,
                   storage: Storage | None) -> int:
    """A file source's log offset at the end of ``batch_id``, from the offset log: after the
    version line and the batch's metadata, one line per source (``{"logOffset": N}``)."""
    path = f"{checkpoint.rstrip('/')}/offsets/{batch_id}"
    with (storage or storage_for(path)).open(path) as fh:
        lines = fh.read().decode("utf-8").splitlines()
    return int(json.loads(lines[2 + source])["logOffset"])
