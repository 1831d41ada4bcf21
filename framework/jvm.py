"""The one place the framework reaches into Spark's JVM (Py4J), and how each use is done on a
Spark Connect session, where there is no JVM on the client side.

A classic session (``local``, ``submit``, a Databricks cluster in dedicated access mode) runs
the driver's JVM in this process's reach; a Spark Connect session (``runtime: connect``,
Databricks serverless and standard access mode) talks to a server over gRPC, and
``sparkContext``, ``_jvm``, ``_jsc``, ``_jdf`` and ``_jsparkSession`` fail there
(``JVM_ATTRIBUTE_NOT_SUPPORTED``). Every such attribute is read in this module only, and every
Java method is called here: what this module gives out is Python values (strings, numbers,
dataclasses, bytes), never a Py4J object another module could call Java on
(``tests/test_architecture.py`` checks both). Each use, with its alternative on Connect:

============================  =====================================  =========================
what                           classic session                        Spark Connect
============================  =====================================  =========================
file operations                Hadoop ``FileSystem`` (any scheme:     the local disk or the
                               :class:`HadoopFileSystem`)             ADLS SDK; other schemes
                                                                      refused by ``validate``
Spark's log level              ``SparkContext.setLogLevel``           the server's setting
the driver JVM's stderr        :func:`launch_driver` filters it       the server's log file
a class on the classpath       ``Class.forName``                      the server's concern
the listener's session         the JVM session                        the session id
pruning evidence               the executed plan's scan nodes         ``DataFrame.executionInfo``
                               (:func:`executed_scans`)
the optimizer's size estimate  the optimized plan's statistics        ``EXPLAIN COST``
a failed read's file           the JVM's chain of causes              the error's own causes
                               (:func:`error_chain`)
``medallion serve``            Spark's Thrift server in the driver    refused (exit 2)
progress reports               read from their JSON                   the client's listener
                               (:class:`JsonProgressListener`)        bus, from the same JSON
============================  =====================================  =========================
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, TypeVar
from urllib.parse import urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import JStreamingQueryListener, QueryProgressEvent

from framework.errors import SessionError, StorageError, UsageError, first_line
from framework.storage.base import FileInfo, scheme_of

T = TypeVar("T")


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` (a session or a DataFrame) is Spark Connect's."""
    module = type(spark).__module__
    return module.startswith("pyspark.sql.connect")


def require_classic(spark: SparkSession, what: str) -> None:
    """Refuse ``what`` on a Spark Connect session, with the reason (exit 2)."""
    if is_connect(spark):
        raise UsageError(f"expected a classic Spark session for {what}, found a Spark Connect "
                         "session: it has no driver JVM in this process (run it with runtime "
                         "local or submit, or on a cluster in dedicated access mode)")


class _ProgressFromJson(JStreamingQueryListener):
    """pyspark's bridge from a classic driver's listener bus, each progress report read from its
    JSON in one call into the JVM, where pyspark's reads it field by field, tens of calls, and walks
    each map and list to a Java exception at the end, converted through tens of failed class
    lookups in the JVM. The report is the same but for its rates, to one decimal place as the
    events give them (Spark Connect's clients read the same JSON)."""

    def onQueryProgress(self, jevent: Any) -> None:
        self.pylistener.onQueryProgress(QueryProgressEvent.fromJson(json.loads(jevent.json())))


class JsonProgressListener(StreamingQueryListener):
    """A streaming query listener whose JVM side in a classic driver is pyspark's wrapper
    around :class:`_ProgressFromJson` (a Connect client's listener bus reads the JSON too)."""

    @property
    def _jlistener(self) -> Any:
        # pyspark's StreamingQueryManager reads it to add and remove the listener, nobody else
        if not hasattr(self, "_jlistenerobj"):
            from pyspark import SparkContext

            jvm: Any = SparkContext._jvm
            self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(_ProgressFromJson(self))
        return self._jlistenerobj


def session_key(spark: SparkSession) -> str:
    """A key of the session on the server or in the JVM: one listener per session."""
    if is_connect(spark):
        return f"connect:{spark.session_id}"  # type: ignore[attr-defined]
    return f"classic:{id(spark._jsparkSession)}"


