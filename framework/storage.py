"""File operations the framework performs on the lake itself (not through Spark).

Bronze moves files to the archive and the quarantine folder, stats and reads them; the
implementation is chosen by the path's scheme from :data:`IMPLEMENTATIONS`. Paths may be
given as plain paths or as the ``file:`` URIs Spark reports.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
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

    def upload(self, local_file: str, path: str) -> None:
        """Copy a local file to ``path``; an existing target is an error."""


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

    def exists(self, path: str) -> bool:
        return os.path.exists(local_path(path))

    def stat(self, path: str) -> FileInfo:
        p = local_path(path)
        try:
            st = os.stat(p)
        except OSError as exc:
            raise StorageError(f"expected a file at {p}, found none: {exc}") from exc
        return FileInfo(p, st.st_size, int(st.st_mtime * 1000))

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

    def upload(self, local_file: str, path: str) -> None:
        d = local_path(path)
        if os.path.exists(d):
            raise StorageError(f"expected no file at {d}, found one (uploading {local_file})")
        staging = uploading_name(d)
        try:
            os.makedirs(os.path.dirname(d), exist_ok=True)
            shutil.copyfile(local_file, staging)
            os.replace(staging, d)  # the file appears whole or not at all
        except OSError as exc:
            raise StorageError(f"cannot copy {local_file} to {d}: {exc}") from exc


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
