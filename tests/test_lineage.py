"""OpenLineage run events (framework.lineage): every event of a run valid against the
specification's JSON schemas (tests/openlineage/, see its VERSION), received by a real HTTP
server and a real Kafka broker; the column lineage of a silver table; a failed run's FAIL
event; a transport that cannot send never fails the run."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from structlog.testing import capture_logs

from framework.config.model import Layer
from framework.connect_server import ConnectServer
from framework.job import RunContext, RunStatus, TableRunSummary
from framework.lineage import columns_read, dataset_name
from silver.job import SilverJob
from tests.kafka_broker import Broker
from tests.openlineage_events import validate
from tests.support import Lakehouse, bronze_spec, silver_spec, write_delta_commits

BASE = datetime(2026, 11, 1, 8, 0, 0)
TOKEN = "lineage-token-5f2a9c"


# ---------------------------------------------------------------------- the tables
def row(key: str, quantity: int, minutes: int, customer: str | None = "c1") -> tuple[Any, ...]:
    return (key, customer, quantity, BASE + timedelta(minutes=minutes), 0)


COLUMNS = [{"name": "order_id"}, {"name": "customer", "from": "customer_id"},
           {"name": "quantity"},
           {"name": "amount", "expr": "quantity * 2.5", "type": "decimal(12,2)"},
           {"name": "label", "expr": "concat(coalesce(customer_id, 'none'), '-', order_id)"},
           {"name": "event_time"}]


def setup(lakehouse: Lakehouse, transport: dict[str, Any], **spec: Any) -> str:
    lakehouse.write_env(lineage={"transport": transport})
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(
        columns=COLUMNS,
        expectations=[{"name": "positive_quantity", "rule": "quantity > 0",
                       "action": "quarantine"}],
        checks=[{"unique": ["order_id"], "action": "quarantine"}], **spec))
    return lakehouse.project().table("orders", Layer.BRONZE).location


def run(spark: SparkSession, lakehouse: Lakehouse) -> TableRunSummary:
    return SilverJob(spark, lakehouse.project().table("orders", Layer.SILVER),
                     RunContext()).run()


def file_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


# ---------------------------------------------------------------------- tests
def test_columns_read_by_an_expression_parsed_as_spark_sql() -> None:
    assert columns_read("quantity * unit_price") == ["quantity", "unit_price"]
    assert columns_read("to_date(event_time)") == ["event_time"]
    assert columns_read("`order id`") == ["order id"]
    assert columns_read("CASE WHEN a > 0 THEN b ELSE coalesce(c, a) END") == ["a", "b", "c"]
    assert columns_read("current_timestamp()") == []
    assert dataset_name("/lake/tables/silver/orders") == ("file", "/lake/tables/silver/orders")
    assert dataset_name("file:/lake/t") == ("file", "/lake/t")
    assert dataset_name("hdfs://nn:8020/lake/t") == ("hdfs://nn:8020", "/lake/t")
    assert dataset_name("abfss://c@acct.dfs.core.windows.net/lake/t") == (
        "abfss://c@acct.dfs.core.windows.net", "/lake/t")


def test_a_gold_aggregates_column_lineage_is_its_window_keys_and_expressions() -> None:
    from framework.config.loader import load_project
    from framework.lineage import column_lineage

    project = load_project(Path(__file__).parents[1] / "conf", "local")
    spec = project.table("store_sales", Layer.GOLD).spec
    assert column_lineage(spec.column_origins() or {}) == {
        "window_start": ["event_time"], "window_end": ["event_time"],
        "window_date": ["event_time"], "store_id": ["store_id"], "orders": [],
        "items": ["quantity"], "revenue": ["amount"]}


def test_a_silver_run_sends_start_and_complete_with_its_datasets_lineage_and_checks(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path
) -> None:
    """File transport: a START then a COMPLETE, valid; the datasets by location and catalog
    name; each column and the input columns its expression reads; rules with their counts;
    the output's rows, bytes and files."""
    events_file = tmp_path / "events.jsonl"
    bronze = setup(lakehouse, {"type": "file", "log_file_path": str(events_file),
                               "append": True})
    write_delta_commits(spark, bronze, [
        [row("o1", 1, 0), row("o2", 0, 1), row("o3", 2, 2, customer=None)],
        [row("o1", 3, 3), row("o4", 4, 4)]])
    summary = run(spark, lakehouse)
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    assert summary.rows_out == 3 and "lineage_emit_failed" not in summary.counts

    events = file_events(events_file)
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    for event in events:
        validate(event)
    start, complete = events
    project = lakehouse.project()
    silver = project.table("orders", Layer.SILVER)
    assert start["run"]["runId"] == complete["run"]["runId"]
    assert complete["job"]["namespace"] == "test"
    assert complete["job"]["name"] == silver.full_name
    assert complete["job"]["facets"]["jobType"]["processingType"] == "BATCH"
    parent = complete["run"]["facets"]["parent"]
    assert (parent["job"]["namespace"], parent["job"]["name"]) == ("test", "run")
    assert complete["run"]["facets"]["processing_engine"]["version"] == spark.version

    [source] = complete["inputs"]
    assert (source["namespace"], source["name"]) == ("file", bronze)
    assert source["facets"]["symlinks"]["identifiers"] == [
        {"namespace": "test.catalog", "name": project.table("orders", Layer.BRONZE).full_name,
         "type": "TABLE"}]
    assert [f["name"] for f in source["facets"]["schema"]["fields"]] == [
        "order_id", "customer_id", "quantity", "event_time", "_batch_id"]
    assertions = {a["name"]: (a["assertion"], a["success"], a["actual"], a["severity"])
                  for a in source["inputFacets"]["dataQualityAssertions"]["assertions"]}
    assert assertions == {"positive_quantity": ("expectation", False, "1", "quarantine"),
                          "unique_order_id": ("unique", False, "1", "quarantine")}
    assert source["inputFacets"]["dataQualityMetrics"]["rowCount"] == 5

    [output] = complete["outputs"]
    assert (output["namespace"], output["name"]) == ("file", silver.location)
    assert output["facets"]["symlinks"]["identifiers"][0]["name"] == silver.full_name
    assert [f["name"] for f in output["facets"]["schema"]["fields"]] == [
        c["name"] for c in COLUMNS]
    lineage = {column: [f["field"] for f in fields["inputFields"]]
               for column, fields in output["facets"]["columnLineage"]["fields"].items()}
    assert lineage == {"order_id": ["order_id"], "customer": ["customer_id"],
                       "quantity": ["quantity"], "amount": ["quantity"],
                       "label": ["customer_id", "order_id"], "event_time": ["event_time"]}
    assert {f["name"] for fields in output["facets"]["columnLineage"]["fields"].values()
            for f in fields["inputFields"]} == {bronze}
    assert [f["field"] for f in output["facets"]["columnLineage"]["dataset"]] == ["quantity"]
    stats = output["outputFacets"]["outputStatistics"]
    files = sum(1 for p in Path(silver.location).glob("*.parquet"))
    size = sum(p.stat().st_size for p in Path(silver.location).glob("*.parquet"))
    assert (stats["rowCount"], stats["fileCount"], stats["size"]) == (3, files, size)
    assert "outputStatistics" not in start["outputs"][0].get("outputFacets", {})