def set_log_level(spark: SparkSession, level: str) -> None:
    """Spark's log level in a classic driver; a Connect server keeps its own."""
    if not is_connect(spark):
        spark.sparkContext.setLogLevel(level)


# What the driver JVM prints on stderr outside Spark's log, for no fault of the command:
# * Spark's launcher always adds --add-modules=jdk.incubator.vector to the java command
#   (org.apache.spark.launcher.JavaModuleOptions), and the JVM announces every incubator
#   module on stderr; no option of java 17 or 21 silences it, and log4j never sees it;
# * Spark takes pyspark's driver for a shell and says, in two lines, which level a shell's
#   log gets (WARN) when the root logger's differs (off: framework.session.QUIET_LOG4J2).
JVM_NOTICES = ("WARNING: Using incubator modules: ", "Setting default log level to ",
               "To adjust logging level use sc.setLogLevel(")


# Ivy's report as spark-submit resolves spark.jars.packages (a first session before the jars
# are cached): the settings, the modules found and downloaded, the resolution and retrieval
# tables. Not its failures ("::  UNRESOLVED DEPENDENCIES ::", ":: io.delta#...: not found",
# and the launcher's exception), which say why the driver did not start.
RESOLVER_REPORT = re.compile(
    r":: (?:loading settings|resolving dependencies|resolution report|retrieving) ::"
    r"|Ivy Default Cache set to|The jars for the packages stored in"
    r"|\S+#\S+ added as a dependency|downloading https?://"
    r"|\t(?:confs: |found |\[SUCCESSFUL \]|:: (?:modules in use|evicted modules):"
    r"|\S+#\S+;\S+ (?:from|by) |-{20,}|\||\d+ artifacts copied)")


def launch_driver(settings: Mapping[str, str], *, notices: bool = False,
                  resolver: bool = False) -> None:
    """Start this process's classic driver JVM, as ``SparkSession.builder.getOrCreate`` would
    with ``settings`` (spark-submit's ``--conf``), its stderr passed on line by line but for
    the JVM's own notices (:data:`JVM_NOTICES`; all of them with ``notices``) and Ivy's report
    of the packages it resolved (:data:`RESOLVER_REPORT`; with ``notices`` or ``resolver``
    too). Nothing if the
    process has a driver JVM already (a session was made before, or spark-submit started it). A
    JVM that cannot start (no java, a bad option) says why on stderr, then :class:`SessionError`."""
    from pyspark import SparkConf, SparkContext
    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    read_end, write_end = os.pipe()
    passing = threading.Thread(target=_pass_on,
                               args=(os.fdopen(read_end, "rb"), notices, notices or resolver),
                               name="driver-jvm-stderr", daemon=True)
    passing.start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write_end})
    except PySparkRuntimeError as exc:
        passing.join(timeout=5)  # what the JVM said before it ended comes first
        raise SessionError(f"expected Spark's driver JVM to start, found it ended at once "
                           f"(its reason is above; {first_line(exc)})") from None
    finally:
        os.close(write_end)  # the JVM holds its own copy: the pipe ends when the JVM does
    SparkContext._ensure_initialized(gateway=gateway)


def _pass_on(stream: IO[bytes], notices: bool, resolver: bool) -> None:
    with stream:
        for line in stream:
            text = line.decode(errors="replace")
            if (notices or not text.startswith(JVM_NOTICES)) \
                    and (resolver or not RESOLVER_REPORT.match(text)):
                _write_stderr(line)


def _write_stderr(data: bytes) -> None:
    # The file descriptor, as the JVM wrote before: one write per line, whatever Python's
    # sys.stderr is (a command's redacting writer, a test's capture).
    try:
        while data:
            data = data[os.write(2, data):]
    except OSError:  # stderr closed: the JVM's line has nowhere to go, as before
        pass


def configured_jars(spark: SparkSession) -> str:
    """``spark.jars`` as the classic driver resolved it (Ivy's paths)."""
    return spark.sparkContext.getConf().get("spark.jars", "") or ""


