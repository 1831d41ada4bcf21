"""File operations the framework performs on the lake itself (not through Spark).

Bronze moves files to the archive and the quarantine folder, stats and reads them; the
implementation is chosen by the path's scheme from :data:`IMPLEMENTATIONS`. Paths may be
given as plain paths or as the ``file:`` URIs Spark reports.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Protocol
from urllib.parse import unquote, urlparse

from framework.errors import StorageError

if TYPE_CHECKING:
    from framework.config.model import Environment


@dataclass(frozen=True)
class FileInfo:
    """A file in the lake: its path (as the storage names it), size and modification time."""

    path: str
    size: int
    modified_ms: int


class Storage(Protocol):
    """The operations bronze and the CLI need from a file system."""

    def exists(self, path: str) -> bool: ...

    def stat(self, path: str) -> FileInfo: ...

    def open(self, path: str) -> IO[bytes]: ...

    def move(self, src: str, dst: str) -> None:
        """Move a file, creating the target's parents; an existing target is an error."""

    def delete(self, path: str) -> None: ...

    def list_files(self, path: str) -> Iterator[FileInfo]:
        """Every file under ``path``, recursively."""

    def makedirs(self, path: str) -> None: ...

    def upload(self, local_file: str, path: str, modified_ms: int | None = None) -> None:
        """Copy a local file to ``path``, with the modification time ``modified_ms`` where
        the store lets a writer set it; an existing target is an error."""

    # The store's modification times are whole multiples of this (ms): 1 on a local disk,
    # 1000 on ADLS (HTTP dates).
    time_resolution_ms: int

    def touch(self, path: str) -> None:
        """Set the file's modification time to now, where the store allows it."""


def local_path(path: str) -> str:
    """A local file system path from a plain path or a ``file:`` URI."""
    if path.startswith("file:"):
        return unquote(urlparse(path).path)
    return path


def uploading_name(path: str) -> str:
    """Where a file is written before it is renamed into place: a hidden name in the same
    folder, which Spark's file source never lists (it skips names starting with '.')."""
    folder, _, name = path.rpartition("/")
    return f"{folder}/.{name}.uploading"


def archive_target(archive_dir: str, source_file: str) -> str:
    """Where a source file goes in an archive: the archive folder plus the file's full path.

    This is the layout Spark's ``cleanSource=archive`` uses, so files archived by Spark and by
    the framework's reconciler end up side by side.
    """
    source = urlparse(source_file).path if "://" in source_file else local_path(source_file)
    return archive_dir.rstrip("/") + "/" + source.lstrip("/")


