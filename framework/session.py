"""One entry, :func:`get_spark`, that returns the SparkSession for an environment.

* **local**: ``local[*]`` with Delta's extension and catalog, Delta's jars and those the layers
  ask for (:func:`spark_packages`) resolved from Maven Central through delta-spark's pip helper
  (cached by Ivy; ``python -m framework.session`` warms the cache), and a warehouse plus embedded
  Derby metastore under the lakehouse root, so tables persist by name across runs.
* **databricks**: the cluster's active session, as it is: no master, no packages, never stopped
  (a classic session, or a Spark Connect one on serverless compute and in standard access
  mode, which :meth:`Runtime.databricks_connect` detects from the environment before the
  session exists; :mod:`framework.jvm` says what differs).
* **connect**: a session of the Spark Connect server ``remote`` names (``sc://host:port``, or
  ``$SPARK_REMOTE``); the server owns Delta's extension, the catalog and the jars, the client
  sets session settings only (UTC, shuffle partitions, the environment's ``spark_conf``).
* **submit** (spark-submit, YARN or any master): master, packages and conf come from
  spark-submit; if Delta's classes are missing the job stops at once with the exact
  ``--packages`` argument to add. The catalog is Hive's, persistent (:func:`catalog_conf`),
  so a table written by one ``spark-submit`` is found by name in the next.

Every runtime pins ``spark.sql.session.timeZone`` to UTC (``window_date`` and the event-time
windows must not depend on where the driver runs), unless the environment's ``spark_conf``
sets another zone, which ``medallion validate`` warns about.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession

from framework.config.model import Environment, Runtime
from framework.config.secrets import SecretRef
from framework.errors import DeltaNotAvailableError, SessionError, first_line
from framework.jvm import (
    configured_jars,
    hadoop_version,
    has_class,
    launch_driver,
    resolve_alone,
    set_log_level,
)
from framework.layers import layer_packages
from framework.logging import get_logger
from framework.redaction import spark_redaction
from framework.storage import local_path

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
SCALA_VERSION = "2.13"


def delta_package() -> str:
    """The Maven coordinate of the Delta jar matching the installed pyspark and delta-spark,
    named as delta-spark's own pip helper names it: from Delta 4.1 on, a jar per Spark minor
    version (``delta-spark_4.2_2.13``); before, one per Delta release (``delta-spark_2.13``)."""
    from importlib.metadata import version

    import pyspark

    delta = version("delta-spark")
    if _major_minor(delta) < (4, 1):
        return f"io.delta:delta-spark_{SCALA_VERSION}:{delta}"
    spark_mm = ".".join(pyspark.__version__.split(".")[:2])
    return f"io.delta:delta-spark_{spark_mm}_{SCALA_VERSION}:{delta}"


def _major_minor(release: str) -> tuple[int, int]:
    """(4, 1) for "4.1.0", "4.1.0rc1" or "4.1"."""
    match = re.match(r"(\d+)\.(\d+)", release)
    if match is None:
        raise SessionError(f"expected a version such as 4.1.0, found {release!r}")
    return int(match.group(1)), int(match.group(2))


def spark_packages() -> list[str]:
    """The Maven coordinates of the jars a session is started with: Delta's, then those the
    installed layers ask for (:func:`framework.layers.layer_packages`)."""
    return [delta_package(), *layer_packages()]


OPENLINEAGE_SPARK = "io.openlineage:openlineage-spark"
OPENLINEAGE_LISTENER = "io.openlineage.spark.agent.OpenLineageSparkListener"
# The listener's release: the newest on Maven Central (the Python client's own releases may run
# ahead of it there); it runs on Spark 4.0 to 4.2.
OPENLINEAGE_SPARK_VERSION = "1.53.0"


# The keys of a transport that OpenLineage's Java client (the listener's) names otherwise than
# the Python client: per transport type, the Python key and the Java one.
_JAVA_TRANSPORT_KEYS = {"file": {"log_file_path": "location"},
                        "kafka": {"topic": "topicName", "config": "properties"}}


def openlineage_spark_package() -> str:
    """The Maven coordinate of OpenLineage's Spark listener (``openlineage-spark``, one shaded
    jar)."""
    return f"{OPENLINEAGE_SPARK}_{SCALA_VERSION}:{OPENLINEAGE_SPARK_VERSION}"


def _listener_manifest() -> Path:
    return cache_folder() / f"openlineage-spark_{OPENLINEAGE_SPARK_VERSION}.jars"


def openlineage_spark_jar() -> str | None:
    """The listener's jar as the setup resolved it (:func:`main`), if still cached."""
    manifest = _listener_manifest()
    if not manifest.is_file():
        return None
    jar = manifest.read_text().strip()
    return jar if jar and Path(local_path(jar)).is_file() else None


