"""Any file system Spark can read, through the session's Hadoop ``FileSystem`` (``file``,
``hdfs``, ``abfss``, ``s3a``, ``dbfs``...): the store of a job's own file operations (bronze's
stat, archive, quarantine; a checkpoint's logs), with the credentials Spark already holds.

The calls into Hadoop are :class:`framework.jvm.HadoopFileSystem`'s (classic sessions only); this
store adds the contract's steps around them: files written under a hidden name and renamed into
place, a target's folder made first, an existing target refused. A rename is atomic where the
store's is (local disks, HDFS, ADLS with a hierarchical namespace); on S3 it is a copy and a delete.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from typing import IO, Any

from framework.errors import StorageError
from framework.jvm import HadoopFileSystem
from framework.storage.base import FileInfo, scheme_of, uploading_name

# Stores whose modification times are HTTP dates (whole seconds).
_SECOND_RESOLUTION = ("abfs", "abfss", "wasb", "wasbs", "s3", "s3a", "gs")


class HadoopStorage:
    """The lake's file operations through the Hadoop ``FileSystem`` of a Spark session."""

    def __init__(self, spark: Any) -> None:
        self._fs = HadoopFileSystem(spark)
        self._made: set[str] = set()  # folders this store created (or found)

    def __repr__(self) -> str:
        return "HadoopStorage()"

    def resolution_ms(self, path: str) -> int:
        return 1000 if scheme_of(path) in _SECOND_RESOLUTION else 1

    def exists(self, path: str) -> bool:
        return self._fs.exists(path)

    def stat(self, path: str) -> FileInfo:
        return self._fs.stat(path)

    def open(self, path: str) -> IO[bytes]:
        return io.BytesIO(self._fs.read(path))

    def head(self, path: str, size: int) -> bytes:
        return self._fs.read(path, size)

    def move(self, src: str, dst: str) -> None:
        if self.exists(dst):
            raise StorageError(f"expected no file at move target {dst}, found one (source {src})")
        self._make_parent(dst)
        if not self._fs.rename(src, dst):
            raise StorageError(f"cannot move {src} to {dst}: the file system refused the "
                               f"rename (is {src} there?)")

    def try_move(self, src: str, dst: str) -> bool:
        if self.exists(dst):
            return False
        self._make_parent(dst)
        # False for a source that is not there (some stores raise FileNotFoundException)
        try:
            return self._fs.rename(src, dst)
        except StorageError:
            if self.exists(src):
                raise
            return False

    def delete(self, path: str) -> None:
        self._fs.delete(path)

    def move_folder(self, src: str, dst: str) -> None:
        if not self._fs.is_folder(src):
            raise StorageError(f"expected a folder to move at {src}, found none (target {dst})")
        self.move(src, dst)

    def delete_folder(self, path: str) -> None:
        self._fs.delete(path, recursive=True)

    def list_files(self, path: str) -> Iterator[FileInfo]:
        if self.exists(path):
            yield from self._fs.list_files(path)

    def makedirs(self, path: str) -> None:
        self._fs.mkdirs(path)

    def upload(self, local_file: str, path: str, modified_ms: int | None = None) -> None:
        if self.exists(path):
            raise StorageError(f"expected no file at {path}, found one (uploading {local_file})")
        staging = uploading_name(path)
        self._fs.copy_from_local(local_file, staging)
        if modified_ms is not None:
            self._fs.set_time(staging, modified_ms)
        if not self._fs.rename(staging, path):
            raise StorageError(f"cannot move the upload of {local_file} into place at {path}")

    def write_bytes(self, path: str, data: bytes) -> None:
        staging = uploading_name(path)
        self._fs.write(staging, data, overwrite=True)
        self._fs.delete(path)
        if not self._fs.rename(staging, path):
            raise StorageError(f"cannot move {path} into place")

    def create(self, path: str, data: bytes) -> bool:
        return self._fs.write(path, data, overwrite=False)

    def touch(self, path: str) -> None:
        self._fs.set_time(path, int(time.time() * 1000))

    def _make_parent(self, path: str) -> None:
        """Create the folder ``path`` goes in, once per folder for this store (named with its
        slash: a file system's root is ``hdfs://nn/``, not ``hdfs://nn``)."""
        parent = path.rstrip("/").rpartition("/")[0] + "/"
        if parent not in self._made:
            self._fs.mkdirs(parent)
            self._made.add(parent)
