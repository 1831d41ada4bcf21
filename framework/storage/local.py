"""A local (or mounted) file system, through Python's ``os``: the store of the commands that
run without Spark on a local lake (``init``, ``land``, ``purge-archive``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from typing import IO

from framework.errors import StorageError
from framework.storage.base import FileInfo, local_path, uploading_name


class LocalStorage:
    """A local (or mounted) file system."""

    def resolution_ms(self, path: str) -> int:
        return 1  # what Hadoop's local file system (and so Spark) reports

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

    def head(self, path: str, size: int) -> bytes:
        with self.open(path) as fh:
            return fh.read(size)

    def move(self, src: str, dst: str) -> None:
        s, d = local_path(src), local_path(dst)
        if os.path.exists(d):
            raise StorageError(f"expected no file at move target {d}, found one (source {s})")
        try:
            os.makedirs(os.path.dirname(d), exist_ok=True)
            os.replace(s, d) if _same_device(s, d) else shutil.move(s, d)
        except OSError as exc:
            raise StorageError(f"cannot move {s} to {d}: {exc}") from exc

    def try_move(self, src: str, dst: str) -> bool:
        if os.path.exists(local_path(dst)) or not os.path.exists(local_path(src)):
            return False
        self.move(src, dst)
        return True

    def delete(self, path: str) -> None:
        p = local_path(path)
        # an empty folder, as Hadoop's delete takes
        _deleting(p, lambda: os.rmdir(p) if os.path.isdir(p) else os.remove(p))

    def move_folder(self, src: str, dst: str) -> None:
        s = local_path(src)
        if not os.path.isdir(s):
            raise StorageError(f"expected a folder to move at {s}, found none (target {dst})")
        self.move(src, dst)

    def delete_folder(self, path: str) -> None:
        p = local_path(path)
        _deleting(p, lambda: shutil.rmtree(p))

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

    def write_bytes(self, path: str, data: bytes) -> None:
        p = local_path(path)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        staging = uploading_name(p)
        with open(staging, "wb") as fh:
            fh.write(data)
        os.replace(staging, p)

    def create(self, path: str, data: bytes) -> bool:
        p = local_path(path)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        staging = f"{uploading_name(p)}.{os.getpid()}"
        with open(staging, "wb") as fh:
            fh.write(data)
        try:
            os.link(staging, p)  # fails if the name exists: the file appears whole, once
        except FileExistsError:
            return False
        finally:
            os.remove(staging)
        return True

    def touch(self, path: str) -> None:
        os.utime(local_path(path))


def _same_device(src: str, dst: str) -> bool:
    try:
        return os.stat(src).st_dev == os.stat(os.path.dirname(dst)).st_dev
    except OSError:
        return False


def _deleting(path: str, delete: Callable[[], None]) -> None:
    """``delete()``, the deletion of ``path``: one already gone is no error, another failure
    a :class:`StorageError`."""
    try:
        delete()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"cannot delete {path}: {exc}") from exc