def lineage_listener_conf(env: Environment) -> dict[str, str]:
    """The settings of OpenLineage's Spark listener for an environment whose ``lineage`` asks
    for it (``spark_listener: true``): the listener, the jobs' namespace, and the same
    transport as the framework's events (``spark.openlineage.transport.*``, nested keys joined
    with dots, secrets resolved: Spark's redaction masks them). Empty otherwise."""
    from framework.lineage import namespace_of

    lineage = env.lineage
    if lineage is None or not lineage.spark_listener:
        return {}
    conf = {"spark.extraListeners": OPENLINEAGE_LISTENER,
            "spark.openlineage.namespace": namespace_of(env)}

    def flatten(prefix: str, value: object) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                flatten(f"{prefix}.{k}", v)
        elif isinstance(value, bool):
            conf[prefix] = str(value).lower()
        else:
            conf[prefix] = str(value)

    transport = lineage.transport_config()
    renamed = _JAVA_TRANSPORT_KEYS.get(str(transport.get("type")), {})
    flatten("spark.openlineage.transport",
            {renamed.get(k, k): v for k, v in transport.items()})
    return conf


def hadoop_azure_package(hadoop_version: str) -> str:
    """The Maven coordinate of hadoop-azure for ``abfss://`` paths, matching Spark's Hadoop."""
    return f"org.apache.hadoop:hadoop-azure:{hadoop_version}"


def detect_runtime() -> Runtime:
    """Databricks if its runtime variable is set; spark-submit if it launched us; Spark
    Connect if ``$SPARK_REMOTE`` names a server; else local (:meth:`Runtime.detect`)."""
    return Runtime.detect()


def resolved_runtime(env: Environment) -> Runtime:
    """The environment's runtime, ``auto`` resolved by :func:`detect_runtime`."""
    return env.runtime if env.runtime is not Runtime.AUTO else detect_runtime()


def on_spark_connect(env: Environment) -> bool:
    """Whether ``env``'s session will be a Spark Connect one, known before it exists: runtime
    connect, or Databricks running Python over Spark Connect (serverless compute, standard
    access mode: :meth:`Runtime.databricks_connect`)."""
    runtime = resolved_runtime(env)
    return runtime is Runtime.CONNECT or (
        runtime is Runtime.DATABRICKS and Runtime.databricks_connect())


def get_spark(
    env: Environment, app_name: str = "medallion", conf: dict[str, str] | None = None
) -> SparkSession:
    """The SparkSession for ``env``; ``conf`` adds settings (local and spark-submit only)."""
    spark = _BUILDERS[resolved_runtime(env)](env, app_name, dict(conf or {}))
    # Spark rewrites ${name} in SQL text with a setting's value, inside quoted names too: a
    # column named ${spark.some.key} would be renamed, or carry a setting's value into the
    # catalog. The framework's statements quote names (framework.identifiers), read as written.
    spark.conf.set(NO_SUBSTITUTION, "false")
    return spark


NO_SUBSTITUTION = "spark.sql.variable.substitute"
TIME_ZONE = "spark.sql.session.timeZone"


def catalog_conf(env: Environment, local_root: str | None = None) -> dict[str, str]:
    """A persistent Hive catalog: the warehouse under the root, and the metastore the
    environment names (a ``thrift://`` service, or an embedded Derby database in a folder;
    for a local root, ``<root>/metastore_db`` unless named). Without one, under spark-submit,
    the cluster's own metastore settings (hive-site.xml, spark-defaults) apply."""
    settings = {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": (
            os.path.join(local_root, "warehouse") if local_root else env.path("warehouse")),
    }
    metastore = env.metastore
    if metastore is None and local_root is not None:
        metastore = os.path.join(local_root, "metastore_db")
    if metastore is not None and metastore.startswith("thrift://"):
        settings["spark.hadoop.hive.metastore.uris"] = metastore
    elif metastore is not None:
        settings["spark.hadoop.javax.jdo.option.ConnectionURL"] = (
            f"jdbc:derby:;databaseName={metastore};create=true")
    return settings


