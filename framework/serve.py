"""``medallion serve``: Spark's Thrift JDBC/ODBC server (HiveServer2's protocol) over the
lakehouse catalog, so that BI tools and ``beeline`` query the tables by name.

The server runs in the driver of the environment's own session (Spark's
``HiveThriftServer2.startWithContext``, whose classes ship with pyspark): every table and view of
the catalog is visible, with its comments, and each query runs as ``medallion sql`` runs it. It
listens on ``localhost`` unless told otherwise, and without authentication only on a loopback
address: on any other, HiveServer2's authentication must be configured in the environment's
``spark_conf`` (``spark.hadoop.hive.server2.authentication``: ``LDAP`` with its ``...ldap.url``,
``KERBEROS`` with its principal and keytab, ``CUSTOM``), or the command is refused; so is a port
already taken, before anything starts. SIGTERM or Ctrl-C stops the server, then the session. It
needs a classic session: under Spark Connect (``runtime: connect``) it is refused (exit 2).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from framework.config.model import ProjectConfig, Runtime
from framework.errors import UsageError
from framework.jvm import thrift_server
from framework.logging import get_logger
from framework.served import AUTHENTICATION, UNAUTHENTICATED, authentication

DEFAULT_PORT = 10000
PORT_VARIABLE = "MEDALLION_SERVE_PORT"
HOST_VARIABLE = "MEDALLION_SERVE_HOST"
DELTA_JARS = ("io.delta_delta-spark_", "io.delta_delta-storage-")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_address(mode: str, host: str, port: int) -> None:
    """Refuse an address without authentication off loopback, and a port in use."""
    if not is_loopback(host) and mode in UNAUTHENTICATED:
        raise UsageError(
            f"expected authentication for a server listening on {host} (not a loopback "
            f"address), found {AUTHENTICATION}={mode}; set spark.hadoop.{AUTHENTICATION} "
            "(LDAP, KERBEROS or CUSTOM, with its settings) in the environment's spark_conf, "
            "or serve on localhost")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise UsageError(f"expected port {port} on {host} free for the server, found it "
                             f"in use or not bindable ({exc.strerror}); choose another with "
                             f"--port or {PORT_VARIABLE}") from None


@dataclass
class ThriftServer:
    """A running Thrift server in the session's driver."""

    spark: SparkSession
    host: str
    port: int
    running: contextlib.ExitStack  # closed, it stops the server

    @property
    def url(self) -> str:
        return f"jdbc:hive2://{self.host}:{self.port}/default"

    def stop(self) -> None:
        self.running.close()
        get_logger(host=self.host, port=self.port).info("serve.stopped")


def driver_class_path() -> dict[str, str]:
    """The session setting a local driver that serves needs: the server's sessions load the
    Delta catalog through the JVM's class path, not through the jars a running session adds,
    so the driver starts with Delta's own jars on it (only those: their dependencies' older
    versions would shadow Spark's), and with Hive's LLAP classes (:func:`hive_llap_jar`)."""
    from framework.session import cached_jars, hive_llap_jar
    from framework.storage import local_path

    delta = [local_path(j) for j in cached_jars()
             if j.rsplit("/", 1)[-1].startswith(DELTA_JARS)]
    jars = [*delta, *([llap] if (llap := hive_llap_jar()) else [])]
    return {"spark.driver.extraClassPath": ":".join(jars)} if jars else {}


