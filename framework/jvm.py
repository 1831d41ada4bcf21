"""The one place the framework reaches into Spark's JVM (Py4J), and how each use is done on a
Spark Connect session, where there is no JVM on the client side.

A classic session (``local``, ``submit``, a Databricks cluster in dedicated access mode) runs
the driver's JVM in this process's reach; a Spark Connect session (``runtime: connect``,
Databricks serverless and standard access mode) talks to a server over gRPC, and
``sparkContext``, ``_jvm``, ``_jsc``, ``_jdf`` and ``_jsparkSession`` fail there
(``JVM_ATTRIBUTE_NOT_SUPPORTED``). Every such attribute is read in this module only
(``tests/test_architecture.py`` fails on one anywhere else in the product), each with its
alternative on Connect:

============================  =====================================  =========================
what                           classic session                        Spark Connect
============================  =====================================  =========================
file operations                Hadoop ``FileSystem`` (any scheme)     the local disk or the
                                                                      ADLS SDK; other schemes
                                                                      refused by ``validate``
Spark's log level              ``SparkContext.setLogLevel``           the server's setting
the driver JVM's stderr        :func:`launch_driver` filters it       the server's log file
a class on the classpath       ``Class.forName``                      the server's concern
the listener's session         the JVM session                        the session id
pruning evidence               the executed plan's scan nodes         ``DataFrame.executionInfo``
the optimizer's size estimate  the optimized plan's statistics        ``EXPLAIN COST``
``medallion serve``            Spark's Thrift server in the driver    refused (exit 2)
progress reports               read from their JSON (the listener's   the client's listener
                               bridge, :func:`listener_bridge`)       bus, from the same JSON
============================  =====================================  =========================
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping
from typing import IO, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.listener import JStreamingQueryListener, QueryProgressEvent

from framework.errors import SessionError, UsageError, first_line


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


def gateway(spark: SparkSession) -> Any:
    """The driver JVM's Py4J view (classic sessions only)."""
    return spark._jvm


class _ProgressFromJson(JStreamingQueryListener):
    """pyspark's bridge from a classic driver's listener bus, each progress report read from
    its JSON: one call into the JVM, where pyspark's reads it field by field, tens of calls,
    and walks each of its maps and lists to a Java exception at the end, which pyspark
    converts through tens of failed class lookups in the JVM. The report is the same, but its
    rates, to one decimal place as the events give them (Spark Connect's clients read the same
    JSON)."""

    def onQueryProgress(self, jevent: Any) -> None:
        self.pylistener.onQueryProgress(QueryProgressEvent.fromJson(json.loads(jevent.json())))


def listener_bridge(listener: Any) -> Any:
    """The JVM side of a Python streaming query listener in a classic driver: pyspark's
    wrapper, around :class:`_ProgressFromJson`."""
    from pyspark import SparkContext

    jvm: Any = SparkContext._jvm
    return jvm.PythonStreamingQueryListenerWrapper(_ProgressFromJson(listener))


def hadoop_configuration(spark: SparkSession) -> Any:
    """The session's Hadoop configuration (classic sessions only)."""
    return spark._jsc.hadoopConfiguration()


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


def launch_driver(settings: Mapping[str, str], *, notices: bool = False) -> None:
    """Start this process's classic driver JVM, as ``SparkSession.builder.getOrCreate`` would
    with ``settings`` (spark-submit's ``--conf``), its stderr passed on line by line but for
    the JVM's own notices (:data:`JVM_NOTICES`; all of them with ``notices``). Nothing if the
    process has a driver JVM already (a session was made before, or spark-submit started it).

    A JVM that cannot start (no java, a bad option) has said why on stderr before this
    raises a :class:`SessionError`."""
    from pyspark import SparkConf, SparkContext
    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    read_end, write_end = os.pipe()
    passing = threading.Thread(target=_pass_on, args=(os.fdopen(read_end, "rb"), notices),
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


def _pass_on(stream: IO[bytes], notices: bool) -> None:
    with stream:
        for line in stream:
            if notices or not line.decode(errors="replace").startswith(JVM_NOTICES):
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


def query_execution(df: DataFrame) -> Any:
    """The JVM ``QueryExecution`` of a classic DataFrame."""
    return df._jdf.queryExecution()


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
    plan = query_execution(spark.table(table)).optimizedPlan()
    return int(str(plan.stats().sizeInBytes()))


_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "PiB": 1 << 50, "EiB": 1 << 60}


def _bytes(value: float, unit: str) -> int:
    return int(value * _UNITS.get(unit, 1))


def start_thrift_server(spark: SparkSession) -> Any:
    """Spark's Thrift JDBC/ODBC server in the classic driver, on the session's catalog."""
    require_classic(spark, "medallion serve")
    jvm: Any = spark._jvm
    return jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2.startWithContext(
        spark._jsparkSession.sqlContext())


def error_chain(error: BaseException) -> list[Any]:
    """The JVM throwables of a classic Spark error, outermost first; none for another."""
    throwable = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    chain: list[Any] = []
    while throwable is not None and len(chain) < 20:
        chain.append(throwable)
        throwable = throwable.getCause()
    return chain


def condition_of(throwable: Any) -> str:
    """The error condition of a JVM throwable (``FAILED_READ_FILE.NO_HINT``); "" for one
    that is not a ``SparkThrowable``."""
    from py4j.protocol import Py4JError

    try:
        return str(throwable.getCondition() or "")
    except Py4JError:
        return ""


def java_error(error: BaseException) -> str | None:
    """``Kind: first line of the message`` of a Java exception raised through Py4J; None for
    another error."""
    from py4j.protocol import Py4JJavaError

    if not isinstance(error, Py4JJavaError):
        return None
    thrown = error.java_exception
    kind = str(thrown.getClass().getSimpleName())
    message = str(thrown.getMessage() or "").splitlines()[0] if thrown.getMessage() else ""
    return f"{kind}: {message}"