def resolve_alone(spark: SparkSession, coordinate: str) -> str:
    """The local path of the Maven artifact ``coordinate`` (``group:artifact:version``),
    resolved by Spark's own Ivy without its dependencies, as ``ADD JAR
    ivy://...?transitive=false`` does; a :class:`SessionError` when it cannot be."""
    from py4j.protocol import Py4JError

    require_classic(spark, f"resolving {coordinate}")
    jvm: Any = spark._jvm
    try:
        uri = jvm.java.net.URI.create(f"ivy://{coordinate}?transitive=false")
        return str(jvm.org.apache.spark.util.DependencyUtils.resolveMavenDependencies(uri)
                   .mkString(","))
    except Py4JError as exc:
        raise SessionError(f"expected {coordinate} resolved by Spark's Ivy, found an error: "
                           f"{first_line(exc)[:300]}") from exc


def has_class(spark: SparkSession, name: str) -> bool:
    """Whether the classic driver's classpath holds ``name``; a Connect server's classpath is
    the server's own concern (a missing class fails the statement that needs it)."""
    if is_connect(spark):
        return True
    jvm: Any = spark._jvm
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(name, False, loader)
    except Exception:
        return False
    return True


def hadoop_version(spark: SparkSession) -> str:
    """The version of the classic driver's Hadoop client."""
    jvm: Any = spark._jvm
    return str(jvm.org.apache.hadoop.util.VersionInfo.getVersion())


def size_estimate(spark: SparkSession, table: str) -> int:
    """The size in bytes the optimizer estimates for ``table`` (what it compares with the
    broadcast threshold)."""
    if is_connect(spark):
        # EXPLAIN COST prints the optimized plan with its statistics: the root's is the table's.
        from framework.identifiers import quote_name

        text = spark.sql(f"EXPLAIN COST SELECT * FROM {quote_name(table)}").collect()[0][0]
        found = re.search(r"Statistics\(sizeInBytes=([0-9.]+)\s*([KMGTPE]?i?B)", text)
        if found is None:
            raise SessionError(f"expected the optimizer's size of {table} in EXPLAIN COST, "
                               f"found none in {text[:200]!r}")
        return _bytes(float(found.group(1)), found.group(2))
    plan = spark.table(table)._jdf.queryExecution().optimizedPlan()
    return int(str(plan.stats().sizeInBytes()))


_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "PiB": 1 << 50, "EiB": 1 << 60}


def _bytes(value: float, unit: str) -> int:
    return int(value * _UNITS.get(unit, 1))


@dataclass(frozen=True)
class FileScan:
    """A file scan of an executed plan: its table (its root path when read by path), its
    partition filters, the partitions and files it read (its SQL metrics ``numPartitions``
    and ``numFiles``: None when it reports none) and its table's partitions (None: not
    partitioned) and files, listed without filters."""

    table: str
    partition_filters: str
    partitions_read: int | None
    partitions_total: int | None
    files_read: int | None
    files_total: int


_STAGES = ("ShuffleQueryStageExec", "BroadcastQueryStageExec", "TableCacheQueryStageExec",
           "ResultQueryStageExec")


def executed_scans(df: DataFrame, run: bool) -> tuple[str, list[FileScan]]:
    """A classic DataFrame's executed physical plan, one line per operator (through adaptive
    stages and reused exchanges), and its file scans; ``run`` runs the plan first (its rows
    stay on the executors), else its scans' metrics are those of the last action on it."""
    execution = df._jdf.queryExecution()
    if run:
        execution.executedPlan().execute().count()
    nodes = list(_nodes(execution.executedPlan()))
    scans = [_file_scan(df.sparkSession, node) for node in nodes
             if node.getClass().getSimpleName() == "FileSourceScanExec"]
    return "\n".join(str(node.simpleString(1000)) for node in nodes), scans


