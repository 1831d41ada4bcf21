"""``medallion serve``: a real HiveServer2 client (Spark's own beeline, from pyspark's jars)
against the Thrift JDBC/ODBC server over the lakehouse catalog, in its own JVM."""

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

from framework.cli import main
from tests.kafka_broker import free_port
from tests.support import REPO, Lakehouse, medallion_cmd

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


def test_serve_answers_jdbc_clients_over_the_lakehouse_catalog(
    lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    gold, silver = lakehouse.schemas["gold"], lakehouse.schemas["silver"]
    server = subprocess.Popen([*medallion_cmd(), "serve", "--port", str(port)],
                              env=lakehouse.cli_env(), cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert server.stdout is not None
        banner = server.stdout.readline()
        assert f"jdbc:hive2://localhost:{port}/default" in banner, banner + (
            server.stderr.read() if server.stderr else "")
        url = f"jdbc:hive2://localhost:{port}/default"

        # A second server on the same port, and one open to all without authentication, are
        # refused before anything starts.
        common = ["--conf", str(lakehouse.conf), "--env", lakehouse.env_name]
        assert main(["serve", "--port", str(port), *common]) == 2
        assert main(["serve", "--host", "0.0.0.0", *common]) == 2
        refused = capsys.readouterr().err
        assert f"expected port {port} on localhost free for the server, found it in use" \
            in refused
        assert "expected authentication for a server listening on 0.0.0.0" in refused

        # A fact partitioned by store, a dimension, a mart view: through the server itself.
        fact = lakehouse.path("tables", "gold", "store_sales")
        rows(beeline(url, f"""
            CREATE SCHEMA {silver}; CREATE SCHEMA {gold};
            CREATE TABLE {gold}.store_sales (store_id STRING, revenue DOUBLE)
              USING DELTA PARTITIONED BY (store_id) LOCATION '{fact}'
              COMMENT 'Revenue per store';
            INSERT INTO {gold}.store_sales
              SELECT concat('s', id % 20), id FROM range(200);
            CREATE TABLE {silver}.stores USING DELTA COMMENT 'Stores'
              AS SELECT concat('s', id) AS store_id,
                        IF(id % 10 = 0, 'north', 'south') AS region FROM range(20);
            CREATE VIEW {gold}.regional_sales COMMENT 'Revenue with the store region' AS
              SELECT f.*, d.region FROM {gold}.store_sales f JOIN {silver}.stores d
              ON f.store_id = d.store_id;"""))

        listed = rows(beeline(url, f"SHOW TABLES IN {gold}; "
                                   f"DESCRIBE TABLE EXTENDED {gold}.store_sales"))
        assert sorted(line.split(",")[1] for line in listed if line.startswith(f"{gold},")) \
            == ["regional_sales", "store_sales"]
        assert any(line.startswith("Comment,Revenue per store") for line in listed)

        query = (f"SELECT store_id, sum(revenue) AS revenue FROM {gold}.regional_sales "
                 "WHERE region = 'north' GROUP BY store_id ORDER BY store_id")
        answered = rows(beeline(url, f"{query}; EXPLAIN {query}"))
        answer = answered[:2]
        assert answer == ["s0,900.0", "s10,1000.0"]
        assert "dynamicpruningexpression" in "\n".join(answered[2:])

        # A query on a missing table fails clearly; the server answers the next one.
        missing = beeline(url, f"SELECT * FROM {gold}.no_such_table")
        assert missing.returncode != 0
        assert "TABLE_OR_VIEW_NOT_FOUND" in missing.stdout + missing.stderr
        assert rows(beeline(url, "SELECT 41 + 1")) == ["42"]
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=120)
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
    assert code == 0

    # The same rows as `medallion sql`, once the server has released the catalog.
    started = time.monotonic()
    sql = subprocess.run([*medallion_cmd(), "sql", query, "--json"], env=lakehouse.cli_env(),
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert sql.returncode == 0, sql.stderr[-2000:]
    got = [json.loads(line) for line in sql.stdout.splitlines() if line.startswith("{")]
    assert [f"{r['store_id']},{r['revenue']}" for r in got] == answer, time.monotonic() - started
