"""A loopback ADLS Gen2 endpoint for tests: the Data Lake (DFS) REST operations the package
uses, and the Blob ones the SDK routes some of them through, held in memory.

Implemented as the REST API reference describes them (path-style URLs,
``http://127.0.0.1:<port>/<account>/<filesystem>/<path>``): file system create and properties
(``restype=container``, ``resource=filesystem``); the Blob service's List Blobs
(``restype=container&comp=list``: ``prefix``, ``startFrom``, ``marker``, an XML page), which
object stores such as ``deltalake``'s list through; path create (``resource=file|directory``),
append and flush, rename (``x-ms-rename-source``), delete, properties (HEAD), read (GET with a
range) and list (``resource=filesystem&recursive=...``, at most ``maxResults`` paths a page,
``x-ms-continuation`` for the next). Errors carry ``x-ms-error-code`` and a JSON body.

Every request must carry an ``Authorization`` header (SharedKey or Bearer). Tests can make the
next requests fail (``fail_next``), refuse paths (``forbid``), and read what was asked
(``requests``).
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

MAX_RESULTS = 5000


@dataclass
class Entry:
    is_dir: bool
    data: bytearray = field(default_factory=bytearray)
    modified: datetime = field(default_factory=lambda: datetime.now(UTC))
    etag: int = 1


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]


class DataLake:
    """The in-memory state of one account, and the faults to inject."""

    def __init__(self, account: str) -> None:
        self.account = account
        self.filesystems: dict[str, dict[str, Entry]] = {}
        self.requests: list[Request] = []
        self.lock = threading.RLock()
        self._failures: list[tuple[int, str | None]] = []  # (status, method or None)
        self._forbidden: list[str] = []

    # ------------------------------------------------------------------ test controls
    def fail_next(self, status: int, times: int = 1, method: str | None = None) -> None:
        with self.lock:
            self._failures += [(status, method)] * times

    def forbid(self, prefix: str) -> None:
        """Refuse (403) every request on a path starting with ``prefix`` (in any file system)."""
        with self.lock:
            self._forbidden.append(prefix.strip("/"))

    def put_file(self, filesystem: str, path: str, data: bytes = b"",
                 modified: datetime | None = None) -> None:
        """Create a file directly (fast setup of many paths), parents included."""
        with self.lock:
            fs = self.filesystems.setdefault(filesystem, {})
            _parents(fs, path)
            fs[path] = Entry(False, bytearray(data), modified or datetime.now(UTC))

    def files(self, filesystem: str) -> dict[str, bytes]:
        with self.lock:
            return {p: bytes(e.data) for p, e in self.filesystems.get(filesystem, {}).items()
                    if not e.is_dir}

    def take_failure(self, method: str) -> int | None:
        with self.lock:
            for i, (status, m) in enumerate(self._failures):
                if m is None or m == method:
                    del self._failures[i]
                    return status
            return None

    def is_forbidden(self, path: str) -> bool:
        with self.lock:
            return any(path.strip("/").startswith(p) for p in self._forbidden)


def _parents(fs: dict[str, Entry], path: str) -> None:
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        fs.setdefault("/".join(parts[:i]), Entry(True))


class _Handler(BaseHTTPRequestHandler):
    lake: DataLake
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # one entry point for every method
    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        parts = unquote(url.path).lstrip("/").split("/", 2)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        lake = self.lake
        lake.requests.append(Request(method, url.path, query, dict(self.headers.items())))
        if not parts or parts[0] != lake.account:
            return self._error(400, "InvalidUri", f"expected account {lake.account}")
        auth = self.headers.get("Authorization", "")
        if not (auth.startswith(f"SharedKey {lake.account}:") or auth.startswith("Bearer ")):
            return self._error(401, "NoAuthenticationInformation", "no credentials")
        status = lake.take_failure(method)
        if status:
            return self._error(status, "ServerBusy" if status == 503 else "InternalError",
                               "injected failure")
        filesystem = parts[1] if len(parts) > 1 else ""
        path = parts[2].strip("/") if len(parts) > 2 else ""
        if filesystem and lake.is_forbidden(path or query.get("directory", "")):
            return self._error(403, "AuthorizationPermissionMismatch",
                               "This request is not authorized to perform this operation "
                               "using this permission.")
        with lake.lock:
            if not path:
                return self._filesystem(method, filesystem, query)
            return self._path(method, filesystem, path, query, body)

    # ------------------------------------------------------------------ file systems
    def _filesystem(self, method: str, name: str, query: dict[str, str]) -> None:
        filesystems = self.lake.filesystems
        if method == "PUT":
            if name in filesystems:
                return self._error(409, "ContainerAlreadyExists", "exists")
            filesystems[name] = {}
            return self._reply(201)
        if name not in filesystems:
            return self._error(404, "ContainerNotFound", "The specified container does not "
                               "exist.")
        if method in ("GET", "HEAD") and query.get("resource") == "filesystem":
            return self._list(name, query)
        if method == "GET" and query.get("comp") == "list":
            return self._list_blobs(name, query)
        if method in ("GET", "HEAD"):
            return self._reply(200, headers={"Last-Modified": _http_date(datetime.now(UTC))})
        if method == "DELETE":
            del filesystems[name]
            return self._reply(202)
        return self._error(400, "UnsupportedHttpVerb", method)

    def _list(self, name: str, query: dict[str, str]) -> None:
        fs = self.lake.filesystems[name]
        directory = query.get("directory", "").strip("/")
        if directory and directory not in fs:
            return self._error(404, "PathNotFound", "The specified path does not exist.")
        recursive = query.get("recursive", "false").lower() == "true"
        prefix = f"{directory}/" if directory else ""
        names = sorted(p for p in fs if p.startswith(prefix)
                       and (recursive or "/" not in p[len(prefix):]))
        start = int(query.get("continuation") or 0)
        size = min(int(query.get("maxResults") or MAX_RESULTS), MAX_RESULTS)
        page = names[start:start + size]
        paths = []
        for p in page:
            e = fs[p]
            item: dict[str, Any] = {"name": p, "lastModified": _http_date(e.modified),
                                    "eTag": f"0x{e.etag:x}", "contentLength": len(e.data)}
            if e.is_dir:
                item["isDirectory"] = "true"
            paths.append(item)
        headers = {}
        if start + size < len(names):
            headers["x-ms-continuation"] = str(start + size)
        self._reply(200, json.dumps({"paths": paths}).encode(), headers,
                    content_type="application/json")

    def _list_blobs(self, name: str, query: dict[str, str]) -> None:
        """List Blobs: the files (not the directories) whose name starts with ``prefix``, from
        ``startFrom`` on (inclusive) and after ``marker``, a page at most, in name order."""
        from xml.sax.saxutils import escape

        fs = self.lake.filesystems[name]
        prefix, start = query.get("prefix", ""), query.get("startFrom", "")
        names = sorted(p for p, e in fs.items()
                       if not e.is_dir and p.startswith(prefix) and p >= start)
        begin = int(query.get("marker") or 0)
        size = min(int(query.get("maxresults") or MAX_RESULTS), MAX_RESULTS)
        page = names[begin:begin + size]
        blobs = "".join(
            f"<Blob><Name>{escape(p)}</Name><Properties>"
            f"<Last-Modified>{_http_date(fs[p].modified)}</Last-Modified>"
            f"<Etag>0x{fs[p].etag:x}</Etag><Content-Length>{len(fs[p].data)}</Content-Length>"
            "<Content-Type>application/octet-stream</Content-Type>"
            "<BlobType>BlockBlob</BlobType><ResourceType>file</ResourceType>"
            "</Properties></Blob>" for p in page)
        after = str(begin + size) if begin + size < len(names) else ""
        body = ('<?xml version="1.0" encoding="utf-8"?><EnumerationResults '
                f'ContainerName="{escape(name)}"><Prefix>{escape(prefix)}</Prefix>'
                f"<MaxResults>{size}</MaxResults><Blobs>{blobs}</Blobs>"
                f"<NextMarker>{after}</NextMarker></EnumerationResults>")
        self._reply(200, body.encode(), content_type="application/xml")

    # ------------------------------------------------------------------ paths
    def _path(self, method: str, name: str, path: str, query: dict[str, str],
              body: bytes) -> None:
        fs = self.lake.filesystems.get(name)
        if fs is None:
            return self._error(404, "FilesystemNotFound", "The specified filesystem does not "
                               "exist.")
        entry = fs.get(path)
        if method == "PUT":
            source = self.headers.get("x-ms-rename-source")
            if source:
                return self._rename(fs, path, source)
            if entry is not None and self.headers.get("If-None-Match") == "*":
                return self._error(409, "PathAlreadyExists", "The specified path already "
                                   "exists.")
            if entry is not None and query.get("resource") == "directory" and entry.is_dir:
                return self._reply(201, headers=_entry_headers(entry))
            _parents(fs, path)
            fs[path] = Entry(query.get("resource") == "directory")
            return self._reply(201, headers=_entry_headers(fs[path]))
        if entry is None:
            return self._error(404, "PathNotFound" if method != "HEAD" else "BlobNotFound",
                               "The specified path does not exist.")
        if method == "PATCH":
            action = query.get("action")
            if action == "append":
                position = int(query.get("position", 0))
                del entry.data[position:]
                entry.data += body
                return self._reply(202)
            if action == "flush":
                del entry.data[int(query.get("position", len(entry.data))):]
                entry.modified = datetime.now(UTC)
                entry.etag += 1
                return self._reply(200, headers=_entry_headers(entry))
            return self._reply(200, headers=_entry_headers(entry))
        if method == "DELETE":
            if entry.is_dir:
                for p in [p for p in fs if p == path or p.startswith(path + "/")]:
                    del fs[p]
            else:
                del fs[path]
            return self._reply(200)
        if method == "HEAD":
            return self._reply(200, headers=_entry_headers(entry), length=len(entry.data))
        return self._read(entry)

    def _rename(self, fs: dict[str, Entry], target: str, source: str) -> None:
        src = unquote(source.split("?")[0]).lstrip("/").split("/", 1)
        src_fs = self.lake.filesystems.get(src[0])
        src_path = src[1].strip("/") if len(src) > 1 else ""
        if src_fs is None or src_path not in src_fs:
            return self._error(404, "SourcePathNotFound", "The source path for a rename "
                               "operation does not exist.")
        if target in fs and self.headers.get("If-None-Match") == "*":
            return self._error(409, "PathAlreadyExists", "The specified path already exists.")
        moved = {p: e for p, e in src_fs.items()
                 if p == src_path or p.startswith(src_path + "/")}
        for p in moved:
            del src_fs[p]
        _parents(fs, target)
        for p, e in moved.items():
            fs[target + p[len(src_path):]] = e
        return self._reply(201)

    def _read(self, entry: Entry) -> None:
        data = bytes(entry.data)
        wanted = self.headers.get("x-ms-range") or self.headers.get("Range")
        headers = _entry_headers(entry)
        if not wanted:
            return self._reply(200, data, headers)
        first, _, last = wanted.removeprefix("bytes=").partition("-")
        start = int(first)
        if start >= len(data):
            return self._error(416, "InvalidRange", "The range specified is invalid for the "
                               "current size of the resource.")
        end = min(int(last) if last else len(data) - 1, len(data) - 1)
        headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        return self._reply(206, data[start:end + 1], headers)

    # ------------------------------------------------------------------ replies
    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
               content_type: str = "application/octet-stream", length: int | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("x-ms-request-id", "00000000-0000-0000-0000-000000000000")
        self.send_header("x-ms-version", "2025-01-05")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str, message: str) -> None:
        body = b"" if self.command == "HEAD" else json.dumps(
            {"error": {"code": code, "message": message}}).encode()
        self._reply(status, body, {"x-ms-error-code": code}, content_type="application/json")


def _http_date(at: datetime) -> str:
    return format_datetime(at.astimezone(UTC), usegmt=True)


def _entry_headers(e: Entry) -> dict[str, str]:
    headers = {"Last-Modified": _http_date(e.modified), "ETag": f'"0x{e.etag:x}"',
               "x-ms-resource-type": "directory" if e.is_dir else "file",
               "x-ms-blob-type": "BlockBlob", "x-ms-creation-time": _http_date(e.modified)}
    if e.is_dir:
        headers["x-ms-meta-hdi_isfolder"] = "true"
    return headers


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client closing a pooled connection is not an error of the endpoint."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextmanager
def serve(account: str) -> Iterator[tuple[DataLake, str]]:
    """Start the endpoint on a free loopback port; yields the lake and its account URL."""
    lake = DataLake(account)
    handler = type("Handler", (_Handler,), {"lake": lake})
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield lake, f"http://127.0.0.1:{server.server_address[1]}/{account}"
    finally:
        server.shutdown()
        server.server_close()
