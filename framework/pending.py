"""Which tables a run has work for, found without Spark.

A ``medallion run`` that finds nothing new should cost what ``medallion status`` costs, not a
JVM and a streaming query per table. So each table's job, when it completes, leaves a mark in
its checkpoint folder (:class:`LastRun`): the spec it ran with (a fingerprint), its own Delta
version after the run, and the Delta version of each table it reads as it was when the job
started (an ``availableNow`` query takes at least everything committed then). A table is up to
date when, now:

- its mark is there (the job completed; a job that starts removes it, so a run cut short
  leaves none) and was made with the same spec and the same framework;
- its own version is still the one marked (nothing else wrote it since: a refresh empties it,
  ``optimize`` compacts it), and its checkpoint holds no batch planned but not committed;
- every table it reads is still at the marked version;
- nothing waits in its own source: the layer's :class:`~framework.layers.LayerPlugin` says so
  (``backlog``: landing files for a file feed; unknown for a log of records such as Kafka, whose
  offsets only Spark reads, so such a table always runs).

Marks are read and written only where the lake's Delta logs can be read without Spark
(:func:`framework.deltalog.readable`: a local root, or ADLS with the environment's credentials);
elsewhere every table runs. A mark is only ever a reason to skip work that would have done
nothing: when in doubt (no mark, an unreadable log, an unknown backlog), the table runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from framework import __version__
from framework.checkpoint import last_committed_batch, last_planned_batch
from framework.config.model import Environment, Layer, Stored, Table
from framework.errors import StorageError
from framework.layers import backlog_of
from framework.logging import get_logger
from framework.storage import Storage, storage_for

MARK = "last_run.json"  # in the table's checkpoint folder: set aside with it by a refresh


@dataclass(frozen=True)
class LastRun:
    """What a table's last completed job ran against."""

    fingerprint: str  # of the spec and the framework's version
    version: int | None  # the table's own Delta version after the job (None: not Delta)
    upstream: Mapping[str, int | None]  # "layer.name" -> its Delta version as the job began


def fingerprint(table: Table) -> str:
    """The spec the table runs with, and the framework's version, as one digest."""
    text = json.dumps({"spec": table.spec.model_dump(mode="json"), "name": table.full_name,
                       "location": table.location, "framework": __version__}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Marks:
    """The tables' marks in one lake (see the module's text)."""

    def __init__(self, env: Environment) -> None:
        from framework.deltalog import readable

        self.enabled = readable(env)

    def upstream_versions(self, table: Table) -> dict[str, int | None]:
        """The current Delta version of each table ``table`` reads."""
        return {f"{layer.value}.{name}": self._version(table, layer, name)
                for layer, name in table.spec.upstream()}

    def begin(self, table: Table) -> dict[str, int | None] | None:
        """Remove the table's mark before its job; the versions of what it reads (None: no mark)."""
        if not self.enabled:
            return None
        self._store(table).delete(self._path(table))
        return self.upstream_versions(table)

    def complete(self, table: Table, upstream: Mapping[str, int | None]) -> None:
        """After the table's job completed: mark it with what it ran against."""
        mark = LastRun(fingerprint(table), self._own_version(table), dict(upstream))
        self._store(table).write_bytes(self._path(table),
                                       json.dumps(asdict(mark), sort_keys=True).encode("utf-8"))

    def pending(self, table: Table) -> str | None:
        """Why ``table`` has work now (a short reason), None when it is up to date."""
        if not self.enabled:
            return "its lake's logs are read with Spark only"
        try:
            return self._pending(table)
        except StorageError as exc:
            return f"its state could not be read ({exc})"

    def _pending(self, table: Table) -> str | None:
        backlog = backlog_of(table)
        if backlog is None:
            return "its source's backlog is known to Spark only"
        if backlog:
            return "files wait in its source"
        mark = self._read(table)
        if mark is None:
            return "no completed run is marked"
        if mark.fingerprint != fingerprint(table):
            return "its spec or the framework changed"
        store = self._store(table)
        if last_planned_batch(table.checkpoint, store) > last_committed_batch(table.checkpoint,
                                                                              store):
            return "a batch was planned and not committed"
        if mark.version != self._own_version(table):
            return "it was written since its last run"
        if dict(mark.upstream) != self.upstream_versions(table):
            return "a table it reads has new commits"
        return None

    # ------------------------------------------------------------------ the lake's files
    def _read(self, table: Table) -> LastRun | None:
        store = self._store(table)
        path = self._path(table)
        try:
            if not store.exists(path):
                return None
            with store.open(path) as fh:
                data = json.loads(fh.read().decode("utf-8"))
            return LastRun(str(data["fingerprint"]), data["version"], dict(data["upstream"]))
        except (StorageError, ValueError, KeyError, TypeError) as exc:
            get_logger(table=table.full_name).warning("run.mark.unreadable", path=path,
                                                      error=str(exc))
            return None

    def _own_version(self, table: Table) -> int | None:
        if table.spec.stored() is not Stored.DELTA:
            return None
        return _log_version(table.location, table)

    @staticmethod
    def _version(table: Table, layer: Layer, name: str) -> int | None:
        """A table's version (None for one that is not Delta: a view has no log)."""
        return _log_version(table.env.path("tables", layer.value, name), table)

    @staticmethod
    def _path(table: Table) -> str:
        return f"{table.checkpoint.rstrip('/')}/{MARK}"

    @staticmethod
    def _store(table: Table) -> Storage:
        return storage_for(table.checkpoint, table.env)


def _log_version(location: str, table: Table) -> int | None:
    from framework.deltalog import log_version

    return log_version(location, table.env)
