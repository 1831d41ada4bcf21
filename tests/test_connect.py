"""The connect runtime: a real Spark Connect server (pyspark's own, with Delta's jars), started
once per test worker on a loopback port, and ``medallion`` commands talking to it as clients.

Clients run as subprocesses: a Spark Connect session switches pyspark's functions to Connect
for the whole process (``SPARK_CONNECT_MODE_ENABLED``), which the classic test session must
not see."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from framework.cli import main as medallion
from framework.config.model import Environment, Layer, Runtime
from framework.connect_server import ConnectServer, running, start
from framework.pruning import explain_pruning
from tests.support import (
    QUICKSTART_FILES,
    QUICKSTART_ORDERS,
    REPO,
    CliRun,
    Lakehouse,
    QuickstartLake,
    archived_files,
    bronze_spec,
    foreign_lines,
    medallion_cmd,
    silver_spec,
    source_rows_without,
    write_delta_commits,
    write_order_files,
)
from tests.test_gold import STORES, with_sales_mart

# One worker runs them all, one after the other, with the quickstart's lake the demo's test
# compares with: the server (tests/conftest.py) is then started once, not once per worker.
pytestmark = pytest.mark.xdist_group("quickstart")


@pytest.fixture
def server(connect_server: ConnectServer) -> ConnectServer:
    """The tests' Spark Connect server (tests/conftest.py)."""
    return connect_server


def on_connect(lakehouse: Lakehouse, server: ConnectServer) -> None:
    """Point the lakehouse's environment at the server."""
    lakehouse.write_env(runtime="connect", remote=server.url, spark_conf={})


def cli(lakehouse: Lakehouse, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``medallion <args>`` over Connect; its output is its own and its events, never a line
    of the server's log (that goes to the server's file)."""
    done = subprocess.run([*medallion_cmd(), *args], capture_output=True, text=True,
                          env=lakehouse.cli_env(), timeout=timeout)
    assert foreign_lines(done.stdout, done.stderr) == [], done.stderr[-3000:]
    return done


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
    from framework.session import resolved_runtime

    assert resolved_runtime(auto) is Runtime.CONNECT
    assert auto.remote_url() == "sc://localhost:15002"


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


def test_medallion_test_is_refused_where_the_server_cannot_see_the_scratch_lake(
    lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cases run on a scratch lake in a temporary folder of this machine: a Connect
    server elsewhere, or a root the server reaches only remotely, is refused before a session
    starts."""
    from tests.test_spectest import drops_zero_quantity, with_orders

    with_orders(lakehouse)
    drops_zero_quantity(lakehouse)
    expected = ("expected a local session, or a Spark Connect server on this machine (runtime "
                "connect with a local root), to run test cases on a scratch lake in a temporary "
                f"folder; found environment {lakehouse.env_name!r} of runtime connect with root ")
    refused = {
        ("sc://db.example.com:15002/;token=not-shown", str(lakehouse.root)):
            f"{str(lakehouse.root)!r} and server 'db.example.com', another machine",
        ("sc://localhost:1", "abfss://lake@account.dfs.core.windows.net/lake"):
            "'abfss://lake@account.dfs.core.windows.net/lake'"}
    for (remote, root), found in refused.items():
        lakehouse.write_env(runtime="connect", remote=remote, root=root)
        capsys.readouterr()
        assert medallion(["test", "--conf", str(lakehouse.conf), "--env",
                          lakehouse.env_name]) == 2
        err = capsys.readouterr().err
        assert f"{expected}{found}: run `medallion test` with a local environment " \
               "(--env local)" in err, err
        assert "not-shown" not in err