def serve(project: ProjectConfig, host: str | None = None, port: int | None = None) -> None:
    """Serve the environment's catalog until SIGTERM or SIGINT."""
    from framework.commands import advertise, take_lake
    from framework.session import get_spark, on_spark_connect, resolved_runtime

    if on_spark_connect(project.env):
        where = ("runtime connect" if resolved_runtime(project.env) is Runtime.CONNECT
                 else "Databricks over Spark Connect (serverless or standard access mode)")
        raise UsageError(
            f"expected a classic Spark session for medallion serve, found environment "
            f"{project.env.name!r} on {where}: the Thrift server runs in a driver's "
            "JVM, which a Spark Connect client does not have (serve the lake with runtime "
            "local or submit; on Databricks, query it through a SQL warehouse)")

    host = host or os.environ.get(HOST_VARIABLE) or "localhost"
    port = port or int(os.environ.get(PORT_VARIABLE) or DEFAULT_PORT)
    mode = authentication(project)
    check_address(mode, host, port)
    take_lake(project, "medallion serve", writes=False)  # the embedded metastore: one process
    # HiveServer2 takes its address from these variables of the driver's JVM, started below
    os.environ["HIVE_SERVER2_THRIFT_PORT"] = str(port)
    os.environ["HIVE_SERVER2_THRIFT_BIND_HOST"] = host
    local = project.env.runtime in (Runtime.LOCAL, Runtime.AUTO)
    spark = get_spark(project.env, "medallion-serve", driver_class_path() if local else {})
    server = start(spark, host, port, mode)
    advertise(f"{host}:{port}")  # (medallion sql queries the lake here while it is served)
    stopped: list[str] = []

    def stop(signum: int, frame: Any) -> None:
        stopped.append(signal.Signals(signum).name)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        print(f"serving {project.env.catalog} on {server.url} (authentication: {mode}); "
              "SIGTERM or Ctrl-C stops", flush=True)
        while not stopped:
            time.sleep(0.2)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        server.stop()
        spark.stop()
        get_logger(host=host, port=port).info("serve.finished", signal=",".join(stopped))


def start(spark: SparkSession, host: str, port: int, mode: str,
          timeout: float = 60.0) -> ThriftServer:
    """Start the server in ``spark``'s driver, whose JVM was started with the address in
    ``HIVE_SERVER2_THRIFT_PORT`` and ``..._BIND_HOST``, and wait until it accepts
    connections on ``host:port``."""
    with contextlib.ExitStack() as running:
        running.enter_context(thrift_server(spark))
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((host, port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:  # (leaving the block stops the server)
                    raise UsageError(f"expected the server listening on {host}:{port} within "
                                     f"{timeout:.0f} s, found nothing there") from None
                time.sleep(0.2)
        server = ThriftServer(spark, host, port, running.pop_all())
    get_logger(host=host, port=port).info("serve.started", url=server.url,
                                          authentication=mode)
    return server


@dataclass(frozen=True)
class Detached:
    """A ``medallion serve`` started in the background for ``medallion sql --serve``."""

    pid: int
    address: str  # host:port
    log: Path  # its output


def start_detached(project: ProjectConfig, conf: str | None, timeout: float = 300.0
                   ) -> Detached:
    """Start ``medallion serve`` for the project's lake in a process of its own, detached from
    this one (its own session, output to a log file), and wait until it serves the lake; a
    server that exits first is a :class:`UsageError` with the last line it logged."""
    from framework.commands import served_at
    from framework.session import cache_folder

    env = project.env
    digest = hashlib.sha256(env.root.encode()).hexdigest()[:12]
    log = cache_folder() / "serve" / f"{env.name}-{digest}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-c", "from framework.cli import main; raise SystemExit(main())",
               "serve", "--env", env.name, "--log-format", "json",
               *(["--conf", conf] if conf else [])]
    with open(log, "w", encoding="utf-8") as out:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                 start_new_session=True)
    deadline = time.monotonic() + timeout
    while (address := served_at(project)) is None:
        if child.poll() is not None or time.monotonic() > deadline:
            said = [x for x in log.read_text(encoding="utf-8").splitlines() if x.strip()]
            raise UsageError(f"expected medallion serve (pid {child.pid}) serving the lake "
                             f"within {timeout:.0f} s, found it "
                             f"{'exited' if child.poll() is not None else 'not serving'}: "
                             f"{said[-1] if said else 'no output'} (its log: {log})")
        time.sleep(0.5)
    get_logger(pid=child.pid, address=address).info("serve.detached", log=str(log))
    return Detached(child.pid, address, log)