def _nodes(plan: Any) -> Iterator[Any]:
    """Every physical operator of ``plan``, through adaptive stages and reused exchanges."""
    kind = plan.getClass().getSimpleName()
    if kind == "AdaptiveSparkPlanExec":
        yield from _nodes(plan.executedPlan())
        return
    if kind in _STAGES:
        yield from _nodes(plan.plan())
        return
    if kind == "ReusedExchangeExec":
        yield from _nodes(plan.child())
        return
    yield plan
    children = plan.children()
    for i in range(children.size()):
        yield from _nodes(children.apply(i))


def _file_scan(spark: SparkSession, scan: Any) -> FileScan:
    relation = scan.relation()
    ident = scan.tableIdentifier()
    table = str(ident.get().unquotedString()) if ident.isDefined() else \
        str(relation.location().rootPaths().apply(0).toString())
    partitioned = relation.partitionSchema().size() > 0
    jvm: Any = spark._jvm
    empty = jvm.org.apache.spark.api.python.PythonUtils.toSeq(jvm.java.util.ArrayList())
    directories = relation.location().listFiles(empty, empty)
    filters = scan.partitionFilters()

    def metric(name: str) -> int | None:
        found = scan.metrics().get(name)
        return int(found.get().value()) if found.isDefined() else None

    return FileScan(
        table=table,
        partition_filters="\n".join(str(filters.apply(i).toString())
                                     for i in range(filters.size())),
        partitions_read=metric("numPartitions") if partitioned else None,
        partitions_total=directories.size() if partitioned else None,
        files_read=metric("numFiles"),
        files_total=sum(directories.apply(i).files().size() for i in range(directories.size())),
    )


@contextlib.contextmanager
def thrift_server(spark: SparkSession) -> Iterator[None]:
    """Spark's Thrift JDBC/ODBC server in the classic driver, on the session's catalog."""
    require_classic(spark, "medallion serve")
    jvm: Any = spark._jvm
    server = jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2.startWithContext(
        spark._jsparkSession.sqlContext())
    try:
        yield
    finally:
        server.stop()


@dataclass(frozen=True)
class Cause:
    """One error of a chain of causes: its error condition (``FAILED_READ_FILE.NO_HINT``; ""
    for one that is not Spark's), the condition's parameters, and ``Kind: first line of the
    message``."""

    condition: str
    parameters: dict[str, str]
    summary: str


def error_chain(error: BaseException) -> list[Cause]:
    """The JVM throwables of a classic Spark error, outermost first; none for another."""
    from py4j.protocol import Py4JError

    throwable = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    chain: list[Cause] = []
    while throwable is not None and len(chain) < 20:
        try:
            condition = str(throwable.getCondition() or "")
        except Py4JError:  # not a SparkThrowable
            condition = ""
        parameters = throwable.getMessageParameters() if condition else {}
        chain.append(Cause(condition, {str(k): str(v) for k, v in parameters.items()},
                           _summary(throwable)))
        throwable = throwable.getCause()
    return chain


def _summary(throwable: Any) -> str:
    """``Kind: first line of the message`` of a JVM throwable."""
    kind = str(throwable.getClass().getName()).rsplit(".", 1)[-1]
    message = str(throwable.getMessage() or "").strip().splitlines()
    return f"{kind}: {message[0]}" if message else kind