def test_what_travels_to_the_server_is_each_layers_small_description_of_its_batches(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    """A Connect server runs a micro-batch with the writer its query's function makes: the
    function pickles (as pyspark pickles it at start) with no session, lock or logger in it,
    for every layer's writer, and unpickled makes the same writer description again."""
    from pyspark import cloudpickle

    from bronze.job import BronzeJob
    from framework.job import RunContext
    from framework.microbatch import Outcomes, StepFunction, TableBatches
    from gold.job import WindowMerge
    from silver.batch import BatchWriter
    from silver.job import SilverJob

    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", {"source": "orders", "expectations": [
        {"name": "has_id", "rule": "order_id IS NOT NULL", "action": "quarantine"}]})
    project = lakehouse.project()
    bronze = BronzeJob(spark, project.table("orders", Layer.BRONZE), RunContext())
    bronze.prepare()
    silver = SilverJob(spark, project.table("orders", Layer.SILVER), RunContext())
    factories = [bronze.file_batches(),
                 TableBatches(BatchWriter, silver.table, range(2, 3), silver.log_context),
                 WindowMerge("/tmp/gold", ("k",), {"layer": "gold"})]
    for make in factories:
        outcomes = Outcomes(str(lakehouse.path("checkpoint")), project.env, remote=True)
        copy = cloudpickle.loads(cloudpickle.dumps(StepFunction(make, outcomes)))
        assert copy.outcomes.token == outcomes.token
        if hasattr(make, "stop"):  # (the client's stop request and store stay with it)
            assert make.stop is not None and copy.make.stop is None
            assert copy.make.storage is None
            assert replace(copy.make, stop=make.stop, storage=make.storage) == make
        else:
            assert copy.make == make


def test_a_batch_outcome_is_taken_by_its_run_only_once_and_holds_figures_only(
    tmp_path: Path, lakehouse: Lakehouse
) -> None:
    import pickle

    from bronze.filebatch import Landed
    from bronze.ledger import BatchCounts
    from framework.microbatch import Outcome, Outcomes
    from silver.batch import Refined

    env = lakehouse.project().env
    checkpoint = str(tmp_path / "checkpoint")
    earlier = Outcomes(checkpoint, env, remote=True)
    run = Outcomes(checkpoint, env, remote=True)
    assert run.take() == []  # before any batch
    earlier.put(Landed(0, counts=BatchCounts(batch_id=0)))
    assert earlier.take() == [Landed(0, counts=BatchCounts(batch_id=0))]
    earlier.put(Landed(0, counts=BatchCounts(batch_id=0)))
    for batch in (3, 1, 2):
        run.put(Refined(batch, records=batch, rule_counts={"positive": 1}))
    run.put(Outcome(4, error="expectation failed"))
    assert run.take() == [Refined(1, records=1, rule_counts={"positive": 1}),
                          Refined(2, records=2, rule_counts={"positive": 1}),
                          Refined(3, records=3, rule_counts={"positive": 1}),
                          Outcome(4, error="expectation failed")]
    assert run.take() == []  # each once, and an earlier run's removed unread
    assert list((tmp_path / "checkpoint" / "outcomes").iterdir()) == []

    class Payload:
        def __reduce__(self) -> tuple[object, ...]:
            return (print, ("ran",))

    (tmp_path / "checkpoint" / "outcomes" / "5").write_bytes(
        pickle.dumps({"token": run.token, "outcome": Payload()}))
    with pytest.raises(pickle.UnpicklingError, match=r"expected the figures of a batch, "
                                                     r"found builtins\.print"):
        run.take()

    here = Outcomes(checkpoint, env, remote=False)  # a classic session: in memory
    here.put(Refined(7))
    here.put(Refined(6))
    assert here.take() == [Refined(6), Refined(7)] and here.take() == []


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


