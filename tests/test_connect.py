"""The connect runtime: a real Spark Connect server (pyspark's own, with Delta's jars), started
once for these tests on a loopback port, and ``medallion`` commands talking to it as clients.

Clients run as subprocesses: a Spark Connect session switches pyspark's functions to Connect
for the whole process (``SPARK_CONNECT_MODE_ENABLED``), which the classic test session must
not see."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from framework.cli import main as medallion
from framework.config.model import Environment, Layer, Runtime
from framework.connect_server import ConnectServer, start
from framework.pruning import explain_pruning
from tests.support import Lakehouse, bronze_spec, medallion_cmd
from tests.test_gold import STORES, with_sales_mart

pytestmark = pytest.mark.xdist_group("connect")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    running = start(str(tmp_path_factory.mktemp("connect-server")))
    try:
        yield running
    finally:
        running.stop()


def on_connect(lakehouse: Lakehouse, server: ConnectServer) -> None:
    """Point the lakehouse's environment at the server."""
    lakehouse.write_env(runtime="connect", remote=server.url, spark_conf={})


def cli(lakehouse: Lakehouse, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*medallion_cmd(), *args], capture_output=True, text=True,
                          env=lakehouse.cli_env(), timeout=timeout)


# ---------------------------------------------------------------------- configuration only
def test_a_connect_environment_names_its_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    with pytest.raises(ValueError, match=r"expected the Spark Connect server of runtime connect"):
        Environment(name="e", runtime=Runtime.CONNECT, root="/tmp/lake")
    with pytest.raises(ValueError, match=r"expected a Spark Connect URL \(sc://host:port\)"):
        Environment(name="e", runtime=Runtime.CONNECT, root="/tmp/lake", remote="http://h:1")
    monkeypatch.setenv("SPARK_REMOTE", "sc://localhost:15002")
    assert Environment(name="e", runtime=Runtime.CONNECT, root="/tmp/lake").remote is None
    auto = Environment(name="e", root="/tmp/lake")
    from framework.session import remote_url, resolved_runtime

    assert resolved_runtime(auto) is Runtime.CONNECT
    assert remote_url(auto) == "sc://localhost:15002"