class LocalStorage:
    """A local (or mounted) file system."""

    time_resolution_ms = 1  # what Hadoop's local file system (and so Spark) reports

    def exists(self, path: str) -> bool:
        return os.path.exists(local_path(path))

    def stat(self, path: str) -> FileInfo:
        p = local_path(path)
        try:
            st = os.stat(p)
        except OSError as exc:
            raise StorageError(f"expected a file at {p}, found none: {exc}") from exc
        return FileInfo(p, st.st_size, st.st_mtime_ns // 1_000_000)

    def open(self, path: str) -> IO[bytes]:
        try:
            return open(local_path(path), "rb")
        except OSError as exc:
            raise StorageError(f"cannot open {local_path(path)}: {exc}") from exc

    def move(self, src: str, dst: str) -> None:
        s, d = local_path(src), local_path(dst)
        if os.path.exists(d):
            raise StorageError(f"expected no file at move target {d}, found one (source {s})")
        try:
            os.makedirs(os.path.dirname(d), exist_ok=True)
            os.replace(s, d) if _same_device(s, d) else shutil.move(s, d)
        except OSError as exc:
            raise StorageError(f"cannot move {s} to {d}: {exc}") from exc

    def delete(self, path: str) -> None:
        try:
            os.remove(local_path(path))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StorageError(f"cannot delete {local_path(path)}: {exc}") from exc

    def list_files(self, path: str) -> Iterator[FileInfo]:
        base = local_path(path)
        for folder, _dirs, files in os.walk(base):
            for name in sorted(files):
                yield self.stat(os.path.join(folder, name))

    def makedirs(self, path: str) -> None:
        os.makedirs(local_path(path), exist_ok=True)

    def upload(self, local_file: str, path: str, modified_ms: int | None = None) -> None:
        d = local_path(path)
        if os.path.exists(d):
            raise StorageError(f"expected no file at {d}, found one (uploading {local_file})")
        staging = uploading_name(d)
        try:
            os.makedirs(os.path.dirname(d), exist_ok=True)
            shutil.copyfile(local_file, staging)
            if modified_ms is not None:  # set before it appears: a reader sees only this time
                os.utime(staging, ns=(modified_ms * 1_000_000, modified_ms * 1_000_000))
            os.replace(staging, d)  # the file appears whole or not at all
        except OSError as exc:
            raise StorageError(f"cannot copy {local_file} to {d}: {exc}") from exc

    def touch(self, path: str) -> None:
        os.utime(local_path(path))


def _same_device(src: str, dst: str) -> bool:
    try:
        return os.stat(src).st_dev == os.stat(os.path.dirname(dst)).st_dev
    except OSError:
        return False


def _adls(path: str, env: Environment | None) -> Storage:
    from framework.adls import AdlsStorage

    if env is None or env.storage is None:
        raise StorageError(f"expected the environment's storage settings (account and auth) "
                           f"for {path}, found none")
    key = (env.name, env.storage.account)
    if key not in _ADLS_CLIENTS:  # one client (and token cache) per account and environment
        _ADLS_CLIENTS[key] = AdlsStorage(env.storage, env)
    return _ADLS_CLIENTS[key]


_ADLS_CLIENTS: dict[tuple[str, str], Storage] = {}

IMPLEMENTATIONS: dict[str, Callable[[str, Environment | None], Storage]] = {
    "": lambda path, env: LocalStorage(),
    "file": lambda path, env: LocalStorage(),
    "abfss": _adls,
    "abfs": _adls,
}


def storage_for(path: str, env: Environment | None = None) -> Storage:
    """The storage implementation for ``path``'s scheme; ADLS paths take their account's
    credentials from ``env``."""
    scheme = urlparse(path).scheme if "://" in path or path.startswith("file:") else ""
    try:
        factory = IMPLEMENTATIONS[scheme]
    except KeyError:
        valid = ", ".join(repr(s) for s in IMPLEMENTATIONS if s) or "none"
        raise StorageError(
            f"expected a path with a supported scheme (local paths, {valid}), found {path!r}"
        ) from None
    return factory(path, env)


RETENTION = re.compile(r"^\s*(?P<n>\d+)\s*(?P<unit>d|days?|h|hours?|m|minutes?)\s*$")


def land(storage: Storage, files: Sequence[str], folder: str, *, keep_times: bool = False,
         on_landed: Callable[[str, FileInfo], None] | None = None) -> list[FileInfo]:
    """Upload local ``files`` into ``folder`` in the order given, each with a modification
    time later than the one before it and than every file already in ``folder``: Spark's file
    source reads files in the order of their times, so the feed is read in delivery order.

    Times are set by the framework where the store allows it (a local disk: one millisecond
    apart at least). A store that sets them itself (ADLS, in whole seconds) gets each file
    in a later second than the one before: the upload waits for the next second, and a file
    whose time still ties is written again (flushed) a second later. ``keep_times`` gives each
    file its own local modification time instead (local stores only): the feed is then read
    in the order of those times. ``on_landed`` is called with each file as it lands."""
    if keep_times and storage.time_resolution_ms != 1:
        raise StorageError(f"expected a store whose files' times can be set for --keep-times, "
                           f"found {folder}, whose store sets them itself (when written)")
    resolution = storage.time_resolution_ms
    newest = max((f.modified_ms for f in storage.list_files(folder)), default=0) \
        if storage.exists(folder) else 0
    landed = []
    for local_file in files:
        target = f"{folder.rstrip('/')}/{os.path.basename(local_file)}"
        if keep_times:
            storage.upload(local_file, target, int(os.stat(local_file).st_mtime * 1000))
        elif resolution == 1:
            storage.upload(local_file, target, max(int(time.time() * 1000), newest + 1))
        else:
            _wait_past(newest, resolution)
            storage.upload(local_file, target)
        info = storage.stat(target)
        for _ in range(5):
            if keep_times or info.modified_ms // resolution > newest // resolution:
                break
            _wait_past(newest, resolution)  # the store's clock is behind this machine's
            storage.touch(target)
            info = storage.stat(target)
        else:
            raise StorageError(f"expected {target} to get a modification time after "
                               f"{newest} ms (the file landed before it), found "
                               f"{info.modified_ms} ms after five tries")
        newest = max(newest, info.modified_ms)
        landed.append(info)
        if on_landed is not None:
            on_landed(local_file, info)
    return landed


def _wait_past(ms: int, resolution: int) -> None:
    """Sleep until this machine's clock is in a later tick of ``resolution`` than ``ms``."""
    next_tick = (ms // resolution + 1) * resolution
    delay = next_tick / 1000 - time.time()
    if delay > 0:
        time.sleep(delay)


def parse_retention(text: str) -> int:
    """``30d``, ``12h`` or ``90m`` (also ``30 days``...) in milliseconds."""
    m = RETENTION.match(text)
    if not m:
        raise StorageError(f"expected a retention such as 30d, 12h or 90m, found {text!r}")
    unit = {"d": 86_400_000, "h": 3_600_000, "m": 60_000}[m.group("unit")[0]]
    return int(m.group("n")) * unit


def purge_older_than(storage: Storage, folder: str, older_than_ms: int, now_ms: int,
                     dry_run: bool = False) -> list[FileInfo]:
    """Delete the files under ``folder`` last modified more than ``older_than_ms`` before
    ``now_ms``; returns them (all that would go, with ``dry_run``)."""
    if not storage.exists(folder):
        return []
    expired = [f for f in storage.list_files(folder) if f.modified_ms < now_ms - older_than_ms]
    if not dry_run:
        for f in expired:
            storage.delete(f.path)
    return expired