def test_medallion_test_over_connect_passes_and_fails_as_it_does_classically(
    server: ConnectServer, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cases of tests/test_spectest.py, each table's job run on the server: a bronze file
    rescued and quarantined, a silver rule quarantining a row, a duplicate in a later batch
    dropped, a gold window; then an expected row changed fails with the classic run's lines."""
    from tests.support import cli as classic_cli
    from tests.test_spectest import (
        DEDUP,
        drops_zero_quantity,
        duplicate_in_a_later_batch,
        positive_quantity,
        rescue_and_quarantine,
        store_sales,
        ten_minutes,
        with_orders,
        with_sales,
    )

    with_orders(lakehouse, expectations=positive_quantity(), dedup=DEDUP)
    with_sales(lakehouse, "sales")
    lakehouse.add_table("gold", "store_sales", store_sales(source="sales"))
    rescue_and_quarantine(lakehouse)
    drops_zero_quantity(lakehouse)
    duplicate_in_a_later_batch(lakehouse)
    case = ten_minutes(lakehouse)
    on_connect(lakehouse, server)
    base = ["--conf", str(lakehouse.conf), "--env", lakehouse.env_name]

    done = cli(lakehouse, "test", *base, timeout=900)  # (6 job runs: minutes on a busy machine)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "PASS bronze.orders/rescue_and_quarantine (2 rows, 1 quarantined)",
        "PASS silver.orders/drops_zero_quantity (2 rows, 1 quarantined)",
        "PASS silver.orders/duplicate_in_a_later_batch (3 rows)",
        "PASS gold.store_sales/ten_minutes (3 rows)",
        "4 passed, 0 failed"]
    assert not lakehouse.path("tables").exists()  # (nothing written in the user's lake)

    expected = case / "expected.jsonl"
    expected.write_text(expected.read_text().replace('"revenue": 31', '"revenue": 30'))
    failed = [
        "FAIL gold.store_sales/ten_minutes",
        "  window_start=2026-11-01 08:00:00, window_end=2026-11-01 08:10:00, store_id=s1: "
        "revenue expected 30, found 31",
        "0 passed, 1 failed"]
    done = cli(lakehouse, "test", "gold.store_sales", *base, timeout=900)
    assert (done.returncode, done.stdout.splitlines()) == (1, failed), done.stderr[-3000:]
    lakehouse.write_env()  # the same case in a classic session, in this process
    capsys.readouterr()
    assert classic_cli(lakehouse, "test", "gold.store_sales") == 1
    assert capsys.readouterr().out.splitlines() == failed


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


