"""A Spark Connect server on this machine, for a lake on this machine: what ``runtime: connect``
talks to when it is not Databricks' (the tests, ``bench/connect_overhead.py``, and anyone
trying the connect runtime without a cluster).

pyspark ships the server (``jars/spark-connect_2.13-<version>.jar``) but no start script, so
``spark-submit`` starts its class directly. The server is a driver like a local session's: the
same settings (:func:`framework.session.local_settings`: Delta, the catalog and Derby metastore
under the lake's root, the quiet log), Delta's and the layers' jars from the setup's cache, and
this Python for its Python work (foreachBatch functions). It listens on a loopback address only::

    python -m framework.connect_server --root lakehouse --port 15002
    # then: SPARK_REMOTE=sc://localhost:15002, or remote: in the environment
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from framework.config.model import Environment, Runtime
from framework.errors import SessionError
from framework.logging import get_logger
from framework.session import cached_jars, local_settings, spark_packages

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
HOST = "127.0.0.1"


@dataclass
class ConnectServer:
    """A running server: its process, port and log file."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"sc://localhost:{self.port}"

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout`` seconds)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def command(root: str, port: int, master: str = "local[2]", memory: str = "1g") -> list[str]:
    """The ``spark-submit`` command of a server for the lake at ``root``."""
    import pyspark

    env = Environment(name="connect_server", runtime=Runtime.LOCAL, root=root, master=master)
    settings, _ = local_settings(env)
    java_options = settings.pop("spark.driver.extraJavaOptions")
    settings |= {
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.log.level": "WARN",  # at INFO a server logs tens of thousands of lines
    }
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    args = [str(submit), "--class", SERVER_CLASS, "--master", master,
            "--driver-memory", memory, "--driver-java-options", java_options]
    jars = cached_jars()
    if jars:
        args += ["--jars", ",".join(j.removeprefix("file://") for j in jars)]
    else:
        args += ["--packages", ",".join(spark_packages())]
    for key, value in settings.items():
        args += ["--conf", f"{key}={value}"]
    return args


def start(root: str, port: int | None = None, *, log: Path | None = None,
          timeout: float = 180.0, master: str = "local[2]") -> ConnectServer:
    """Start a server for the lake at ``root`` and wait until it accepts connections."""
    port = port or free_port()
    root = os.path.abspath(root)
    os.makedirs(root, exist_ok=True)
    log = log or Path(root) / f"connect-server-{port}.log"
    environment = {**os.environ, "PYSPARK_PYTHON": sys.executable,
                   "PYSPARK_DRIVER_PYTHON": sys.executable}
    environment.pop("SPARK_REMOTE", None)
    environment.pop("SPARK_CONNECT_MODE_ENABLED", None)
    with open(log, "ab") as out:
        process = subprocess.Popen(command(root, port, master), stdout=out, stderr=out,
                                   stdin=subprocess.DEVNULL, cwd=root, env=environment,
                                   start_new_session=True)
    server = ConnectServer(process, port, log)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise SessionError(f"expected a Spark Connect server on port {port}, found its "
                               f"process ended (exit {process.returncode}); see {log}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1):
            break
        if time.monotonic() > deadline:
            server.stop()
            raise SessionError(f"expected a Spark Connect server listening on port {port} "
                               f"within {timeout:.0f} s, found nothing there; see {log}")
        time.sleep(0.25)
    get_logger(root=root, port=port).info("connect.server.started", url=server.url,
                                          pid=process.pid)
    return server


@contextlib.contextmanager
def running(root: str, port: int | None = None, **kwargs: object) -> Iterator[ConnectServer]:
    """A server for the time of the ``with`` block."""
    server = start(root, port, **kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m framework.connect_server",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="the lake's root (a local folder)")
    parser.add_argument("--port", type=int, default=15002)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    server = start(args.root, args.port, master=args.master)
    print(f"Spark Connect server for {args.root} on {server.url} (pid {server.process.pid}, "
          f"log {server.log}); SIGTERM or Ctrl-C stops it", flush=True)
    try:
        server.process.wait()
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
