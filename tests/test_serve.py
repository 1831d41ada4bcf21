"""``medallion serve``: a real HiveServer2 client (Spark's own beeline, from pyspark's jars)
against the Thrift JDBC/ODBC server over the lakehouse catalog, in its own JVM: the gold
tables the README's quickstart built (the demo's configuration, on a reduced feed), with their
comments."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from framework.cli import main
from tests.kafka_broker import free_port
from tests.support import REPO, Lakehouse, QuickstartLake, medallion_cmd, user_env

pytestmark = pytest.mark.slow
JARS = str(Path(pyspark.__file__).parent / "jars" / "*")


def beeline(url: str, sql: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["java", "-cp", JARS, "org.apache.hive.beeline.BeeLine", "-u", url,
                           "-n", "analyst", "--outputformat=csv2", "--silent=true",
                           "--showHeader=false", "-e", sql],
                          capture_output=True, text=True, timeout=120)


def rows(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    # (beeline prints its prompt before a statement's first line when not on a terminal)
    lines = [re.sub(r"^\d+: jdbc:\S*> ", "", line) for line in done.stdout.splitlines()]
    return [line for line in lines if line.strip()]


@pytest.mark.xdist_group("quickstart")  # (its lake: tests/conftest.py)
def test_serve_answers_jdbc_clients_over_the_lakehouse_catalog(
    spark: SparkSession, quickstart_lake: QuickstartLake, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    # The demo's tables, built by the README's quickstart (its own drivers and catalog, as a
    # job's); nothing here changes them
    env = user_env(MEDALLION_ROOT=str(quickstart_lake.root))
    for name in list(os.environ):
        if name.startswith("MEDALLION_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MEDALLION_ROOT", str(quickstart_lake.root))
    common = ["--conf", str(REPO / "conf"), "--env", "local"]
    # the north region's stores that sold, from the tables themselves
    tables = quickstart_lake.root / "tables"
    north = spark.sql(
        f"SELECT count(DISTINCT f.store_id) FROM delta.`{tables / 'gold' / 'store_sales'}` f "
        f"JOIN delta.`{tables / 'silver' / 'stores'}` d ON f.store_id = d.store_id "
        "WHERE d.region = 'north'").first()[0]
    assert north > 0

    port = free_port()
    gold = "gold"
    server = subprocess.Popen([*medallion_cmd(), "serve", "--port", str(port)],
                              env=env, cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert server.stdout is not None
        banner = server.stdout.readline()
        assert f"jdbc:hive2://localhost:{port}/default" in banner, banner + (
            server.stderr.read() if server.stderr else "")
        url = f"jdbc:hive2://localhost:{port}/default"

        # A second server on the same port, and one open to all without authentication, are
        # refused before anything starts.
        assert main(["serve", "--port", str(port), *common]) == 2
        assert main(["serve", "--host", "0.0.0.0", *common]) == 2
        refused = capsys.readouterr().err
        assert f"expected port {port} on localhost free for the server, found it in use" \
            in refused
        assert "expected authentication for a server listening on 0.0.0.0" in refused

        # The gold tables with their comments: the daily aggregate and the marts (a view, and
        # one materialized)
        listed = rows(beeline(url, f"SHOW TABLES IN {gold}; "
                                   f"DESCRIBE TABLE EXTENDED {gold}.store_sales"))
        assert sorted(line.split(",")[1] for line in listed if line.startswith(f"{gold},")) \
            == ["regional_sales", "segment_sales", "store_sales"]
        first = {line.split(",")[0].strip(): line for line in listed}
        assert "Orders, items and revenue per store and day." in first["Comment"]
        assert "decimal" in first["revenue"] and "Sum of the order amounts" in first["revenue"]

        # An aggregate over the mart that prunes: only the north region's stores are read
        query = (f"SELECT store_id, sum(orders) AS orders, sum(revenue) AS revenue "
                 f"FROM {gold}.regional_sales WHERE region = 'north' GROUP BY store_id "
                 "ORDER BY store_id")
        answered = rows(beeline(url, f"{query}; EXPLAIN {query}"))
        plan = next(i for i, line in enumerate(answered) if "== Physical Plan ==" in line)
        answer = answered[:plan]
        assert len(answer) == north, answered
        assert "dynamicpruningexpression" in "\n".join(answered[plan:])

        # A query on a missing table fails clearly; the server answers the next one.
        missing = beeline(url, f"SELECT * FROM {gold}.no_such_table")
        assert missing.returncode != 0
        assert "TABLE_OR_VIEW_NOT_FOUND" in missing.stdout + missing.stderr
        assert rows(beeline(url, "SELECT 41 + 1")) == ["42"]

        # While the server holds the lake, `medallion sql` asks it (its address is in the
        # lake's lease) instead of starting Spark, which the lease would refuse.
        served = subprocess.run([*medallion_cmd(), "sql", query, "--json", "--log-level",
                                 "debug"], env=env, cwd=REPO,
                                capture_output=True, text=True, timeout=120)
        assert served.returncode == 0, served.stderr[-2000:]
        assert '"sql.served"' in served.stderr and f"localhost:{port}" in served.stderr
        served_rows = [json.loads(line) for line in served.stdout.splitlines()
                       if line.startswith("{")]
        assert [f"{r['store_id']},{r['orders']},{r['revenue']}" for r in served_rows] \
            == answer
        refused_sql = subprocess.run([*medallion_cmd(), "sql",
                                      f"SELECT * FROM {gold}.no_such_table"],
                                     env=env, cwd=REPO, capture_output=True,
                                     text=True, timeout=120)
        assert refused_sql.returncode != 0
        assert "Spark cannot run the query" in refused_sql.stderr, refused_sql.stderr
        assert "TABLE_OR_VIEW_NOT_FOUND" in refused_sql.stderr
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            _, said = server.communicate(timeout=120)
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
    # Stopped, it says so in its events and no Java stack (Hive's LLAP classes are on its class
    # path: closing a client's session no longer fails on them)
    assert server.returncode == 0, said[-3000:]
    assert '"serve.finished"' in said
    assert "\tat " not in said and "Exception" not in said, said[-3000:]

    # The same rows as `medallion sql`, once the server has released the catalog.
    started = time.monotonic()
    sql = subprocess.run([*medallion_cmd(), "sql", query, "--json"], env=env,
                         cwd=REPO, capture_output=True, text=True, timeout=900)
    assert sql.returncode == 0, sql.stderr[-2000:]
    got = [json.loads(line) for line in sql.stdout.splitlines() if line.startswith("{")]
    assert [f"{r['store_id']},{r['orders']},{r['revenue']}" for r in got] == answer, \
        (got, answer, time.monotonic() - started)
    assert got == served_rows


def running(pid: int) -> bool:
    """Whether ``pid`` runs (not our child: a zombie waiting for its reaper has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_sql_serve_starts_a_server_in_the_background_that_the_next_queries_use(
    lakehouse: Lakehouse,
) -> None:
    from pyhive import hive
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.dialects import registry

    from framework.commands import served_at
    from framework.hive_dialect import NAME, SparkHiveDialect

    port = free_port()
    env = {**lakehouse.cli_env(), "MEDALLION_SERVE_PORT": str(port)}
    gold = lakehouse.schemas["gold"]

    def sql(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*medallion_cmd(), "sql", *args, "--json"], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=600)

    # No server holds the lake: --serve starts one, detached, and answers through it
    first = sql("SELECT 41 + 1 AS answer", "--serve", "--log-level", "debug")
    assert first.returncode == 0, first.stderr[-3000:]
    assert [json.loads(line) for line in first.stdout.splitlines()] == [{"answer": 42}]
    started = re.search(r"started medallion serve \(pid (\d+)\) on localhost:(\d+)",
                        first.stderr)
    assert started is not None, first.stderr[-3000:]
    pid = int(started.group(1))
    assert int(started.group(2)) == port and '"sql.served"' in first.stderr
    assert "It holds the lake: `medallion run`" in first.stderr
    assert f"Stop it with `kill {pid}`" in first.stderr
    log = Path(re.findall(r"its log: (\S+)\)", first.stderr)[0])
    try:
        # A table and a view through a HiveServer2 client
        connection = hive.connect(host="localhost", port=port, username="analyst")
        cursor = connection.cursor()
        for statement in (f"CREATE SCHEMA {gold}",
                          f"CREATE TABLE {gold}.stores USING delta AS SELECT * FROM VALUES "
                          "(1, 'north'), (2, 'south') AS t(store_id, region)",
                          f"CREATE VIEW {gold}.north AS SELECT * FROM {gold}.stores "
                          "WHERE region = 'north'",
                          "CREATE TEMPORARY VIEW scratch AS SELECT 1 AS x"):
            cursor.execute(statement)
        # Hive's function registry loads in the server's JVM (closing a client's session
        # initializes it; without hive-llap-common it failed, and printed a Java stack)
        registry_class = "org.apache.hadoop.hive.ql.exec.FunctionRegistry"
        cursor.execute(f"SELECT reflect('java.lang.Class', 'forName', '{registry_class}')")
        assert cursor.fetchall() == [(f"class {registry_class}",)]
        connection.close()

        # SQLAlchemy lists the schema's tables by name through the package's dialect (PyHive's
        # own takes the first column of Spark's SHOW TABLES: the schema's name)
        setup = (REPO / "setup.cfg").read_text()
        assert f"{NAME} = framework.hive_dialect:{SparkHiveDialect.__name__}" in setup
        registry.register(NAME, "framework.hive_dialect", SparkHiveDialect.__name__)
        engine = create_engine(f"hive+spark://analyst@localhost:{port}/default")
        try:
            assert sorted(inspect(engine).get_table_names(schema=gold)) == ["north", "stores"]
        finally:
            engine.dispose()

        # With the server up, --serve uses it, and so does a plain `medallion sql`
        again = sql(f"SELECT count(*) AS n FROM {gold}.north", "--serve")
        assert again.returncode == 0, again.stderr[-3000:]
        assert "started medallion serve" not in again.stderr
        assert [json.loads(line) for line in again.stdout.splitlines()] == [{"n": 1}]
        served = sql(f"SELECT store_id, region FROM {gold}.stores ORDER BY store_id",
                     "--log-level", "debug")
        assert served.returncode == 0, served.stderr[-3000:]
        assert '"sql.served"' in served.stderr and f"localhost:{port}" in served.stderr
        assert [json.loads(line) for line in served.stdout.splitlines()] == [
            {"store_id": 1, "region": "north"}, {"store_id": 2, "region": "south"}]
    finally:
        # The way the message says: SIGTERM to its pid
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and running(pid):
            time.sleep(0.5)
    said = log.read_text()
    assert '"serve.finished"' in said, said[-3000:]
    assert "\tat " not in said and "Exception" not in said, said[-3000:]
    assert served_at(lakehouse.project()) is None  # the lake is free again