def test_a_bronze_run_over_connect_ingests_archives_and_reports(
    server: ConnectServer, lakehouse: Lakehouse
) -> None:
    on_connect(lakehouse, server)
    lakehouse.add_table("bronze", "orders", bronze_spec())
    base = ["--conf", str(lakehouse.conf), "--env", lakehouse.env_name]
    assert cli(lakehouse, "init", *base).returncode == 0
    landing = lakehouse.path("landing", "orders")
    write_order_files(landing, files=3, per_file=4)
    (landing / "bad.json").write_text('{"order_id": 99, "customer_id": \n', encoding="utf-8")

    done = cli(lakehouse, "run", "bronze", *base, "--summary", str(lakehouse.base / "s.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((lakehouse.base / "s.json").read_text())
    (orders,) = summary["tables"]
    assert orders["status"] == "succeeded", orders
    assert orders["rows_out"] == 12
    assert orders["counts"]["quarantined_rows"] == 1
    assert orders["counts"]["files"] == 4

    tables = cli(lakehouse, "sql", *base, "--json",
                 f"SELECT count(*) AS n FROM {lakehouse.schemas['bronze']}.orders")
    assert [json.loads(line) for line in tables.stdout.splitlines()] == [{"n": 12}]
    # the commands that read and maintain the lake work over Connect
    status = cli(lakehouse, "status", *base)
    assert status.returncode == 0, status.stderr
    orders_line = next(line for line in status.stdout.splitlines()
                       if line.startswith(f"spark_catalog.{lakehouse.schemas['bronze']}.orders "))
    assert [c.strip() for c in orders_line.split("|")[1:3]] == ["delta", "12"]
    optimized = cli(lakehouse, "optimize", "orders", *base)
    assert optimized.returncode == 0, optimized.stderr
    assert "optimized" in optimized.stdout
    out = lakehouse.base / "report.html"
    report = cli(lakehouse, "report", *base, "--out", str(out))
    assert report.returncode == 0, report.stderr
    assert out.is_file() and "orders" in out.read_text(encoding="utf-8")


def test_a_unique_check_runs_on_the_server(server: ConnectServer, lakehouse: Lakehouse,
                                           spark: SparkSession) -> None:
    """Orders sent again in a later file: the silver batch run on the server quarantines
    them under the check's name, as a classic run does (tests/test_quality.py)."""
    on_connect(lakehouse, server)
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(
        checks=[{"unique": ["order_id"]}]))
    base = ["--conf", str(lakehouse.conf), "--env", lakehouse.env_name]
    assert cli(lakehouse, "init", *base).returncode == 0
    landing = lakehouse.path("landing", "orders")
    write_order_files(landing, files=1, per_file=4)
    first = cli(lakehouse, "run", "all", *base)
    assert first.returncode == 0, first.stdout + first.stderr[-3000:]
    write_order_files(landing, files=1, per_file=4, start=2, prefix="again")  # o2, o3 again

    done = cli(lakehouse, "run", "all", *base, "--summary", str(lakehouse.base / "s.json"))

    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    tables = {t["table"].split(".")[-2].split("_")[0]: t for t in
              json.loads((lakehouse.base / "s.json").read_text())["tables"]}
    assert tables["silver"]["counts"]["rule:unique_order_id"] == 2
    silver = lakehouse.project().table("orders", Layer.SILVER)
    ids = sorted(r[0] for r in spark.read.format("delta").load(silver.location)
                 .select("order_id").collect())
    assert ids == [f"o{i:07d}" for i in range(6)]
    quarantined = spark.read.format("delta").load(silver.companion_location("quarantine"))
    assert sorted((json.loads(r["_row"])["order_id"], list(r["_failed_rules"]))
                  for r in quarantined.collect()) == [
        ("o0000002", ["unique_order_id"]), ("o0000003", ["unique_order_id"])]


def test_a_row_held_for_its_store_is_released_once_over_connect(
    server: ConnectServer, lakehouse: Lakehouse, spark: SparkSession
) -> None:
    """A sale whose store silver.stores lacks: the batch run on the server holds it; its store
    comes, and the next run (the client's, before its query) releases it, once, as a classic
    run does (tests/test_quality.py). Bronze is written here: one Python worker per run to
    start on the server, the sales' batches'."""
    on_connect(lakehouse, server)
    stores, sales = "store_id STRING, name STRING", \
        "order_id STRING, store_id STRING, amount INT, event_time TIMESTAMP"
    lakehouse.add_table("bronze", "stores", bronze_spec(schema=stores, path="landing/stores"))
    lakehouse.add_table("silver", "stores", {"source": "stores"})
    lakehouse.add_table("bronze", "sales", bronze_spec(schema=sales, path="landing/sales"))
    lakehouse.add_table("silver", "sales", {"source": "sales", "checks": [{
        "references": {"column": "store_id", "table": "stores"}, "action": "hold"}]})
    base = ["--conf", str(lakehouse.conf), "--env", lakehouse.env_name]
    project = lakehouse.project()
    bronze_stores = project.table("stores", Layer.BRONZE).location
    write_delta_commits(spark, bronze_stores, [[("s1", "one")]], stores)
    at = datetime(2026, 11, 1, 10)
    write_delta_commits(spark, project.table("sales", Layer.BRONZE).location, [
        [("a", "s1", 1, at), ("b", "s2", 1, at), ("c", "s2", 1, at)]], sales)
    silver = project.table("sales", Layer.SILVER)

    def run() -> dict[str, Any]:
        done = cli(lakehouse, "run", "silver", *base, "--summary",
                   str(lakehouse.base / "s.json"))
        assert done.returncode == 0, done.stdout + done.stderr[-3000:]
        return next(t for t in json.loads((lakehouse.base / "s.json").read_text())["tables"]
                    if t["table"] == silver.full_name)

    def rows(location: str) -> list[str]:
        return sorted(r[0] for r in spark.read.format("delta").load(location)
                      .select("order_id").collect())

    first = run()
    assert (first["rows_out"], first["counts"]["held_rows"]) == (1, 2), first
    assert rows(silver.location) == ["a"]
    assert rows(silver.companion_location("held")) == ["b", "c"]
    write_delta_commits(spark, bronze_stores, [[("s2", "two")]], stores)

    second = run()

    assert second["counts"]["released_rows"] == 2, second
    assert rows(silver.location) == ["a", "b", "c"]
    assert rows(silver.companion_location("held")) == []


@pytest.mark.slow
def test_a_backfill_and_refreshes_over_connect_write_what_they_write_classically(
    server: ConnectServer, spark: SparkSession, tmp_path: Path
) -> None:
    """One lake made twice, classically (in this process) and over Connect: a run, a folder
    backfilled in place, a silver expression changed and refreshed downstream, then bronze
    refreshed from its archive. Every table the same, the ingestion columns aside."""
    from tests.support import cli as classic_cli
    from tests.test_refresh import lake, silver

    lakes = {"classic": lake(tmp_path / "classic"), "connect": lake(tmp_path / "connect")}
    on_connect(lakes["connect"], server)
    for name, lakehouse in lakes.items():
        history = lakehouse.base / "history"
        write_order_files(history, files=2, per_file=3, start=100)
        steps = [["run", "all"], ["backfill", "orders", "--from", str(history)],
                 ["refresh", "silver.orders", "--downstream"],
                 ["refresh", "bronze.orders", "--downstream"]]
        for step in steps:
            if step[0] == "refresh" and step[1] == "silver.orders":
                lakehouse.add_table("silver", "orders", silver("quantity * 3"))
            if name == "classic":
                assert classic_cli(lakehouse, *step) == 0, step
            else:
                done = cli(lakehouse, *step, "--conf", str(lakehouse.conf), "--env",
                           lakehouse.env_name)
                assert done.returncode == 0, (step, done.stdout[-3000:], done.stderr[-3000:])
        assert not lakehouse.path("_refresh", "journal").exists()  # (both refreshes done)

    def table(lakehouse: Lakehouse, layer: str, name: str) -> Any:
        df = spark.read.format("delta").load(str(lakehouse.path("tables", layer, name)))
        if name.endswith("_files"):
            return df.select(F.element_at(F.split("path", "/"), -1).alias("file"), "batch_id",
                             "rows", "good_rows", "quarantined_rows", "status", "ingestion")
        return source_rows_without(df, {"_source_file", *WHEN_AND_WHERE} - {"_batch_id"}).drop(
            "_source_file", *(WHEN_AND_WHERE - {"_batch_id"}))

    compared = [("bronze", "orders"), ("bronze", "orders_files"), ("silver", "orders"),
                ("silver", "orders_quarantine"), ("gold", "customer_sales")]
    for layer, name in compared:
        expected = table(lakes["classic"], layer, name)
        assert expected.count() > 0, (layer, name)
        assert_df_equality(table(lakes["connect"], layer, name), expected, ignore_row_order=True,
                           ignore_nullable=True, ignore_metadata=True)
    ledger = table(lakes["connect"], "bronze", "orders_files")
    assert sorted(str(r["ingestion"]) for r in ledger.collect()) == ["refresh"] * 5
    silver_rows = spark.read.format("delta").load(
        str(lakes["connect"].path("tables", "silver", "orders")))
    assert silver_rows.where("amount <> quantity * 3").count() == 0
    assert silver_rows.where("order_id LIKE '%10_'").count() > 0  # backfilled orders


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


# ---------------------------------------------------------------------- the demo, both ways
# Columns that say when, where or in which batch a row was read: the only ones allowed to
# differ between two runs of one feed.
WHEN_AND_WHERE = {"_file_modification_time", "_ingested_at", "_batch_id", "batch_id",
                  "modification_time", "ingested_at", "updated_at", "_quarantined_at",
                  "recorded_at"}


def _medallion(conf: Path, env: str, root: Path, *args: str) -> str:
    """``medallion ARGS --env ENV`` on the lake at ``root`` with the configuration ``conf``;
    its output, once it has exited 0."""
    # (no SPARK_REMOTE or Connect mode from outside; the test JVMs' settings, tests/conftest.py)
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(("MEDALLION_", "SPARK_")) or k == "SPARK_SUBMIT_OPTS"}
    environment.update(MEDALLION_ROOT=str(root), MEDALLION_CONF=str(conf))
    done = subprocess.run([*medallion_cmd(), *args, "--env", env], capture_output=True,
                          text=True, env=environment, timeout=1500)
    assert done.returncode == 0, f"{env}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def _demo(conf: Path, env: str, root: Path, orders: int, files: int) -> tuple[dict, str]:
    summary = root.parent / f"{root.name}.json"
    out = _medallion(conf, env, root, "demo", "--orders", str(orders), "--files", str(files),
                     "--summary", str(summary))
    return json.loads(summary.read_text()), out