class HadoopFileSystem:
    """A classic session's Hadoop ``FileSystem`` operations for any path, with Python values for
    results. Each path's file system is the one Hadoop resolves for its scheme and authority, a
    local one without its checksum layer (it would add a ``.crc`` beside each file written); a
    Java error is a :class:`StorageError` naming the operation and the path (the first line of the
    JVM's message, never its stack)."""

    def __init__(self, spark: SparkSession) -> None:
        require_classic(spark, "the session's Hadoop file systems")
        jvm: Any = spark._jvm
        self._java, self._conf = jvm, spark._jsc.hadoopConfiguration()
        self._checksummed = jvm.java.lang.Class.forName("org.apache.hadoop.fs.ChecksumFileSystem")
        self._file_systems: dict[tuple[str, str], Any] = {}

    def exists(self, path: str) -> bool:
        fs, p = self._resolve(path)
        return bool(self._call("check", path, lambda: fs.exists(p)))

    def is_folder(self, path: str) -> bool:
        fs, p = self._resolve(path)
        return bool(self._call("check", path,
                               lambda: fs.exists(p) and fs.getFileStatus(p).isDirectory()))

    def stat(self, path: str) -> FileInfo:
        fs, p = self._resolve(path)
        status = self._call("stat", path, lambda: fs.getFileStatus(p))
        return FileInfo(path, int(status.getLen()), int(status.getModificationTime()))

    def list_files(self, path: str) -> Iterator[FileInfo]:
        """Every file under the folder ``path``, recursively, named as the caller spells
        ``path`` plus the part below it."""
        fs, p = self._resolve(path)
        found = self._call("list", path, lambda: fs.listFiles(p, True))
        base = path.rstrip("/")
        root = str(fs.makeQualified(p).toString()).rstrip("/")
        while self._call("list", path, found.hasNext):
            status = found.next()
            full = str(status.getPath().toString())
            shown = base + full[len(root):] if full.startswith(root) else full
            yield FileInfo(shown, int(status.getLen()), int(status.getModificationTime()))

    def read(self, path: str, size: int | None = None) -> bytes:
        """The file's bytes; its first ``size`` bytes at most, when given."""
        fs, p = self._resolve(path)

        def read() -> bytes:
            stream = fs.open(p)
            try:
                return bytes(stream.readAllBytes() if size is None else stream.readNBytes(size))
            finally:
                stream.close()

        return self._call("read", path, read)

    def write(self, path: str, data: bytes, *, overwrite: bool) -> bool:
        """Write the file at ``path``; without ``overwrite`` only if there is none, in one step
        (atomic on HDFS's name node): whether it was written."""
        fs, p = self._resolve(path)

        def write() -> bool:
            try:
                out = fs.create(p, overwrite)
            except Exception as exc:
                if not overwrite and ("FileAlreadyExists" in str(exc) or fs.exists(p)):
                    return False
                raise
            try:
                out.write(bytearray(data))
            finally:
                out.close()
            return True

        return bool(self._call("write", path, write))

    def copy_from_local(self, local_file: str, path: str) -> None:
        fs, p = self._resolve(path)
        # through java.io.File: an absolute file: URI, whatever the name holds
        local = self._java.org.apache.hadoop.fs.Path(
            self._java.java.io.File(os.path.abspath(local_file)).toURI())
        self._call("upload", path, lambda: fs.copyFromLocalFile(False, True, local, p))

    def rename(self, src: str, dst: str) -> bool:
        """Rename ``src`` to ``dst``: whether the file system did."""
        fs, s = self._resolve(src)
        _, d = self._resolve(dst)
        return bool(self._call("move", src, lambda: fs.rename(s, d)))

    def delete(self, path: str, recursive: bool = False) -> None:
        fs, p = self._resolve(path)
        self._call("delete", path, lambda: fs.delete(p, recursive))

    def mkdirs(self, path: str) -> None:
        fs, p = self._resolve(path)
        self._call("create directory", path, lambda: fs.mkdirs(p))

    def set_time(self, path: str, modified_ms: int) -> None:
        fs, p = self._resolve(path)
        self._call("set the time of", path, lambda: fs.setTimes(p, modified_ms, -1))

    def _resolve(self, path: str) -> tuple[Any, Any]:
        """The file system of ``path`` and its Hadoop path. File systems are kept per scheme
        and authority: each call through Py4J costs about a millisecond."""
        p = self._java.org.apache.hadoop.fs.Path(path)
        key = (scheme_of(path), urlparse(path).netloc)
        fs = self._file_systems.get(key)
        if fs is None:
            fs = self._call("resolve", path, lambda: p.getFileSystem(self._conf))
            if self._checksummed.isInstance(fs):
                fs = fs.getRawFileSystem()
            self._file_systems[key] = fs
        return fs, p

    @staticmethod
    def _call(what: str, path: str, fn: Callable[[], T]) -> T:
        from py4j.protocol import Py4JJavaError

        try:
            return fn()
        except Py4JJavaError as exc:
            raise StorageError(f"cannot {what} {path}: {_summary(exc.java_exception)}"[:500]) \
                from None
