"""One writer per lake: the lease a command takes before it starts Spark.

A second ``medallion run`` on a lake in use would otherwise wait on the embedded metastore's lock
and fail a minute later with a Hive stack. With the lease it learns at once who holds the lake: it
exits 2 with ``lake in use by run <id> on <host> since <time>``, or waits with ``--wait``.

The lease is a series of small JSON files under ``<root>/_lease/``, one per holder, numbered
(``0000000007.json``); the holder is the highest number. A command takes the lake by creating
the next number, with the store's create-if-absent (:meth:`Storage.create`, one step on a
local disk, HDFS and ADLS), so of two commands that find the lake free only one gets it.
While it holds the lake it renews its file every ``ttl / 4`` seconds; on exit it marks it
released (the file stays, so numbers only grow and an old holder can never mistake a newer
lease for its own).

A holder's lease is over when it is released, when its process is gone (same host, its pid no
longer runs: a killed driver's lease is taken over at once), or when it was not renewed for
``ttl`` seconds (a driver on another host, or a process that stopped renewing). A holder that
finds a higher number than its own has lost the lake: it logs ``lake.lease.lost`` and stops
its run at the next batch boundary (SIGTERM to itself), so two writers never go on together.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime

from framework.errors import LakeInUseError, StorageError
from framework.logging import get_logger
from framework.storage import Storage

FOLDER = "_lease"
TTL_SECONDS = 60.0
POLL_SECONDS = 1.0


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) the lake: one lease file's content."""

    run_id: str
    command: str
    host: str
    pid: int
    since: float  # epoch seconds
    renewed: float
    ttl: float
    released: bool = False
    serves: str | None = None  # a ``medallion serve`` holding the lake: its host:port

    @classmethod
    def parse(cls, text: str | bytes) -> Holder:
        """A holder from its lease file's JSON; keys this version does not know (a newer
        version's) are ignored, so that versions can share a lake."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in json.loads(text).items() if k in known})

    def when(self) -> str:
        return datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    def describe(self) -> str:
        return (f"run {self.run_id} ({self.command}, pid {self.pid}) on {self.host} since "
                f"{self.when()}")

    def over(self, now: float) -> str | None:
        """Why this lease no longer holds the lake, or None while it does."""
        if self.released:
            return "released"
        if self.host == socket.gethostname() and not _running(self.pid):
            return f"its process {self.pid} is gone"
        if now - self.renewed > self.ttl:
            return f"not renewed for {now - self.renewed:.0f} s (lease {self.ttl:.0f} s)"
        return None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class Lease:
    """The lake's lease, taken by :meth:`acquire`, renewed by a daemon thread to :meth:`release`."""

    def __init__(self, storage: Storage, root: str, command: str, *, ttl: float = TTL_SECONDS,
                 run_id: str | None = None, on_lost: Callable[[], None] | None = None) -> None:
        self.storage = storage
        self.folder = root.rstrip("/") + "/" + FOLDER
        self.ttl = ttl
        now = time.time()
        self.holder = Holder(run_id=run_id or uuid.uuid4().hex[:12], command=command,
                             host=socket.gethostname(), pid=os.getpid(), since=now,
                             renewed=now, ttl=ttl)
        self.number: int | None = None
        self.on_lost = on_lost or _stop_self
        self.log = get_logger(lake=root, run_id=self.holder.run_id)
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        # the renewing thread, advertise and release write the holder one at a time: a renewal
        # never writes a holder read before an advertise, nor writes after the release
        self._writing = threading.Lock()

    @property
    def run_id(self) -> str:
        return self.holder.run_id

    # ------------------------------------------------------------------ taking the lake
    def acquire(self, wait: bool = False, poll: float = POLL_SECONDS) -> Lease:
        """Take the lake; if another command holds it, raise :class:`LakeInUseError`, or with
        ``wait`` poll until it is free."""
        said = False
        while True:
            top, current = self._top()
            reason = "the lake had no lease" if current is None else current.over(time.time())
            if reason is not None:
                number = top + 1
                now = time.time()
                self.holder = replace(self.holder, since=now, renewed=now)
                if self.storage.create(self._path(number), self._bytes(self.holder)):
                    self.number = number
                    if current is not None and not current.released:
                        self.log.warning("lake.lease.taken_over", previous=current.describe(),
                                         reason=reason)
                    self.log.debug("lake.lease.taken", number=number,
                                  command=self.holder.command)
                    self._forget_below(number)
                    self._start_renewing()
                    return self
                continue  # another command took that number first: look again
            assert current is not None
            if not wait:
                raise LakeInUseError(
                    f"lake in use by {current.describe()}; expected no other command on "
                    f"{self.folder.rsplit('/', 1)[0]} (wait for it with --wait)")
            if not said:
                self.log.warning("lake.lease.waiting", holder=current.describe())
                said = True
            time.sleep(poll)

    def _top(self) -> tuple[int, Holder | None]:
        """The highest lease number and its holder (0, None on a lake never leased). A file
        being written (empty or cut) is read again."""
        for _ in range(50):
            numbers = sorted(
                int(name[:-5]) for f in self.storage.list_files(self.folder)
                if (name := f.path.rsplit("/", 1)[-1]).endswith(".json") and name[:-5].isdigit())
            if not numbers:
                return 0, None
            try:
                with self.storage.open(self._path(numbers[-1])) as fh:
                    return numbers[-1], Holder.parse(fh.read())
            except (StorageError, ValueError, TypeError):
                time.sleep(0.05)  # written right now, or replaced: read again
        raise StorageError(f"expected a readable lease file under {self.folder}, found none "
                           "after 50 tries")

    def _forget_below(self, number: int) -> None:
        for f in list(self.storage.list_files(self.folder)):
            name = f.path.rsplit("/", 1)[-1]
            if name.endswith(".json") and name[:-5].isdigit() and int(name[:-5]) < number:
                with contextlib.suppress(StorageError):
                    self.storage.delete(f.path)

    def current(self) -> Holder | None:
        """Who holds the lake now (None when no lease holds it), without taking it."""
        _, holder = self._top()
        return holder if holder is not None and holder.over(time.time()) is None else None

    # ------------------------------------------------------------------ holding it
    def advertise(self, address: str) -> None:
        """Say in the lease that this holder serves the lake's catalog at ``address``
        (host:port), for ``medallion sql`` to query it there."""
        with self._writing:
            self.holder = replace(self.holder, serves=address)
            if self.number is not None:
                self.storage.write_bytes(self._path(self.number), self._bytes(self.holder))

    def _start_renewing(self) -> None:
        self._thread = threading.Thread(target=self._renew_loop, name="lake-lease",
                                        daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._done.wait(self.ttl / 4):
            try:
                if not self.renew():
                    return
            except StorageError as exc:  # a passing outage: the next turn tries again
                self.log.warning("lake.lease.renew_failed", error=str(exc))

    def renew(self) -> bool:
        """Renew the lease; False once released, or if another took it (``on_lost`` then called)."""
        with self._writing:  # one at a time with advertise and release
            if self.number is None:  # released meanwhile: the released holder stays
                return False
            top, current = self._top()
            if top != self.number or current is None or current.run_id != self.run_id:
                self.log.error("lake.lease.lost", number=self.number,
                               holder=current.describe() if current else None,
                               action="stopping this run at the next batch boundary")
                self._done.set()
                self.on_lost()
                return False
            self.holder = replace(self.holder, renewed=time.time())
            self.storage.write_bytes(self._path(top), self._bytes(self.holder))
            return True

    def release(self) -> None:
        """Give the lake back (the file stays, marked released)."""
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.number is None:
            return
        with self._writing:  # after a renewal still running (its join timed out)
            top, current = self._top()
            if top == self.number and current is not None and current.run_id == self.run_id:
                self.storage.write_bytes(self._path(top),
                                         self._bytes(replace(self.holder, released=True)))
                self.log.debug("lake.lease.released", number=top)
            self.number = None

    # ------------------------------------------------------------------ helpers
    def _path(self, number: int) -> str:
        return f"{self.folder}/{number:010d}.json"

    @staticmethod
    def _bytes(holder: Holder) -> bytes:
        return json.dumps(asdict(holder)).encode()


def _stop_self() -> None:
    """A run that lost the lake stops as if asked to (SIGTERM: at the next batch boundary)."""
    os.kill(os.getpid(), signal.SIGTERM)