def test_a_failing_run_sends_fail_with_its_error_message(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path
) -> None:
    events_file = tmp_path / "events.jsonl"
    bronze = setup(lakehouse, {"type": "file", "log_file_path": str(events_file),
                               "append": True})
    lakehouse.add_table("silver", "orders", silver_spec(
        columns=COLUMNS, expectations=[{"name": "known_customer",
                                        "rule": "customer IS NOT NULL", "action": "fail"}]))
    write_delta_commits(spark, bronze, [[row("o1", 1, 0, customer=None)]])
    summary = run(spark, lakehouse)
    assert summary.status is RunStatus.FAILED and summary.error

    events = file_events(events_file)
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    for event in events:
        validate(event)
    error = events[1]["run"]["facets"]["errorMessage"]
    assert error["message"] == summary.error
    assert "known_customer" in error["message"]
    assert error["programmingLanguage"] == "python"
    [output] = events[1]["outputs"]
    assert [(f["field"], f["transformations"][0]["subtype"])
            for f in output["facets"]["columnLineage"]["dataset"]] == [("customer_id", "FILTER")]


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, str, dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers.get("Authorization", ""),
                              json.loads(body)))
        self.send_response(201)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_endpoint() -> Iterator[tuple[str, list[tuple[str, str, dict[str, Any]]]]]:
    received: list[tuple[str, str, dict[str, Any]]] = []
    handler = type("Handler", (_Collector,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def test_events_reach_an_http_endpoint_with_the_token_never_logged(
    spark: SparkSession, lakehouse: Lakehouse, monkeypatch: pytest.MonkeyPatch,
    http_endpoint: tuple[str, list[tuple[str, str, dict[str, Any]]]],
) -> None:
    url, received = http_endpoint
    monkeypatch.setenv("LINEAGE_TOKEN", TOKEN)
    bronze = setup(lakehouse, {"type": "http", "url": url,
                               "auth": {"type": "api_key", "apiKey": "${LINEAGE_TOKEN}"}})
    write_delta_commits(spark, bronze, [[row("o1", 1, 0), row("o2", 2, 1)]])
    with capture_logs() as logs:
        summary = run(spark, lakehouse)
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    assert [(path, auth, body["eventType"]) for path, auth, body in received] == [
        ("/api/v1/lineage", f"Bearer {TOKEN}", "START"),
        ("/api/v1/lineage", f"Bearer {TOKEN}", "COMPLETE")]
    for _, _, body in received:
        validate(body)
    assert TOKEN not in json.dumps(logs, default=str)
    assert TOKEN not in repr(lakehouse.project().env)


def test_a_transport_that_cannot_send_never_fails_the_run(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    """An HTTP transport to a closed port: the run succeeds, each event's failure is logged as
    a warning and counted."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bronze = setup(lakehouse, {"type": "http", "url": f"http://127.0.0.1:{port}",
                               "timeout": 2, "retry": {"total": 0}})
    write_delta_commits(spark, bronze, [[row("o1", 1, 0), row("o2", 2, 1)]])
    with capture_logs() as logs:
        summary = run(spark, lakehouse)
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    assert summary.rows_out == 2
    assert summary.counts["lineage_emit_failed"] == 2
    failed = [e for e in logs if e["event"] == "lineage.emit_failed"]
    assert [(e["log_level"], e["event_type"], e["transport"], e["failures"]) for e in failed] \
        == [("warning", "START", "http", 1), ("warning", "COMPLETE", "http", 2)]
    assert all("ConnectionError" in e["error"] for e in failed)
    finished = [e for e in logs if e["event"] == "job.finished"]
    assert finished[0]["counts"]["lineage_emit_failed"] == 2


@pytest.mark.xdist_group("kafka")  # the broker's worker
def test_events_reach_a_kafka_topic(
    spark: SparkSession, lakehouse: Lakehouse, broker: Broker
) -> None:
    from confluent_kafka import Consumer

    bronze = setup(lakehouse, {"type": "kafka", "topic": "lineage",
                               "config": {"bootstrap.servers": broker.bootstrap}})
    write_delta_commits(spark, bronze, [[row("o1", 1, 0)]])
    summary = run(spark, lakehouse)
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    assert "lineage_emit_failed" not in summary.counts
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lineage-test",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["lineage"])
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while len(events) < 2 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            events.append(json.loads(message.value()))
    consumer.close()
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    for event in events:
        validate(event)
    assert events[1]["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 1


def test_a_feeds_topics_are_its_inputs(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path
) -> None:
    """A bronze table fed by Kafka (or Event Hubs, through its Kafka endpoint) names its topics
    as its inputs, as OpenLineage names Kafka's datasets: ``kafka://<first server>``, the
    topic."""
    from framework.lineage import TableLineage
    from framework.logging import get_logger

    events_file = tmp_path / "events.jsonl"
    lakehouse.write_env(lineage={"transport": {"type": "file", "append": True,
                                               "log_file_path": str(events_file)}})
    lakehouse.add_table("bronze", "orders", {
        "description": "orders from Kafka",
        "source": {"format": "kafka", "bootstrap_servers": "broker-1:9092,broker-2:9092",
                   "topics": ["orders", "orders-eu"], "schema": "order_id STRING"}})
    table = lakehouse.project().table("orders", Layer.BRONZE)
    lineage = TableLineage.open(spark, table, "run-1", None, False, get_logger())
    assert lineage is not None
    lineage.started()
    (event,) = file_events(events_file)
    validate(event)
    assert [(i["namespace"], i["name"]) for i in event["inputs"]] == [
        ("kafka://broker-1:9092", "orders"), ("kafka://broker-1:9092", "orders-eu")]


def test_no_lineage_section_sends_nothing(spark: SparkSession, lakehouse: Lakehouse) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(columns=COLUMNS))
    assert lakehouse.project().env.lineage is None
    bronze = lakehouse.project().table("orders", Layer.BRONZE).location
    write_delta_commits(spark, bronze, [[row("o1", 1, 0)]])
    with capture_logs() as logs:
        summary = run(spark, lakehouse)
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    assert not [e for e in logs if str(e["event"]).startswith("lineage.")]


def test_a_refresh_sends_its_own_run_the_parent_of_its_tables(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path
) -> None:
    from framework.lineage import refresh_run_id
    from framework.refresh import Refresh, plan_refresh
    from framework.runner import run_tables

    events_file = tmp_path / "events.jsonl"
    bronze = setup(lakehouse, {"type": "file", "log_file_path": str(events_file),
                               "append": True})
    write_delta_commits(spark, bronze, [[row("o1", 1, 0), row("o2", 2, 1)]])
    assert run(spark, lakehouse).status is RunStatus.SUCCEEDED
    events_file.unlink()
    project = lakehouse.project()
    plan = plan_refresh(spark, project, ["silver.orders"], downstream=True)
    with capture_logs() as logs:
        summary = Refresh(spark, project, RunContext(), run_tables).begin(plan)
    assert summary.status is RunStatus.SUCCEEDED
    [planned] = [e for e in logs if e["event"] == "refresh.planned"]

    events = file_events(events_file)
    for event in events:
        validate(event)
    assert [(e["job"]["name"], e["eventType"]) for e in events] == [
        ("refresh", "START"), (project.table("orders", Layer.SILVER).full_name, "START"),
        (project.table("orders", Layer.SILVER).full_name, "COMPLETE"), ("refresh", "COMPLETE")]
    refresh_start, table_start, table_end, refresh_end = events
    assert refresh_start["run"]["runId"] == refresh_end["run"]["runId"]
    op = refresh_start["run"]["runId"]
    for event in (table_start, table_end):
        parent = event["run"]["facets"]["parent"]
        assert (parent["run"]["runId"], parent["job"]["name"]) == (op, "refresh")
    assert op == refresh_run_id(project.env, planned["op"])
    silver = project.table("orders", Layer.SILVER)
    assert [(o["name"], o["facets"]["symlinks"]["identifiers"][0]["name"])
            for o in refresh_end["outputs"]] == [(silver.location, silver.full_name)]
    assert table_end["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 2


def test_the_spark_listener_settings_carry_the_transport_and_spark_masks_its_token(
    lakehouse: Lakehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    import re

    from framework.session import OPENLINEAGE_LISTENER, lineage_listener_conf, submit_conf

    monkeypatch.setenv("LINEAGE_TOKEN", TOKEN)
    lakehouse.write_env(lineage={
        "transport": {"type": "http", "url": "http://marquez:5000", "compression": "gzip",
                      "auth": {"type": "api_key", "apiKey": "${LINEAGE_TOKEN}"}},
        "namespace": "retail", "spark_listener": True})
    env = lakehouse.project().env
    assert lineage_listener_conf(env) == {
        "spark.extraListeners": OPENLINEAGE_LISTENER,
        "spark.openlineage.namespace": "retail",
        "spark.openlineage.transport.type": "http",
        "spark.openlineage.transport.url": "http://marquez:5000",
        "spark.openlineage.transport.compression": "gzip",
        "spark.openlineage.transport.auth.type": "api_key",
        "spark.openlineage.transport.auth.apiKey": TOKEN}
    conf = submit_conf(env)
    assert conf["spark.extraListeners"] == OPENLINEAGE_LISTENER
    assert re.search(conf["spark.redaction.regex"], "spark.openlineage.transport.auth.apiKey")
    lakehouse.write_env(lineage={"transport": {"type": "console"}})
    assert lineage_listener_conf(lakehouse.project().env) == {}


@pytest.mark.slow
def test_the_spark_listener_sends_plan_events_beside_the_frameworks(
    spark: SparkSession, lakehouse: Lakehouse,
    http_endpoint: tuple[str, list[tuple[str, str, dict[str, Any]]]],
) -> None:
    """``spark_listener: true``: a run's session starts with OpenLineage's Spark listener (its
    jar from Maven Central, cached by the setup), which sends its own events of the run's Spark
    jobs to the same endpoint as the framework's START and COMPLETE."""
    import subprocess

    from framework.session import OPENLINEAGE_SPARK_VERSION
    from tests.support import medallion_cmd

    url, received = http_endpoint
    bronze = setup(lakehouse, {"type": "http", "url": url})
    lakehouse.write_env(lineage={"transport": {"type": "http", "url": url},
                                 "spark_listener": True})
    write_delta_commits(spark, bronze, [[row("o1", 1, 0), row("o2", 2, 1)]])
    done = subprocess.run([*medallion_cmd(), "run", "silver", "--table", "orders", "--conf",
                           str(lakehouse.conf), "--env", lakehouse.env_name],
                          env=lakehouse.cli_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    producers = {body["producer"] for _, _, body in received}
    listener = f"https://github.com/OpenLineage/OpenLineage/tree/{OPENLINEAGE_SPARK_VERSION}" \
        "/integration/spark"
    assert listener in producers, producers
    ours = [body for _, _, body in received if body["producer"] != listener]
    assert [b["eventType"] for b in ours] == ["START", "COMPLETE"]
    assert {b["job"]["namespace"] for _, _, b in received if b["producer"] == listener} == \
        {ours[0]["job"]["namespace"]}


@pytest.mark.slow
@pytest.mark.xdist_group("quickstart")  # the Connect server's worker (tests/test_connect.py)
def test_the_same_events_over_spark_connect(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path, connect_server: ConnectServer
) -> None:
    """`medallion run` as a Spark Connect client (its batches on a real server): the client
    sends the events, the same as a classic session's."""
    import subprocess

    from tests.support import medallion_cmd

    events_file = tmp_path / "events.jsonl"
    bronze = setup(lakehouse, {"type": "file", "log_file_path": str(events_file),
                               "append": True})
    write_delta_commits(spark, bronze, [
        [row("o1", 1, 0), row("o2", 0, 1), row("o3", 2, 2, customer=None)]])
    lakehouse.write_env(runtime="connect", remote=connect_server.url, spark_conf={},
                        lineage={"transport": {"type": "file",
                                               "log_file_path": str(events_file),
                                               "append": True}})
    done = subprocess.run([*medallion_cmd(), "run", "silver", "--conf", str(lakehouse.conf),
                           "--env", lakehouse.env_name], capture_output=True, text=True,
                          env=lakehouse.cli_env(), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]

    events = file_events(events_file)
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    for event in events:
        validate(event)
    complete = events[1]
    silver = lakehouse.project().table("orders", Layer.SILVER)
    [output] = complete["outputs"]
    assert (output["namespace"], output["name"]) == ("file", silver.location)
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == 2
    assert {column: [f["field"] for f in fields["inputFields"]]
            for column, fields in output["facets"]["columnLineage"]["fields"].items()} == {
        "order_id": ["order_id"], "customer": ["customer_id"], "quantity": ["quantity"],
        "amount": ["quantity"], "label": ["customer_id", "order_id"],
        "event_time": ["event_time"]}
    assert [f["name"] for f in output["facets"]["schema"]["fields"]] == [
        c["name"] for c in COLUMNS]
    assertions = {a["name"]: a["actual"]
                  for a in complete["inputs"][0]["inputFacets"]["dataQualityAssertions"][
                      "assertions"]}
    assert assertions == {"positive_quantity": "1", "unique_order_id": "0"}
    assert complete["run"]["facets"]["processing_engine"]["version"] == spark.version


def test_a_run_stopped_on_request_sends_abort(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path
) -> None:
    events_file = tmp_path / "events.jsonl"
    bronze = setup(lakehouse, {"type": "file", "log_file_path": str(events_file),
                               "append": True})
    write_delta_commits(spark, bronze, [[row("o1", 1, 0)], [row("o2", 1, 1)]])
    ctx = RunContext()
    ctx.stop.request("SIGTERM")  # (as the signal handler records it)
    summary = SilverJob(spark, lakehouse.project().table("orders", Layer.SILVER), ctx).run()
    assert summary.status is RunStatus.STOPPED, summary.error

    events = file_events(events_file)
    assert [e["eventType"] for e in events] == ["START", "ABORT"]
    for event in events:
        validate(event)
    assert "errorMessage" not in events[1]["run"]["facets"]
