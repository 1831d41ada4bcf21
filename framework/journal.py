"""The journal of an operation that rewrites tables (a refresh, a backfill): what it planned
and how far it got, so that the next command completes what one killed halfway left.

It lives in the lake, under ``<root>/_refresh/``:

* ``journal/0000.json``, ``0001.json``...: the records of the one open operation. Each is
  created once with the store's create-if-absent (:meth:`Storage.create`) and never rewritten,
  as the lease's files are: ADLS writes a file in several requests, so a rewritten record could
  be read half written, while a new one is there whole, or empty or cut short by a kill (then
  skipped, the next taking the number after it). Record 0000 holds the plan; each later one a
  new :class:`JournalState` and what that step found. The state is the last parsed record's.
* ``<op>/``: the operation's own folders (the checkpoints it set aside, say), deleted at close.
* ``closed/<op>/``: the records of the operations that ended, moved there when they close.

Only the holder of the lake's lease (:mod:`framework.lease`) writes the journal.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from framework.errors import OperationOpenError, StorageError
from framework.logging import get_logger
from framework.storage import Storage

FOLDER = "_refresh"
_DIGITS = 4


class OperationKind(StrEnum):
    """Rebuild tables from their sources, or ingest a folder of historical files."""

    REFRESH = "refresh"
    BACKFILL = "backfill"


class JournalState(StrEnum):
    """How far an operation got, in the order its steps are taken; ``abandoned``: one begun
    and stopped before it recorded its plan, closed with nothing done."""

    PLANNED = "planned"
    SET_ASIDE = "set_aside"
    RESET = "reset"
    REBUILT = "rebuilt"
    DONE = "done"
    ABANDONED = "abandoned"

    @property
    def final(self) -> bool:
        return self in (JournalState.DONE, JournalState.ABANDONED)


@dataclass(frozen=True)
class Record:
    """One journal record: the operation, its number, the state it records, when, and what
    the step found (the plan, for record 0)."""

    op: str
    seq: int
    state: JournalState
    at: str
    body: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps({"op": self.op, "seq": self.seq, "state": self.state.value,
                           "at": self.at, **self.body}, sort_keys=True).encode()

    @classmethod
    def parse(cls, data: bytes) -> Record | None:
        """The record in ``data``; None for an empty, cut-short or foreign file."""
        try:
            raw = json.loads(data)
            head = {k: raw.pop(k) for k in ("op", "seq", "state", "at")}
            return cls(str(head["op"]), int(head["seq"]), JournalState(head["state"]),
                       str(head["at"]), raw)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


class Journal:
    """The lake's journal of operations (see the module's account)."""

    def __init__(self, store: Storage, root: str) -> None:
        self.store = store
        self.base = f"{root.rstrip('/')}/{FOLDER}"
        self.folder = f"{self.base}/journal"
        self.log = get_logger(component="journal")

    def records(self) -> list[Record]:
        """The open operation's records that parse, in order; none when no operation is open
        (a journal whose first record does not parse is a begin cut short: no operation)."""
        if not self.store.exists(self.folder):
            return []
        found = []
        for info in sorted(self.store.list_files(self.folder), key=lambda f: f.path):
            name = info.path.rpartition("/")[2]
            if not (name.endswith(".json") and name[:-5].isdigit()):
                continue
            record = Record.parse(self.store.open(info.path).read())
            if record is not None and record.seq == int(name[:-5]):
                found.append(record)
        return found if found and found[0].seq == 0 else []

    def last(self) -> Record | None:
        """The open operation's state: its last record that parses (None: none open)."""
        records = self.records()
        return records[-1] if records else None

    def begin(self, kind: OperationKind, plan: dict[str, Any]) -> Record:
        """Open an operation with its plan (record 0, state planned)."""
        open_now = self.last()
        if open_now is not None:
            raise OperationOpenError(
                f"expected no open operation in {self.folder} to begin a {kind.value}, found "
                f"{open_now.op} ({open_now.state.value} since {open_now.at}): run 'medallion "
                f"run' or the same command again to complete it first")
        if self.store.exists(self.folder):  # a begin cut short (by the lake's holder)
            self.log.warning("journal.unbegun.cleared", folder=self.folder)
            self.store.delete_folder(self.folder)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        op = f"{kind.value[0]}-{stamp}-{secrets.token_hex(3)}"
        record = Record(op, 0, JournalState.PLANNED, _now(), {"kind": kind.value, **plan})
        if not self.store.create(self._path(0), record.to_json()):
            raise OperationOpenError(f"expected to begin {op} in {self.folder}, found another "
                                     f"operation begun at the same moment")
        self.log.info("journal.begun", op=op, kind=kind.value)
        return record

    def append(self, state: JournalState, **found: Any) -> Record:
        """Record the open operation's next state (and what the step found)."""
        last = self.last()
        if last is None:
            raise StorageError(f"expected an open operation in {self.folder} to record "
                               f"{state.value}, found none")
        # after every file there, parsed or not (one cut short keeps its number)
        taken = [int(name[:-5]) for info in self.store.list_files(self.folder)
                 if (name := info.path.rpartition("/")[2]).endswith(".json")
                 and name[:-5].isdigit()]
        seq = max(taken) + 1
        record = Record(last.op, seq, state, _now(), found)
        if not self.store.create(self._path(seq), record.to_json()):
            raise StorageError(f"expected to write record {seq} of {last.op} in {self.folder}, "
                               f"found it written by another command")
        self.log.info("journal.recorded", op=last.op, seq=seq, state=state.value)
        return record

    def workspace(self, op: str) -> str:
        """The operation's own folder (the checkpoints it sets aside, say)."""
        return f"{self.base}/{op}"

    def close(self) -> None:
        """End the open operation, once its last record is final: its own folder deleted, its
        records moved to ``closed/<op>``. Idempotent: the next close finishes one cut short."""
        last = self.last()
        if last is None:
            return
        if not last.state.final:
            raise StorageError(f"expected {last.op} done or abandoned to close it, found it "
                               f"{last.state.value}")
        self.store.delete_folder(self.workspace(last.op))
        self.store.move_folder(self.folder, f"{self.base}/closed/{last.op}")
        self.log.info("journal.closed", op=last.op, state=last.state.value)

    def closed(self, op: str) -> list[Record]:
        """The records of an operation that ended."""
        folder = f"{self.base}/closed/{op}"
        records = [Record.parse(self.store.open(f.path).read())
                   for f in sorted(self.store.list_files(folder), key=lambda f: f.path)]
        return [r for r in records if r is not None]

    def _path(self, seq: int) -> str:
        return f"{self.folder}/{seq:0{_DIGITS}d}.json"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