def _status_lines(out: str) -> list[str]:
    """The table lines of ``medallion status``: table, kind, rows, version, last batch and the
    backlog of each."""
    return [line for line in out.splitlines() if line.startswith("spark_catalog.")]


def _report_figures(out: str) -> str:
    """What ``medallion report`` says it wrote: tables, failures and plots (not the batches:
    the classic lake's history also holds the quickstart's second demo run)."""
    return out.split(" batches of ", 1)[1]


def _tables(spark: SparkSession, root: Path) -> dict[str, Any]:
    """Every Delta table the demo wrote (not the run history), with the root in its text
    columns replaced, and without the columns of :data:`WHEN_AND_WHERE`."""
    tables = {}
    for log in sorted((root / "tables").rglob("_delta_log")):
        name = str(log.parent.relative_to(root / "tables"))
        if name.startswith("ops"):
            continue
        df = source_rows_without(spark.read.format("delta").load(str(log.parent)),
                                 WHEN_AND_WHERE)
        df = df.drop(*[c for c in df.columns if c in WHEN_AND_WHERE])
        for field in df.schema.fields:
            if field.dataType.simpleString() == "string":
                df = df.withColumn(field.name, F.replace(F.col(field.name), F.lit(str(root)),
                                                         F.lit("<root>")))
        tables[name] = df
    return tables