def _env_conf(env: Environment) -> dict[str, str]:
    return {
        k: v.resolve() if isinstance(v, SecretRef) else v for k, v in env.spark_conf.items()
    }


def storage_conf(env: Environment) -> dict[str, str]:
    """Spark's ABFS settings from the environment's ``storage`` (an ``abfss://`` root under
    spark-submit); on Databricks the cluster owns them and nothing is set."""
    if env.storage is None or not env.root.startswith(("abfss://", "abfs://")):
        return {}
    from framework.storage.adls import hadoop_settings

    return hadoop_settings(env.storage)


def set_aside_unfinished_metastore(folder: str) -> str | None:
    """Move aside an embedded Derby metastore whose creation was cut short.

    A driver killed while Derby creates the database leaves a folder without
    ``service.properties``, which Derby refuses on every later start ("Perhaps Derby was brought
    down in the middle of creating this database"): no command could run again. Such a folder
    holds no catalog yet (the tables' data and logs are under the root); it is renamed
    ``<folder>.unfinished-<seconds>`` unless a live process holds its lock (is creating it now).
    Returns the new name, or None if nothing was moved."""
    import fcntl
    import time

    path = Path(folder)
    if not path.is_dir() or (path / "service.properties").exists():
        return None
    lock = path / "dbex.lck"
    if lock.exists():
        with open(lock, "r+b") as fh:
            try:  # Derby holds this file locked while a JVM has the database open
                fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return None
            fcntl.lockf(fh, fcntl.LOCK_UN)
    target = f"{folder}.unfinished-{int(time.time())}"
    os.rename(folder, target)
    get_logger(metastore=folder).warning(
        "session.metastore.unfinished", moved_to=target,
        reason="the embedded metastore's creation was cut short (no service.properties); "
        "it held no catalog yet and is created again")
    return target


