"""Shared fixtures: one real local SparkSession with Delta for the whole run, and per-test
lakehouses (their own conf/ folder, root and catalog schemas) under pytest's tmp_path."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from framework.config.model import Environment, Runtime
from framework.connect_server import ConnectServer
from framework.connect_server import start as start_connect_server
from tests.faultfs import spark_conf as faulty_conf
from tests.jvm_classes import JAVA_FOR_TESTS, JVM_FOR_TESTS, SPARK_FOR_TESTS, sharing_options
from tests.kafka_broker import Broker, kafka_broker
from tests.minicluster import minicluster
from tests.support import Lakehouse, QuickstartLake, run_quickstart

os.environ.setdefault("SPARK_SUBMIT_OPTS", JAVA_FOR_TESTS)

CLUSTER = ("test_packaging", "test_deploy", "test_yarn")  # build the wheel in the repository
LONG = ("test_crash", "test_readme", "test_lifecycle", "test_kafka", "test_report",
        "test_serve", "test_connect", "test_refresh")  # a minute or more each


def pytest_configure(config: pytest.Config) -> None:
    """Before any worker starts (they inherit the environment): the class archive, made once
    per virtualenv, on the JVMs' command line, unless SPARK_SUBMIT_OPTS came from outside."""
    if not hasattr(config, "workerinput") and os.environ["SPARK_SUBMIT_OPTS"] == JAVA_FOR_TESTS:
        os.environ["SPARK_SUBMIT_OPTS"] = sharing_options(JAVA_FOR_TESTS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test``: two workers), the tests that start the YARN + HDFS
    cluster or build the wheel in the repository run in one worker, one cluster and one build
    at a time; they go first, then the longest tests, so that no long one is left for the end
    while the other worker idles."""
    def rank(item: pytest.Item) -> int:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        if item.get_closest_marker("yarn") or module in CLUSTER:
            item.add_marker(pytest.mark.xdist_group("cluster"))
            return 0
        return 1 if module in LONG else 2

    items.sort(key=rank)


@pytest.fixture(scope="session", autouse=True)
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The worker's one session, made before any test runs: a command run in-process
    (``validate``'s parser) would otherwise make a bare one first, without Delta, and every
    later test of the worker would get it."""
    from framework.session import get_spark

    root = tmp_path_factory.mktemp("spark-session")
    env = Environment(
        name="tests", runtime=Runtime.LOCAL, root=str(root), master="local[2]",
        shuffle_partitions=2,
    )
    session = get_spark(
        env,
        "medallion-tests",
        {
            "spark.ui.enabled": "false",
            "spark.driver.memory": "2g",
            "spark.sql.streaming.fileSource.log.compactInterval": "10",
            "spark.databricks.delta.snapshotPartitions": "2",
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
            # faulty:// (tests/faultfs), refusing nothing unless a test says: Hadoop's file
            # system under a scheme of its own, for tests of any store but a local disk
            **faulty_conf(),
        },
    )
    yield session
    session.stop()


class _Server:
    """A server a worker starts for the first test that needs it and stops after the last
    (they all run in one worker, in one xdist group), not at the session's end: idle, it would
    take CPU from the tests after them."""

    def __init__(self, needed_by: Callable[[pytest.Item], bool]) -> None:
        self.needed_by = needed_by
        self.users = 0  # the session's tests that need it, not yet torn down
        self.running = ExitStack()


# the YARN + HDFS cluster (the tests marked yarn); the Kafka broker (those using `broker`); the
# Spark Connect server (those using `connect_server`)
_Cluster = _Server(lambda item: item.get_closest_marker("yarn") is not None)
_Kafka = _Server(lambda item: "broker" in getattr(item, "fixturenames", ()))
_Connect = _Server(lambda item: "connect_server" in getattr(item, "fixturenames", ()))
SERVERS = (_Cluster, _Kafka, _Connect)


def pytest_collection_finish(session: pytest.Session) -> None:
    for server in SERVERS:
        server.users = sum(1 for item in session.items if server.needed_by(item))


@pytest.hookimpl(trylast=True)  # (after the test's own fixtures are torn down)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    for server in SERVERS:
        if server.needed_by(item):
            server.users -= 1
            if server.users <= 0:
                server.running.close()


@pytest.fixture(scope="session")
def yarn_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A real single-node YARN + HDFS cluster (deploy/yarn/minicluster.sh), started once for
    the tests that need it; the variables of its env.sh (HADOOP_CONF_DIR, the HDFS root...)."""
    with _Cluster.running:
        variables = _Cluster.running.enter_context(
            minicluster(tmp_path_factory.mktemp("minicluster")))
        # the drivers and executors YARN starts in containers: the tests' JVM settings too
        # (spark-submit's own JVM, the driver in client mode, takes SPARK_SUBMIT_OPTS; Spark
        # refuses its own settings among a container's Java options)
        defaults = Path(variables["SPARK_CONF_DIR"]) / "spark-defaults.conf"
        with defaults.open("a", encoding="utf-8") as conf:
            for role in ("driver", "executor", "yarn.am"):
                conf.write(f"spark.{role}.extraJavaOptions {JVM_FOR_TESTS}\n")
            conf.writelines(f"{k} {v}\n" for k, v in SPARK_FOR_TESTS.items())
        yield variables


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A real single-node Kafka broker (KRaft, its own JVM: deploy/kafka/broker.sh), started
    once for the tests that use it (all in the "kafka" xdist group); each uses topics of its
    own."""
    with _Kafka.running:
        yield _Kafka.running.enter_context(kafka_broker(tmp_path_factory.mktemp("kafka")))


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A real Spark Connect server (framework.connect_server: Spark's own, in its own JVM),
    started once for the tests that use it (all in the "quickstart" xdist group)."""
    with _Connect.running:
        running = start_connect_server(str(tmp_path_factory.mktemp("connect-server")))
        _Connect.running.callback(running.stop)
        yield running


@pytest.fixture(scope="session")
def quickstart_lake(spark: SparkSession,
                    tmp_path_factory: pytest.TempPathFactory) -> QuickstartLake:
    """The lake the README's quickstart makes, once per worker: the README's test checks it,
    the Spark Connect demo is compared with it, and tests/test_logging.py runs other commands
    the documentation shows on it (all in the "quickstart" xdist group)."""
    return run_quickstart(spark, tmp_path_factory.mktemp("quickstart"))


@pytest.fixture(autouse=True)
def restore_structlog() -> Iterator[None]:
    """Commands configure logging for the process; put structlog back after each test."""
    yield
    import structlog

    structlog.reset_defaults()


@pytest.fixture
def lakehouse(tmp_path: Path) -> Lakehouse:
    return Lakehouse(tmp_path)