def _files(root: Path, folder: str) -> list[str]:
    """The files under ``root/folder``, the root in their names replaced; the archive's
    manifests are named by their time, so only their number counts."""
    names = [str(p.relative_to(root / folder)).replace(str(root).lstrip("/"), "<root>")
             for p in (root / folder).rglob("*") if p.is_file()]
    return sorted(re.sub(r"_manifests/\d+", "_manifests/<time>", n) for n in names)


@pytest.mark.slow
def test_the_demo_over_connect_writes_what_the_classic_demo_writes(
    server: ConnectServer, spark: SparkSession, quickstart_lake: QuickstartLake, tmp_path: Path
) -> None:
    # The classic demo: the README quickstart's first run (tests/conftest.py), same feed.
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    (conf / "environments" / "connect.yaml").write_text(
        "runtime: connect\nroot: ${MEDALLION_ROOT}\n"
        f"remote: {server.url}\ncatalog: spark_catalog\nshuffle_partitions: 4\n",
        encoding="utf-8")
    classic, classic_root = quickstart_lake.first_summary, quickstart_lake.root
    over_connect, out = _demo(conf, "connect", tmp_path / "connect", orders=QUICKSTART_ORDERS,
                              files=QUICKSTART_FILES)

    # the same figures: rows, quarantined, duplicates and late rows dropped, files archived
    assert over_connect["feed"] == classic["feed"]
    assert over_connect["layers"] == classic["layers"]
    assert over_connect["layers"]["silver"]["orders"]["late_rows_dropped"] > 0
    assert over_connect["layers"]["silver"]["orders"]["duplicates_dropped"] > 0
    assert over_connect["layers"]["bronze"]["orders"]["quarantined"] > 0
    assert over_connect["query"]["rows"] == classic["query"]["rows"]
    assert over_connect["segments"]["rows"] == classic["segments"]["rows"]
    scans = {s["table"]: (s["partitions_read"], s["partitions_total"])
             for s in over_connect["query"]["pruning"]["scans"]}
    assert scans["spark_catalog.gold.store_sales"] == (4, 13)
    assert "read 4 of 13 partitions" in out

    # the same rows in every table: bronze, quarantines, the file ledger, silver, gold
    expected, actual = _tables(spark, classic_root), _tables(spark, tmp_path / "connect")
    assert sorted(actual) == sorted(expected)
    assert {"bronze/orders", "bronze/orders_quarantine", "bronze/orders_files",
            "silver/orders", "silver/customers", "silver/customers_changes",
            "gold/store_sales", "gold/segment_sales"} <= set(actual)
    for name, df in expected.items():
        assert_df_equality(actual[name], df, ignore_row_order=True, ignore_nullable=True,
                           ignore_metadata=True, underline_cells=True)
    # the same files archived and quarantined, none left in landing
    for folder in ("archive", "_quarantine", "landing"):
        assert _files(tmp_path / "connect", folder) == _files(classic_root, folder)

    # status and the report over Connect say what they say classically of the same lake
    status = _status_lines(_medallion(conf, "connect", tmp_path / "connect", "status"))
    assert len(status) >= 8
    assert status == _status_lines(quickstart_lake.outputs[".venv/bin/medallion status"])
    report = {name: _medallion(conf, env, root, "report", "--out", str(tmp_path / f"{name}.html"))
              for name, env, root in (("connect", "connect", tmp_path / "connect"),
                                      ("classic", "local", classic_root))}
    assert _report_figures(report["connect"]) == _report_figures(report["classic"])
    assert "0 failure(s)" in report["connect"]