def local_cores(master: str) -> int | None:
    """The cores a ``local`` master runs tasks on: N for ``local[N]`` or ``local[N,F]``, every
    core of the machine for ``local[*]``, one for ``local``; None for a cluster's master."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if not match:
        return None
    n = match.group(1)
    if n is None:
        return 1
    return (os.cpu_count() or 1) if n == "*" else max(1, int(n))


def local_settings(env: Environment) -> tuple[dict[str, str], str | None]:
    """The settings of a driver on this machine for ``env`` (a local session's, or a local
    Spark Connect server's): Delta, the persistent catalog under the root, the driver's Java
    options, and what keeps small batches fast on a few cores; with the environment's
    ``spark_conf``. Also the root's local folder (None for a root on another file system)."""
    root = local_folder(env.root)
    if root is None and env.metastore is None:
        raise SessionError(
            f"expected a local folder as the root of a local environment, or a metastore "
            f"(a local folder or thrift:// URI) for its root on another file system, found "
            f"root {env.root!r} and no metastore")
    # A root on another Hadoop file system (hdfs://...) keeps its tables there; the catalog
    # is the metastore named.
    if root is not None:
        os.makedirs(root, exist_ok=True)
    derby_home = root
    if env.metastore is None or not env.metastore.startswith("thrift://"):
        metastore = env.metastore or os.path.join(str(root), "metastore_db")
        set_aside_unfinished_metastore(metastore)
        derby_home = derby_home or os.path.dirname(metastore)
    java_options = "-Xss16m" if derby_home is None else f"-Dderby.system.home={derby_home} -Xss16m"
    if os.environ.get(JAVA_STACKS) != "1":
        java_options += f" -Dlog4j2.configurationFile={quiet_log_config()}"
    settings: dict[str, str] = {
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        **catalog_conf(env, local_root=root),
        # -Xss: on stop(), Spark regex-matches the Python error text of an interrupted
        # foreachBatch (SPARK-39218); a long traceback overflows the default thread stack.
        "spark.driver.extraJavaOptions": java_options,
        "spark.sql.shuffle.partitions": str(env.shuffle_partitions),
        "spark.sql.adaptive.enabled": "true",
        TIME_ZONE: "UTC",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
        # The file source resolves a batch's files (and, on restart, the last batch's) by
        # listing them; past 32 paths Spark does it as a job of one task per path, seconds on a
        # few cores for what a local disk answers from the driver in milliseconds.
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
        # Delta rebuilds a table's state (streaming sink, MERGE, scan) with this many tasks; its
        # default 50 makes each small commit cost seconds on a few cores, and tasks beyond the
        # cores queue (bench/ledger_replace.py: a small replaceWhere takes about 1.0 s with 2
        # tasks on 2 cores, 1.2 s with 4).
        "spark.databricks.delta.snapshotPartitions": str(
            min(env.shuffle_partitions, local_cores(env.master) or env.shuffle_partitions)),
    }
    if root is not None:
        settings[CHECKPOINT_FILE_MANAGER] = _file_system_checkpoints()
    settings.update(lineage_listener_conf(env))
    settings.update(_env_conf(env))
    return settings, root


# On a local disk, the checkpoints' and Delta's checksum files are written through Spark's
# checkpoint file manager: a temporary file, then a rename. Its default goes through Hadoop's
# FileContext, whose rename asks each end for a symbolic link with a `readlink` process (a pip
# install of Spark has no Hadoop native library), two processes per file: a streaming batch
# into a Delta table writes several such files, and a test worker started about 9,000 in 9
# minutes. Spark's FileSystem-based manager makes the same check (the destination's existence)
# then the same rename (java.io.File's, atomic on a local file system) without a process:
# bench/local_checkpoints.py measures both side by side. Other file systems keep the default.
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"


def local_folder(root: str) -> str | None:
    """The folder of this machine's file system that ``root`` names: a plain path, or a
    ``file:`` URI's path; None for a root on another file system (``hdfs://...``,
    ``abfss://...``, a scheme of a test's own, ``faulty:/...``)."""
    path = local_path(root)
    return None if re.match(r"[A-Za-z][A-Za-z0-9+.-]+:", path) else path


def on_local_disk(root: str) -> bool:
    """Whether ``root`` is a folder of this machine's file system (:func:`local_folder`)."""
    return local_folder(root) is not None


def _file_system_checkpoints() -> str:
    """Spark's FileSystem-based checkpoint file manager, in the installed pyspark's package
    (moved to ``...streaming.checkpointing`` in Spark 4.1)."""
    import pyspark

    package = "org.apache.spark.sql.execution.streaming"
    if _major_minor(pyspark.__version__) >= (4, 1):
        package += ".checkpointing"
    return f"{package}.FileSystemBasedCheckpointFileManager"


def _local(env: Environment, app_name: str, conf: dict[str, str]) -> SparkSession:
    settings, _ = local_settings(env)
    settings.update(conf)
    settings.update(spark_redaction(settings))
    jars = cached_jars()
    # OpenLineage's listener, when asked for: the jar the setup cached, else resolved by
    # Spark's Ivy like Delta's
    listener = bool(lineage_listener_conf(env))
    listener_jar = openlineage_spark_jar() if listener else None
    listener_jars = [listener_jar] if listener_jar else []
    listener_packages = [openlineage_spark_package()] if listener and not listener_jar else []
    if jars:
        settings["spark.jars"] = ",".join([*jars, *listener_jars])
        if listener_packages:
            settings["spark.jars.packages"] = ",".join(listener_packages)
    else:  # resolved by Spark from Maven Central, as delta's configure_spark_with_delta_pip does
        settings["spark.jars.packages"] = ",".join([*spark_packages(), *listener_packages])
        if listener_jars:
            settings["spark.jars"] = ",".join(listener_jars)
    settings = {"spark.master": env.master, "spark.app.name": app_name, **settings}
    debug = os.environ.get(JAVA_STACKS) == "1"
    # Python UDFs run in workers of this interpreter (PySpark's default is whatever `python3`
    # the PATH finds, which need not have the framework: a run from a folder of the user's own
    # then fails in any UDF, bronze's quarantine reasons among them). The environment rather
    # than spark.pyspark.python: a user's own PYSPARK_PYTHON still wins, and the `medallion`
    # processes this one starts (a Connect server, a test case) inherit the same choice.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    launch_driver(settings, notices=debug, resolver=_Resolver.report)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if debug:  # (otherwise the quiet configuration keeps Spark's log off from the JVM's start)
        set_log_level(spark, "WARN")
    if not jars and not listener:  # (the manifest holds spark_packages()'s jars only)
        _remember_jars(spark)
    return spark


class _Resolver:
    """Whether a driver started here passes Ivy's report on (:func:`main`'s, the setup step's:
    it goes to the setup's log); a command's output leaves it out."""

    report = False


JAVA_STACKS = "MEDALLION_JAVA_STACKS"  # "1": Spark's log with its Java stacks (--log-level debug)
QUIET_LOG4J2 = """\
# A command's output holds its own lines and its events only: Spark's log is off from the JVM's
# start ('medallion ... --log-level debug' shows it, with its stacks). The framework's events
# say what failed, a line per file. A JVM about to die of an error (out of memory...) still
# says so, in one line.
rootLogger.level = off
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.alwaysWriteExceptions = false
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: \
%replace{%m}{(?s)[\\n\\r].*}{ (the stack: --log-level debug)}%n
logger.uncaught.name = org.apache.spark.util.SparkUncaughtExceptionHandler
logger.uncaught.level = error
# Where the level is raised (a Spark Connect server's log file, at spark.log.level=WARN), one
# line per event, and none of these: a failed task is logged by both Executor and
# TaskSetManager, several lines per file, and the job's events say which file failed and why.
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.hive.name = org.apache.hadoop.hive
logger.hive.level = fatal
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = fatal
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = fatal
"""


def quiet_log_config() -> str:
    """The log4j2 configuration (:data:`QUIET_LOG4J2`) of a driver started here (a local session's
    or Spark Connect server's). Written once under the cache folder, named by its content: another
    installation's driver (an older release) never reads this one's, nor this one theirs."""
    import hashlib

    digest = hashlib.sha256(QUIET_LOG4J2.encode()).hexdigest()[:12]
    path = _manifest().parent / f"log4j2-quiet-{digest}.properties"
    if not path.is_file() or path.read_text(encoding="utf-8") != QUIET_LOG4J2:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(f".{os.getpid()}.tmp")
        staging.write_text(QUIET_LOG4J2, encoding="utf-8")
        os.replace(staging, path)
    return str(path)


def cache_folder() -> Path:
    """Where the jars' manifests and the drivers' log configuration are kept."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "medallion"


def _manifest() -> Path:
    name = "+".join(p.rsplit(":", 2)[1] + "_" + p.rsplit(":", 1)[1]
                    for p in spark_packages())
    return cache_folder() / f"{name}.jars"


def cached_jars() -> list[str]:
    """The jars of :func:`spark_packages` as resolved once by Spark from Maven Central, if all
    are still cached: handed to Spark directly, they spare the Ivy run ``spark.jars.packages``
    costs at every start (seconds, and a report on stdout)."""
    manifest = _manifest()
    if not manifest.is_file():
        return []
    jars = [line.strip() for line in manifest.read_text().splitlines() if line.strip()]
    if not jars or not all(Path(local_path(j)).is_file() for j in jars):
        return []
    return jars


def _remember_jars(spark: SparkSession) -> None:
    import pyspark

    resolved = configured_jars(spark)
    # Ivy names a jar <group>_<artifact>-<version>.jar; those pyspark ships already (Hadoop's
    # client, which a connector may depend on) are not handed over twice.
    shipped = set(os.listdir(Path(pyspark.__file__).parent / "jars"))
    jars = [j for j in resolved.split(",")
            if j and j.rsplit("/", 1)[-1].split("_", 1)[-1] not in shipped]
    if jars and all(Path(local_path(j)).is_file() for j in jars):
        manifest = _manifest()
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text("\n".join(jars) + "\n")


def _databricks(env: Environment, app_name: str, conf: dict[str, str]) -> SparkSession:
    # The session Databricks made for this process, classic or Spark Connect alike: pyspark
    # hands out a Connect one where the process is a Connect client (is_remote), and every
    # later step asks the session which it is (framework.jvm.is_connect).
    spark = SparkSession.getActiveSession()
    if spark is None:
        spark = SparkSession.builder.getOrCreate()
    # Only session-level settings: UTC unless the environment says otherwise, what the user
    # asked for, and the redaction of plans; the cluster owns everything else (its
    # spark.redaction.regex is set in the bundle's cluster settings, databricks.yml).
    user = _env_conf(env)
    string_regex = "spark.sql.redaction.string.regex"
    redaction = spark_redaction({string_regex: user.get(string_regex)
                                 or spark.conf.get(string_regex, None) or ""})
    for key, value in {TIME_ZONE: "UTC", **user, string_regex: redaction[string_regex]}.items():
        spark.conf.set(key, value)
    return spark


def submit_conf(env: Environment, conf: dict[str, str] | None = None) -> dict[str, str]:
    """The settings a spark-submit driver's session is built with: Delta, a persistent Hive
    catalog, UTC, the storage's credentials, then the environment's ``spark_conf`` and
    ``conf`` (which win)."""
    settings = {
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        **catalog_conf(env, local_root=local_folder(env.root)),
        TIME_ZONE: "UTC",
        "spark.sql.shuffle.partitions": str(env.shuffle_partitions),
    }
    settings.update(storage_conf(env))
    settings.update(lineage_listener_conf(env))  # (its jar: --packages, docs/lineage.md)
    settings.update(_env_conf(env))
    settings.update(conf or {})
    settings.update(spark_redaction(settings))
    return settings


def _submit(env: Environment, app_name: str, conf: dict[str, str]) -> SparkSession:
    # Static SQL settings still apply here: spark-submit starts the JVM, the session is ours.
    local_root = local_folder(env.root)
    metastore = env.metastore or (os.path.join(local_root, "metastore_db") if local_root
                                  else None)  # as catalog_conf names it
    if metastore is not None and not metastore.startswith("thrift://"):
        set_aside_unfinished_metastore(metastore)  # a folder on the driver's host
    builder = SparkSession.builder.appName(app_name)
    for key, value in submit_conf(env, conf).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    require_delta(spark, needs_azure=env.root.startswith("abfs"))
    return spark


def require_delta(spark: SparkSession, needs_azure: bool = False) -> None:
    """Fail with the exact ``--packages`` argument when Delta (or hadoop-azure) is missing."""
    missing = []
    if not has_class(spark, DELTA_EXTENSION):
        missing.append(delta_package())
    abfs = "org.apache.hadoop.fs.azurebfs.SecureAzureBlobFileSystem"
    if needs_azure and not has_class(spark, abfs):
        missing.append(hadoop_azure_package(hadoop_version(spark)))
    if missing:
        raise DeltaNotAvailableError(
            "expected Delta Lake's classes on the driver's classpath, found them missing. "
            f"Add to spark-submit: --packages {','.join(missing)} "
            f"--conf spark.sql.extensions={DELTA_EXTENSION} "
            f"--conf spark.sql.catalog.spark_catalog={DELTA_CATALOG}"
        )


def _connect(env: Environment, app_name: str, conf: dict[str, str]) -> SparkSession:
    """A session of the environment's Spark Connect server, with the session settings every
    runtime has (the server's own settings, static ones, stay the server's)."""
    url = env.remote_url()
    try:
        spark = SparkSession.builder.remote(url).getOrCreate()
    except ImportError as exc:
        raise SessionError(f"expected Spark Connect's client packages for runtime connect, "
                           f"found {exc.name or exc} missing (pip install "
                           f"'pyspark[connect]')") from None
    settings = {TIME_ZONE: "UTC", "spark.sql.shuffle.partitions": str(env.shuffle_partitions),
                **_env_conf(env), **conf}
    string_regex = "spark.sql.redaction.string.regex"
    settings[string_regex] = spark_redaction({string_regex: settings.get(string_regex, "")}
                                             )[string_regex]
    _OPENED.append(spark)
    for key, value in settings.items():
        try:
            spark.conf.set(key, value)
        except Exception as exc:  # a static setting: the server's command line holds it
            if _current(spark, key) == value:
                continue
            raise SessionError(
                f"expected session settings for the Spark Connect session of environment "
                f"{env.name!r}, found {key}, which the server {url} does not let a client "
                f"change ({first_line(exc)[:200]}): set it on the server") from None
    return spark


_OPENED: list[SparkSession] = []  # the Spark Connect sessions this process opened


def end_connect_sessions() -> None:
    """Stop the Spark Connect sessions this process opened: their streaming listeners first
    (each holds a thread on a call to the server that would keep the process alive), then
    the session, which the server releases. A classic session is left to the process's end."""
    from framework.listener import ProgressListener

    while _OPENED:
        spark = _OPENED.pop()
        try:
            ProgressListener.uninstall(spark)
            spark.stop()
        except Exception as exc:  # a server gone: nothing left to release
            get_logger().debug("session.connect.stop_failed", error=first_line(exc))


def _current(spark: SparkSession, key: str) -> str | None:
    try:
        return spark.conf.get(key, None)
    except Exception:
        return None


_BUILDERS: dict[Runtime, Callable[[Environment, str, dict[str, str]], SparkSession]] = {
    Runtime.LOCAL: _local,
    Runtime.DATABRICKS: _databricks,
    Runtime.SUBMIT: _submit,
    Runtime.CONNECT: _connect,
}


# A client's session closed on the server ends Hive's session state, which asks for the thread's
# Hive client (``SessionState.unCacheDataNucleusClassLoaders``); a new one registers Hive's
# functions, and Hive's function registry loads the LLAP splits function, whose classes are in
# hive-llap-common: a jar Spark 4 no longer ships (SPARK-51041 added it back for the thrift
# server's tests only). Without it the server printed a NoClassDefFoundError
# (org/apache/hadoop/hive/llap/security/LlapSigner$Signable) and its stack. It is resolved by
# Spark's own Ivy, as Delta's jars are, without its dependencies (pyspark ships them), at the
# Hive version pyspark ships, and put on the serving driver's class path.
HIVE_LLAP = "org.apache.hive:hive-llap-common"


def hive_version() -> str | None:
    """The version of the Hive classes pyspark ships (its hive-exec jar's), None without."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    found = sorted(jars.glob("hive-exec-*.jar"))
    match = re.match(r"hive-exec-(\d[^-]*)", found[0].name) if found else None
    return match.group(1) if match else None


def _llap_manifest(version: str) -> Path:
    return cache_folder() / f"hive-llap-common_{version}.jars"


def hive_llap_jar(resolve: bool = True) -> str | None:
    """The local path of hive-llap-common at pyspark's Hive version, resolved once (in a
    process of its own, :func:`framework.session.main`, when the setup step has not) and
    cached; None when it cannot be had (no Hive classes, or the repository out of reach)."""
    version = hive_version()
    if version is None:
        return None
    manifest = _llap_manifest(version)
    if not manifest.is_file() and resolve:
        done = subprocess.run([sys.executable, "-m", "framework.session"], capture_output=True,
                              text=True, timeout=600)
        if done.returncode != 0:
            get_logger(package=f"{HIVE_LLAP}:{version}").warning(
                "serve.jar_unresolved", error=done.stderr.strip()[-300:])
    jar = manifest.read_text().strip() if manifest.is_file() else ""
    return jar if jar and Path(jar).is_file() else None


def resolve_hive_llap(spark: SparkSession) -> str | None:
    """Resolve hive-llap-common (:data:`HIVE_LLAP`) with ``spark``'s Ivy, without its
    dependencies, and remember its path (:func:`hive_llap_jar`)."""
    version = hive_version()
    if version is None:
        return None
    jar = resolve_alone(spark, f"{HIVE_LLAP}:{version}")
    manifest = _llap_manifest(version)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(jar + "\n")
    return jar


def main() -> None:
    """Warm the Ivy cache with the jars of :func:`spark_packages` (the setup step's, not tests')."""
    import tempfile

    from framework.config.model import Environment

    _Resolver.report = True
    with tempfile.TemporaryDirectory() as root:
        env = Environment(name="warmup", runtime=Runtime.LOCAL, root=root, master="local[1]")
        spark = get_spark(env, "medallion-warmup", {"spark.ui.enabled": "false"})
        spark.range(1).write.format("delta").save(os.path.join(root, "probe"))
        print(f"jars ready: {', '.join(spark_packages())} (Spark {spark.version})")
        try:  # (medallion serve's driver needs it)
            print(f"and for medallion serve: {resolve_hive_llap(spark)}")
        except SessionError as exc:  # serve works without it, but prints a stack as it stops
            print(f"warning: hive-llap-common not resolved for medallion serve: {exc}")
        try:  # (an environment's lineage.spark_listener adds it)
            jar = resolve_alone(spark, openlineage_spark_package())
            _listener_manifest().write_text(jar + "\n")
            print(f"and for lineage.spark_listener: {jar}")
        except SessionError as exc:
            print(f"warning: {openlineage_spark_package()} not resolved for "
                  f"lineage.spark_listener: {exc}")
        spark.stop()


if __name__ == "__main__":
    main()
