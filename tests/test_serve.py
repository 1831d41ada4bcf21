"""``medallion serve``: a real HiveServer2 client (Spark's own beeline, from pyspark's jars)
against the Thrift JDBC/ODBC server over the lakehouse catalog, in its own JVM: the gold
tables a real run built (the demo's configuration, on a small feed), with their comments."""

from __future__ import annotations

import json
import os
import re
import shutil
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
    # The demo's tables, built by a real run (its own driver and catalog, as a job's)
    shutil.copytree(REPO / "conf" / "tables", lakehouse.conf / "tables")
    common = ["--conf", str(lakehouse.conf), "--env", lakehouse.env_name]
    assert main(["demo", "--generate-only", "--orders", "300", "--files", "30", *common]) == 0
    built = subprocess.run([*medallion_cmd(), "run", "all"], env=lakehouse.cli_env(), cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    capsys.readouterr()

    port = free_port()
    gold = lakehouse.schemas["gold"]
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
        assert len(answer) == 3, answered  # the demo's 12 stores, 3 in the north
        assert "dynamicpruningexpression" in "\n".join(answered[plan:])

        # A query on a missing table fails clearly; the server answers the next one.
        missing = beeline(url, f"SELECT * FROM {gold}.no_such_table")
        assert missing.returncode != 0
        assert "TABLE_OR_VIEW_NOT_FOUND" in missing.stdout + missing.stderr
        assert rows(beeline(url, "SELECT 41 + 1")) == ["42"]

        # While the server holds the lake, `medallion sql` asks it (its address is in the
        # lake's lease) instead of starting Spark, which the lease would refuse.
        served = subprocess.run([*medallion_cmd(), "sql", query, "--json", "--log-level",
                                 "debug"], env=lakehouse.cli_env(), cwd=REPO,
                                capture_output=True, text=True, timeout=120)
        assert served.returncode == 0, served.stderr[-2000:]
        assert '"sql.served"' in served.stderr and f"localhost:{port}" in served.stderr
        served_rows = [json.loads(line) for line in served.stdout.splitlines()
                       if line.startswith("{")]
        assert [f"{r['store_id']},{r['orders']},{r['revenue']}" for r in served_rows] \
            == answer
        refused_sql = subprocess.run([*medallion_cmd(), "sql",
                                      f"SELECT * FROM {gold}.no_such_table"],
                                     env=lakehouse.cli_env(), cwd=REPO, capture_output=True,
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
    sql = subprocess.run([*medallion_cmd(), "sql", query, "--json"], env=lakehouse.cli_env(),
                         cwd=REPO, capture_output=True, text=True, timeout=900)
    assert sql.returncode == 0, sql.stderr[-2000:]
    got = [json.loads(line) for line in sql.stdout.splitlines() if line.startswith("{")]
    assert [f"{r['store_id']},{r['orders']},{r['revenue']}" for r in got] == answer, \
        (got, answer, time.monotonic() - started)
    assert got == served_rows