# ---------------------------------------------------------------------- kills
def _count(lakehouse: Lakehouse, base: list[str], query: str) -> list[dict[str, Any]]:
    done = cli(lakehouse, "sql", *base, "--json", query)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _assert_ingested_once(lakehouse: Lakehouse, base: list[str], ids: list[str],
                          files: int) -> None:
    bronze = lakehouse.schemas["bronze"]
    assert _count(lakehouse, base, f"SELECT count(*) AS n, count(DISTINCT order_id) AS ids "
                                   f"FROM {bronze}.orders") == [{"n": len(ids), "ids": len(ids)}]
    assert _count(lakehouse, base, f"SELECT count(*) AS n, count(DISTINCT path) AS paths, "
                                   f"sum(rows) AS rows FROM {bronze}.orders_files "
                                   "WHERE status = 'archived'") == \
        [{"n": files, "paths": files, "rows": len(ids)}]
    assert not list(lakehouse.path("landing", "orders").glob("*.json"))
    assert len(archived_files(lakehouse.path("archive", "orders"))) == files


@pytest.mark.slow
def test_a_client_killed_mid_batch_then_a_rerun_loses_and_doubles_nothing(
    server: ConnectServer, lakehouse: Lakehouse
) -> None:
    lakehouse.write_env(runtime="connect", remote=server.url, spark_conf={},
                        processing_interval="2 seconds")
    lakehouse.add_table("bronze", "orders", bronze_spec(max_files_per_trigger=1))
    base = ["--conf", str(lakehouse.conf), "--env", lakehouse.env_name]
    assert cli(lakehouse, "init", *base).returncode == 0
    ids = write_order_files(lakehouse.path("landing", "orders"), files=12, per_file=20)

    # a processing-time trigger: the query would never end by itself
    run = CliRun(["run", "bronze", "--continuous", *base], lakehouse.cli_env())
    run.wait_for("stream.batch.progress", timeout=600, batch_id=1)  # batch 2 under way
    os.killpg(run.proc.pid, signal.SIGKILL)
    run.proc.wait()

    # the killed client's query goes on on the server; the rerun stops it and takes over
    again = cli(lakehouse, "run", "bronze", *base, "--log-format", "json", timeout=900)
    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    assert '"event": "connect.orphan.stopped"' in again.stderr
    _assert_ingested_once(lakehouse, base, ids, files=12)


@pytest.mark.slow
def test_a_server_killed_mid_batch_then_a_rerun_loses_and_doubles_nothing(
    lakehouse: Lakehouse, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = str(tmp_path_factory.mktemp("killed-server"))
    first = start(root)
    try:
        lakehouse.write_env(runtime="connect", remote=first.url, spark_conf={})
        lakehouse.add_table("bronze", "orders", bronze_spec(max_files_per_trigger=1))
        base = ["--conf", str(lakehouse.conf), "--env", lakehouse.env_name]
        assert cli(lakehouse, "init", *base).returncode == 0
        ids = write_order_files(lakehouse.path("landing", "orders"), files=4, per_file=20)
        run = CliRun(["run", "bronze", *base], lakehouse.cli_env())
        run.wait_for("stream.batch.progress", timeout=600, batch_id=1)
        first.kill()
    finally:
        first.stop()

    # restarted where it was: the same port and root (its catalog), a new session
    with running(root, first.port):
        code, _ = run.finish()
        assert code == 1  # the killed server's client fails, and says so
        assert any("expected the Spark Connect session to last the run, found it gone" in line
                   for line in run.lines), "".join(run.lines[-20:])
        again = cli(lakehouse, "run", "bronze", *base, timeout=900)
        assert again.returncode == 0, again.stdout + again.stderr[-3000:]
        _assert_ingested_once(lakehouse, base, ids, files=4)
