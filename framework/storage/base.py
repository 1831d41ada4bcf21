"""What every store is: the :class:`Storage` interface, :class:`FileInfo`, and path helpers
that need no store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Protocol
from urllib.parse import unquote, urlparse


@dataclass(frozen=True)
class FileInfo:
    """A file in the lake: its path (as the storage names it), size and modification time."""

    path: str
    size: int
    modified_ms: int


class Storage(Protocol):
    """The file operations the framework performs on the lake; one contract for every store
    (``tests/test_storage.py`` runs the same checks on each)."""

    def exists(self, path: str) -> bool: ...

    def stat(self, path: str) -> FileInfo:
        """The file's size and time; a missing file is a :class:`StorageError`."""

    def open(self, path: str) -> IO[bytes]:
        """The file's bytes (small files: checkpoint logs, manifests)."""

    def head(self, path: str, size: int) -> bytes:
        """The file's first ``size`` bytes at most (a CSV file's header), without reading the
        rest; a missing file is a :class:`StorageError`."""

    def move(self, src: str, dst: str) -> None:
        """Move a file, creating the target's parents; an existing target is an error."""

    def try_move(self, src: str, dst: str) -> bool:
        """Move a file if it is there and the target is not (creating the target's parents);
        whether it moved. For a step that may have run before: one call where a check, a
        move and a check would be three."""

    def delete(self, path: str) -> None:
        """Delete a file (or an empty folder, on stores that have folders); a missing one is
        not an error."""

    def move_folder(self, src: str, dst: str) -> None:
        """Move a folder and all it holds in one rename (atomic on a local disk, HDFS and ADLS
        with a hierarchical namespace), creating the target's parents; a missing source or an
        existing target is an error."""

    def delete_folder(self, path: str) -> None:
        """Delete a folder and all it holds; a missing one is not an error."""

    def list_files(self, path: str) -> Iterator[FileInfo]:
        """Every file under ``path``, recursively; nothing for a missing folder."""

    def makedirs(self, path: str) -> None:
        """Create the folder and its parents; an existing one is not an error."""

    def upload(self, local_file: str, path: str, modified_ms: int | None = None) -> None:
        """Copy a local file to ``path`` (it appears whole: written under a hidden name, then
        renamed), with the modification time ``modified_ms`` where the store lets a writer set
        it; an existing target is an error."""

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write a small file whole (a manifest), replacing one that is there."""

    def create(self, path: str, data: bytes) -> bool:
        """Write a small file only if no file is at ``path``, in one step no other writer can
        come between (the lake's lease); whether it was written."""

    def touch(self, path: str) -> None:
        """Set the file's modification time to now, where the store allows it."""

    def resolution_ms(self, path: str) -> int:
        """The resolution of the modification times of the store ``path`` is on (ms): 1 on a
        local disk and HDFS, 1000 on ADLS and S3 (HTTP dates)."""


# Schemes of the stores that need no JVM (framework.storage.IMPLEMENTATIONS): what a Spark
# Connect client can reach itself.
JVM_FREE_SCHEMES = ("", "file", "abfss", "abfs")


def connect_refusal(path: str) -> str:
    """Why ``path`` cannot be the lake of a Spark Connect session."""
    stores = ", ".join(f"{s}://" for s in JVM_FREE_SCHEMES if s and s != "file")
    return (f"expected a lakehouse root a Spark Connect client reaches without a JVM (a local "
            f"folder, {stores}), found {path!r}: its scheme {scheme_of(path)!r} has a file "
            f"system only in Spark's JVM, which a Spark Connect client does not have (run it "
            f"with runtime local or submit, or on a Databricks cluster in dedicated access "
            f"mode)")


def local_path(path: str) -> str:
    """A local file system path from a plain path or a ``file:`` path; another URL in one
    spelling: ``s:/p``, as Hadoop writes a path with no authority, is ``s:///p``. The name is
    taken as it is: a URI from Spark, whose name is escaped, goes through :func:`from_uri`."""
    if path.startswith("file:"):  # file:/p, file:///p (a name as it is, not an escaped URI)
        rest = path[len("file:"):]
        return "/" + rest[2:].partition("/")[2] if rest.startswith("//") else rest
    scheme, sep, rest = path.partition(":/")
    if sep and scheme.isalnum() and not rest.startswith("/"):
        return f"{scheme}:///{rest}"
    return path


def from_uri(uri: str) -> str:
    """The path of a file Spark names by its URI (its file source's log, ``_metadata``'s
    ``file_path``, a read error): percent-escapes decoded, as the file is named, in the
    spelling of :func:`local_path`. A name with a space, ``%``, ``#`` or ``?`` is escaped in
    the URI; the storage layer takes the name itself."""
    scheme, sep, rest = uri.partition(":")
    if not sep or not scheme.isalnum() or len(scheme) < 2 or not rest.startswith("/"):
        return uri  # a plain path
    if rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        return local_path(f"{scheme}://{authority}{slash}{unquote(path)}")
    return local_path(f"{scheme}:{unquote(rest)}")


def path_part(path: str) -> str:
    """The path of ``path`` without its scheme and authority (``s://a/p`` -> ``/p``); the
    name is taken as it is (not as an escaped URI: ``#`` and ``?`` are part of it)."""
    scheme, sep, rest = local_path(path).partition("://")
    if sep and scheme.isalnum():
        return "/" + rest.partition("/")[2]
    return local_path(path)


UPLOADING_SUFFIX = ".uploading"


def uploading_name(path: str) -> str:
    """Where a file is written before it is renamed into place: a hidden name in the same
    folder, which Spark's file source never lists (it skips names starting with '.')."""
    folder, _, name = path.rpartition("/")
    return f"{folder}/.{name}{UPLOADING_SUFFIX}"


def archive_target(archive_dir: str, source_file: str) -> str:
    """Where a source file goes in an archive: the archive folder plus the file's full path,
    the layout of Spark's ``cleanSource=archive``, so files archived by Spark and by the
    framework's reconciler end up side by side."""
    source = path_part(source_file)
    return archive_dir.rstrip("/") + "/" + source.lstrip("/")


def scheme_of(path: str) -> str:
    """``hdfs`` for ``hdfs://nn/x``, ``file`` for ``file:/x``, ``""`` for a plain path."""
    return urlparse(path).scheme if "://" in path or path.startswith("file:") else ""


def clear_debris(store: Storage, folder: str, is_debris: Callable[[str], bool]) -> list[str] | None:
    """Delete every file under ``folder`` if each is debris a writer killed mid-write leaves
    (``is_debris`` of its path: the hidden temporary file of an atomic write, say), and return
    their paths; None, deleting nothing, when any file is something else. A missing or empty
    folder gives ``[]``."""
    files = [f.path for f in store.list_files(folder)]
    if not all(is_debris(f) for f in files):
        return None
    for f in files:
        store.delete(f)
    return files
