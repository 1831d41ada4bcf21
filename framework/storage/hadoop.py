"""Any file system Spark can read, through the session's Hadoop ``FileSystem`` (``file``,
``hdfs``, ``abfss``, ``s3a``, ``dbfs``...): the store of a job's own file operations (bronze's
stat, archive, quarantine; a checkpoint's logs), with the credentials Spark already holds.

Calls go through Py4J (:mod:`framework.jvm`; classic sessions only) to
``org.apache.hadoop.fs.FileSystem``; each path's file system is the one Hadoop resolves for its
scheme and authority (cached by Hadoop). A rename is atomic where
the store's is (local disks, HDFS, ADLS with a hierarchical namespace); on S3 it is a copy and
a delete.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Iterator
from typing import IO, Any, TypeVar
from urllib.parse import urlparse

from framework.errors import StorageError
from framework.storage.base import FileInfo, scheme_of, uploading_name

T = TypeVar("T")

# Stores whose modification times are HTTP dates (whole seconds).
_SECOND_RESOLUTION = ("abfs", "abfss", "wasb", "wasbs", "s3", "s3a", "gs")


class HadoopStorage:
    """The lake's file operations through the Hadoop ``FileSystem`` of a Spark session."""

    def __init__(self, spark: Any) -> None:
        from framework.jvm import gateway, hadoop_configuration, require_classic

        require_classic(spark, f"a store of {type(self).__name__}")
        self._java = gateway(spark)
        self._conf = hadoop_configuration(spark)
        self._checksummed = self._java.java.lang.Class.forName(
            "org.apache.hadoop.fs.ChecksumFileSystem")
        self._file_systems: dict[tuple[str, str], Any] = {}
        self._made: set[str] = set()  # folders this store created (or found)

    def __repr__(self) -> str:
        return "HadoopStorage()"

    def resolution_ms(self, path: str) -> int:
        return 1000 if scheme_of(path) in _SECOND_RESOLUTION else 1

    # ------------------------------------------------------------------ operations
    def exists(self, path: str) -> bool:
        fs, p = self._fs(path)
        return bool(self._call("check", path, lambda: fs.exists(p)))

    def stat(self, path: str) -> FileInfo:
        fs, p = self._fs(path)
        status = self._call("stat", path, lambda: fs.getFileStatus(p))
        return FileInfo(path, int(status.getLen()), int(status.getModificationTime()))

    def open(self, path: str) -> IO[bytes]:
        fs, p = self._fs(path)

        def read() -> bytes:
            stream = fs.open(p)
            try:
                return bytes(self._java.org.apache.commons.io.IOUtils.toByteArray(stream))
            finally:
                stream.close()

        return io.BytesIO(self._call("read", path, read))

    def head(self, path: str, size: int) -> bytes:
        fs, p = self._fs(path)

        def read() -> bytes:
            stream = fs.open(p)
            try:
                return bytes(stream.readNBytes(size))
            finally:
                stream.close()

        return self._call("read", path, read)

    def move(self, src: str, dst: str) -> None:
        fs, s = self._fs(src)
        _, d = self._fs(dst)
        if self.exists(dst):
            raise StorageError(f"expected no file at move target {dst}, found one (source {src})")
        self._make_parent(fs, d, dst)
        if not self._call("move", src, lambda: fs.rename(s, d)):
            raise StorageError(f"cannot move {src} to {dst}: the file system refused the "
                               f"rename (is {src} there?)")

    def try_move(self, src: str, dst: str) -> bool:
        fs, s = self._fs(src)
        _, d = self._fs(dst)
        if self._call("check", dst, lambda: fs.exists(d)):
            return False
        self._make_parent(fs, d, dst)
        # False for a source that is not there (some stores raise FileNotFoundException)
        try:
            return bool(self._call("move", src, lambda: fs.rename(s, d)))
        except StorageError:
            if self.exists(src):
                raise
            return False

    def delete(self, path: str) -> None:
        fs, p = self._fs(path)
        self._call("delete", path, lambda: fs.delete(p, False))

    def move_folder(self, src: str, dst: str) -> None:
        fs, s = self._fs(src)
        if not self._call("check", src, lambda: fs.exists(s) and fs.getFileStatus(s).isDirectory()):
            raise StorageError(f"expected a folder to move at {src}, found none (target {dst})")
        self.move(src, dst)

    def delete_folder(self, path: str) -> None:
        fs, p = self._fs(path)
        self._call("delete", path, lambda: fs.delete(p, True))

    def list_files(self, path: str) -> Iterator[FileInfo]:
        fs, p = self._fs(path)
        if not self.exists(path):
            return
        found = self._call("list", path, lambda: fs.listFiles(p, True))
        base = path.rstrip("/")
        root = str(fs.makeQualified(p).toString()).rstrip("/")
        while self._call("list", path, found.hasNext):
            status = found.next()
            full = str(status.getPath().toString())
            # the path as the caller spells it: its folder plus the part below it
            shown = base + full[len(root):] if full.startswith(root) else full
            yield FileInfo(shown, int(status.getLen()), int(status.getModificationTime()))

    def makedirs(self, path: str) -> None:
        fs, p = self._fs(path)
        self._call("create directory", path, lambda: fs.mkdirs(p))

    def upload(self, local_file: str, path: str, modified_ms: int | None = None) -> None:
        fs, d = self._fs(path)
        if self.exists(path):
            raise StorageError(f"expected no file at {path}, found one (uploading {local_file})")
        staging = self._java.org.apache.hadoop.fs.Path(uploading_name(path))
        # through java.io.File: an absolute file: URI, whatever the name holds
        local = self._java.org.apache.hadoop.fs.Path(
            self._java.java.io.File(os.path.abspath(local_file)).toURI())
        self._call("upload", path, lambda: fs.copyFromLocalFile(False, True, local, staging))
        if modified_ms is not None:
            self._call("set the time of", path, lambda: fs.setTimes(staging, modified_ms, -1))
        if not self._call("upload", path, lambda: fs.rename(staging, d)):
            raise StorageError(f"cannot move the upload of {local_file} into place at {path}")

    def write_bytes(self, path: str, data: bytes) -> None:
        fs, d = self._fs(path)
        staging = self._java.org.apache.hadoop.fs.Path(uploading_name(path))

        def write() -> None:
            out = fs.create(staging, True)
            try:
                out.write(bytearray(data))
            finally:
                out.close()
            fs.delete(d, False)
            if not fs.rename(staging, d):
                raise StorageError(f"cannot move {path} into place")

        self._call("write", path, write)

    def create(self, path: str, data: bytes) -> bool:
        fs, d = self._fs(path)

        def write() -> bool:
            try:  # HDFS's create without overwrite is atomic on the name node
                out = fs.create(d, False)
            except Exception as exc:
                if "FileAlreadyExists" in str(exc) or self.exists(path):
                    return False
                raise
            try:
                out.write(bytearray(data))
            finally:
                out.close()
            return True

        return bool(self._call("create", path, write))

    def touch(self, path: str) -> None:
        fs, p = self._fs(path)
        now = int(time.time() * 1000)
        self._call("set the time of", path, lambda: fs.setTimes(p, now, -1))

    # ------------------------------------------------------------------ helpers
    def _fs(self, path: str) -> tuple[Any, Any]:
        """The file system of ``path`` and the path; a local one without its checksum layer
        (it would add a ``.crc`` file beside each file the framework writes). File systems are
        kept per scheme and authority: each call through Py4J costs about a millisecond."""
        p = self._java.org.apache.hadoop.fs.Path(path)
        key = (scheme_of(path), urlparse(path).netloc)
        fs = self._file_systems.get(key)
        if fs is None:
            fs = self._call("resolve", path, lambda: p.getFileSystem(self._conf))
            if self._checksummed.isInstance(fs):
                fs = fs.getRawFileSystem()
            self._file_systems[key] = fs
        return fs, p

    def _make_parent(self, fs: Any, p: Any, path: str) -> None:
        """Create the folder ``p`` goes in, once per folder for this store."""
        parent = path.rstrip("/").rpartition("/")[0]
        if parent and parent not in self._made:
            folder = p.getParent()
            if folder is not None:
                self._call("create directory", path, lambda: fs.mkdirs(folder))
            self._made.add(parent)

    def _call(self, what: str, path: str, fn: Callable[[], T]) -> T:
        """Run a Hadoop call; its errors become storage errors naming the path (the JVM's
        message's first line, never its stack)."""
        from framework.jvm import java_error

        try:
            return fn()
        except Exception as exc:
            found = java_error(exc)
            if found is None:
                raise
            raise StorageError(f"cannot {what} {path}: {found}"[:500]) from None