def test_validate_refuses_a_root_a_connect_client_cannot_reach(
    lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.write_env(runtime="connect", remote="sc://localhost:1", root="hdfs://nn:8020/lake")
    lakehouse.add_table("bronze", "orders", bronze_spec())

    assert medallion(["validate", "--no-spark", "--conf", str(lakehouse.conf),
                      "--env", lakehouse.env_name]) == 2
    err = capsys.readouterr().err
    assert "expected a lakehouse root a Spark Connect client reaches without a JVM" in err
    assert "found 'hdfs://nn:8020/lake'" in err


def test_serve_is_refused_on_connect_before_anything_starts(
    lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.write_env(runtime="connect", remote="sc://localhost:1")
    lakehouse.add_table("bronze", "orders", bronze_spec())

    assert medallion(["serve", "--conf", str(lakehouse.conf), "--env", lakehouse.env_name]) == 2
    err = capsys.readouterr().err
    assert "expected a classic Spark session for medallion serve" in err
    assert not lakehouse.path("_lease").exists()  # refused before the lake was taken


# ---------------------------------------------------------------------- a real server
def test_commands_run_over_connect(server: ConnectServer, lakehouse: Lakehouse) -> None:
    on_connect(lakehouse, server)
    lakehouse.add_table("bronze", "orders", bronze_spec())
    base = ["--conf", str(lakehouse.conf), "--env", lakehouse.env_name]

    done = cli(lakehouse, "validate", *base)  # the SQL is checked on the server
    assert done.returncode == 0, done.stderr
    assert "configuration valid" in done.stdout

    done = cli(lakehouse, "init", *base)
    assert done.returncode == 0, done.stderr
    assert lakehouse.path("landing", "orders").is_dir()

    schema = lakehouse.schemas["silver"]
    location = lakehouse.path("tables", "silver", "made")
    statements = [f"CREATE SCHEMA IF NOT EXISTS {schema}",
                  f"CREATE TABLE {schema}.made (id INT, name STRING) USING DELTA "
                  f"LOCATION '{location}'",
                  f"INSERT INTO {schema}.made VALUES (1, 'a'), (2, 'b'), (3, 'c')"]
    for statement in statements:
        done = cli(lakehouse, "sql", *base, statement)
        assert done.returncode == 0, done.stderr
    done = cli(lakehouse, "sql", *base, "--json", "--limit", "2",
               f"SELECT id, name FROM {schema}.made ORDER BY id")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == [
        {"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    assert "output cut at 2 rows" in done.stderr
    assert (location / "_delta_log").is_dir()  # written by the server, where the env says

    done = cli(lakehouse, "sql", *base, "SELECT nope FROM missing_table")
    assert done.returncode == 2
    assert "Spark cannot run the query" in done.stderr

    # a setting only the server's command line can set, asked of the client
    lakehouse.write_env(runtime="connect", remote=server.url,
                        spark_conf={"spark.sql.warehouse.dir": "/elsewhere"})
    done = cli(lakehouse, "sql", *base, "SELECT 1")
    assert done.returncode == 1
    assert "found spark.sql.warehouse.dir, which the server" in done.stderr
    assert "set it on the server" in done.stderr


def test_validate_finds_sql_problems_on_the_server(server: ConnectServer,
                                                   lakehouse: Lakehouse) -> None:
    on_connect(lakehouse, server)
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", {
        "source": "orders", "columns": [{"name": "qty", "expr": "quantity * * 2"}]})

    done = cli(lakehouse, "validate", "--conf", str(lakehouse.conf), "--env",
               lakehouse.env_name)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "quantity * * 2" in done.stderr


def test_pruning_evidence_over_connect_is_the_classic_evidence(
    server: ConnectServer, spark: SparkSession, lakehouse: Lakehouse
) -> None:
    with_sales_mart(spark, lakehouse, partition_by="store_id")
    project = lakehouse.project()
    fact = project.table("store_sales", Layer.GOLD)
    stores = project.table("stores", Layer.SILVER)
    query = (f"SELECT f.store_id, sum(f.revenue) AS revenue FROM {fact.full_name} f "
             f"JOIN {stores.full_name} d ON f.store_id = d.store_id "
             "WHERE d.region = 'north' GROUP BY f.store_id")
    classic = explain_pruning(spark, query)

    on_connect(lakehouse, server)
    base = ["--conf", str(lakehouse.conf), "--env", lakehouse.env_name]
    for table in (fact, stores):  # the same tables in the server's catalog
        for statement in (f"CREATE SCHEMA IF NOT EXISTS {table.env.catalog}.{table.schema}",
                          f"CREATE TABLE {table.full_name} USING DELTA "
                          f"LOCATION '{table.location}'"):
            done = cli(lakehouse, "sql", *base, statement)
            assert done.returncode == 0, done.stderr
    done = cli(lakehouse, "sql", *base, "--explain-pruning", "--json", query)
    assert done.returncode == 0, done.stderr
    over_connect = json.loads(done.stdout)

    def figures(scans: list[dict[str, Any]], name: str) -> dict[str, Any]:
        scan = next(s for s in scans if s["table"].endswith(name))
        return {k: scan[k] for k in ("dynamic_pruning", "partitions_read", "partitions_total",
                                     "files_read", "files_total")}

    expected = figures(classic.to_dict()["scans"], fact.full_name)
    assert expected["partitions_total"] == STORES
    assert expected["partitions_read"] == STORES // 10
    assert over_connect["dynamic_pruning"] is True
    assert figures(over_connect["scans"], fact.full_name) == expected
    assert figures(over_connect["scans"], stores.full_name) == \
        figures(classic.to_dict()["scans"], stores.full_name)


def test_a_streaming_job_over_connect_says_what_is_not_supported_yet(
    server: ConnectServer, lakehouse: Lakehouse
) -> None:
    on_connect(lakehouse, server)
    lakehouse.add_table("bronze", "orders", bronze_spec())
    base = ["--conf", str(lakehouse.conf), "--env", lakehouse.env_name]
    assert cli(lakehouse, "init", *base).returncode == 0

    done = cli(lakehouse, "run", "bronze", *base)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "found a Spark Connect session: not supported yet on runtime connect" in \
        done.stdout + done.stderr
    # what ran before the write, ran over Connect: the tables exist on the server's catalog
    tables = cli(lakehouse, "sql", *base, "--json",
                 f"SHOW TABLES IN {lakehouse.schemas['bronze']}")
    names = {json.loads(line)["tableName"] for line in tables.stdout.splitlines()}
    assert {"orders", "orders_quarantine", "orders_files"} <= names

    # the commands that read and maintain the lake work over Connect
    status = cli(lakehouse, "status", *base)
    assert status.returncode == 0, status.stderr
    orders = next(line for line in status.stdout.splitlines()
                  if line.startswith(f"spark_catalog.{lakehouse.schemas['bronze']}.orders "))
    assert [c.strip() for c in orders.split("|")[1:4]] == ["delta", "0", "0"]  # kind, rows,
    # version
    optimized = cli(lakehouse, "optimize", "orders", *base)
    assert optimized.returncode == 0, optimized.stderr
    assert "optimized" in optimized.stdout
    out = lakehouse.base / "report.html"
    report = cli(lakehouse, "report", *base, "--out", str(out))
    assert report.returncode == 0, report.stderr
    assert out.is_file() and "orders" in out.read_text(encoding="utf-8")


def test_storage_under_connect_needs_no_jvm(server: ConnectServer, tmp_path: Path) -> None:
    """A local path's store on a Connect session is the local disk's; an hdfs:// one is
    refused with the reason (run in a subprocess: a Connect session changes pyspark's mode)."""
    script = (
        "from pyspark.sql import SparkSession\n"
        "from framework.storage import storage_for\n"
        "from framework.errors import StorageError\n"
        f"spark = SparkSession.builder.remote({server.url!r}).getOrCreate()\n"
        f"print(type(storage_for({str(tmp_path)!r}, None, spark)).__name__)\n"
        "try:\n"
        "    storage_for('hdfs://nn:8020/lake', None, spark)\n"
        "except StorageError as e:\n"
        "    print(e)\n")
    from tests.support import REPO

    done = subprocess.run([str(Path(medallion_cmd()[0]).parent / "python"), "-c", script],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()[:2]
    assert first == "LocalStorage"
    assert "a Spark Connect client reaches without a JVM" in second
