"""Kafka feeds into bronze, against a real single-node Kafka broker (KRaft, its own JVM, from
Maven Central: deploy/kafka/broker.sh): exactly once under restarts, SIGKILL and a broker
restart; malformed values quarantined; offsets visible; data loss refused or counted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from framework.checkpoint import last_committed_batch, last_planned_batch
from framework.config.model import Layer
from framework.job import RunContext, RunStatus, TableRunSummary
from framework.layers import job_class
from tests.kafka_broker import Broker, json_records
from tests.support import ORDER_SCHEMA, REPO, CliRun, Lakehouse, medallion_cmd, order, silver_spec

pytestmark = pytest.mark.xdist_group("kafka")  # one broker, in one worker


def kafka_spec(broker: Broker, topic: str, **source: Any) -> dict[str, Any]:
    return {"description": "orders from Kafka",
            "source": {"format": "kafka", "bootstrap_servers": broker.bootstrap,
                       "topics": [topic], "schema": ORDER_SCHEMA, **source}}


def run(spark: SparkSession, lakehouse: Lakehouse, layer: Layer = Layer.BRONZE,
        ok: bool = True) -> TableRunSummary:
    table = lakehouse.project().table("orders", layer)
    summary = job_class(table)(spark, table, RunContext()).run()
    if ok:
        assert summary.status is RunStatus.SUCCEEDED, summary.error
    return summary


def offsets_in(spark: SparkSession, lakehouse: Lakehouse) -> list[tuple[str, int, int]]:
    """Every (topic, partition, offset) in bronze and its quarantine (read by location: a CLI
    run keeps its own catalog), duplicates kept."""
    table = lakehouse.project().table("orders", Layer.BRONZE)
    rows = []
    for location in (table.location, table.companion_location("quarantine")):
        rows += [(r[0], r[1], r[2]) for r in spark.read.format("delta").load(location)
                 .select("_topic", "_partition", "_offset").collect()]
    return sorted(rows)


def every_offset(broker: Broker, topic: str) -> list[tuple[str, int, int]]:
    """Every (topic, partition, offset) the topic holds (all from offset 0: none expired)."""
    from bronze.offsets import latest_offsets

    ends = latest_offsets([topic], {"bootstrap.servers": broker.bootstrap})
    return sorted((t, p, o) for (t, p), end in ends.items() for o in range(end))


def test_a_topic_is_ingested_exactly_once_with_malformed_values_quarantined(
    spark: SparkSession, lakehouse: Lakehouse, broker: Broker
) -> None:
    broker.create_topic("orders-a", 3)
    rows = [order(i) for i in range(120)]
    rows[7]["coupon"] = "WELCOME"  # a key outside the schema: rescued
    dupes = [order(i) for i in range(100, 110)]  # delivered twice: silver drops them
    records = list(json_records(rows + dupes, 3))
    big = json.dumps(order(999, note="x" * 2000)).encode()  # over max_record_bytes
    malformed = [(0, b"m1", b"{not json"), (1, b"m2", b"\xff\xfe not utf-8"),
                 (2, b"m3", None), (0, b"m4", b"[1, 2]"), (1, b"m5", big)]
    assert broker.produce("orders-a", records + malformed) == 135
    lakehouse.add_table("bronze", "orders", kafka_spec(broker, "orders-a",
                                                       max_record_bytes=1000))
    lakehouse.add_table("silver", "orders", silver_spec(
        source={"table": "orders"}, event_time="event_time",
        dedup={"keys": ["order_id"], "delay": "1 day"}))

    first = run(spark, lakehouse)

    table = lakehouse.project().table("orders", Layer.BRONZE)
    assert (first.rows_in, first.rows_out, first.counts["quarantined_rows"]) == (135, 130, 5)
    assert offsets_in(spark, lakehouse) == every_offset(broker, "orders-a")  # each once
    rescued = spark.table(table.full_name).where("_rescued_data IS NOT NULL") \
        .select("order_id", "_rescued_data")
    expected = spark.createDataFrame([("o0000007", '{"coupon":"WELCOME"}')],
                                     "order_id STRING, _rescued_data STRING")
    assert_df_equality(rescued, expected)
    quarantine = spark.table(table.qualified("quarantine"))
    reasons = {r["_key"]: (r["_raw"], r["_reason"]) for r in quarantine.collect()}
    assert reasons == {
        "m1": ("{not json", "malformed record: does not parse against the schema"),
        "m2": ("//4gbm90IHV0Zi04", "value is not UTF-8 text; _raw holds it in base64"),
        "m3": (None, "no value (a tombstone or an empty record)"),
        "m4": ("[1, 2]", "malformed record: expected a JSON object, found a JSON array"),
        "m5": (big.decode()[:4096], f"record too large: {len(big)} bytes, expected at most "
               "1000 (source.max_record_bytes); _raw holds its first 4096 characters")}
    assert sorted(tuple(r) for r in quarantine.select("_topic", "_partition").collect()) == \
        [("orders-a", 0), ("orders-a", 0), ("orders-a", 1), ("orders-a", 1), ("orders-a", 2)]

    silver = run(spark, lakehouse, Layer.SILVER)
    assert silver.rows_out == 120  # the 10 delivered twice dropped, as for files
    silver_table = lakehouse.project().table("orders", Layer.SILVER)
    assert spark.table(silver_table.full_name).select("order_id").distinct().count() == 120

    second = run(spark, lakehouse)
    assert (second.rows_in, second.batches) == (0, 0)
    assert spark.table(table.full_name).count() == 130

    # Offsets visible: per partition, the offset reached, the latest and the lag.
    broker.produce("orders-a", json_records([order(i) for i in range(500, 506)], 3))
    from framework.status import table_status

    status = table_status(spark, table)
    assert [(o["partition"], o["committed"], o["latest"], o["lag"]) for o in status.offsets] \
        == [(0, 46, 48, 2), (1, 45, 47, 2), (2, 44, 46, 2)]


def test_a_driver_killed_mid_run_loses_and_duplicates_no_record(
    spark: SparkSession, lakehouse: Lakehouse, broker: Broker
) -> None:
    broker.create_topic("orders-k", 3)
    broker.produce("orders-k", json_records([order(i) for i in range(1500)], 3))
    lakehouse.add_table("bronze", "orders", kafka_spec(broker, "orders-k",
                                                       max_offsets_per_trigger=300))
    table = lakehouse.project().table("orders", Layer.BRONZE)

    first = CliRun(["run", "bronze"], lakehouse.cli_env())
    first.wait_for("bronze.batch.committed", batch_id=1)
    first.wait_for("bronze.batch.offsets", batch_id=1)
    time.sleep(0.5)  # into batch 2
    os.killpg(first.proc.pid, signal.SIGKILL)
    first.finish()
    assert first.proc.returncode == -signal.SIGKILL
    committed = last_committed_batch(table.checkpoint)
    assert last_planned_batch(table.checkpoint) == committed + 1  # a batch cut short

    second = run(spark, lakehouse)  # the restart (in this process: a JVM fewer)

    got = offsets_in(spark, lakehouse)
    assert len(got) == 1500 and got == every_offset(broker, "orders-k")
    read_after = second.counts["records_read"]
    before = [e["records"] for e in first.all_events if e["event"] == "bronze.batch.committed"]
    assert len(before) == committed + 1  # batches 0..committed, each logged once
    assert read_after == 1500 - sum(before)  # the batch cut short read again, once


def test_a_continuous_run_recovers_from_a_broker_restart(
    spark: SparkSession, lakehouse: Lakehouse, broker: Broker
) -> None:
    broker.create_topic("orders-c", 2)
    broker.produce("orders-c", json_records([order(i) for i in range(200)], 2))
    lakehouse.write_env(processing_interval="1 second")
    lakehouse.add_table("bronze", "orders", kafka_spec(broker, "orders-c"))

    running = CliRun(["run", "bronze", "--continuous"], lakehouse.cli_env())
    try:
        running.wait_for("bronze.batch.committed", records=200)
        broker.stop()
        time.sleep(5)  # several triggers with no broker
        broker.start()
        broker.produce("orders-c", json_records([order(i) for i in range(200, 350)], 2))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and sum(
                e.get("records", 0) for e in running.all_events
                if e.get("event") == "bronze.batch.committed") < 350:
            assert running.proc.poll() is None, "".join(running.lines[-30:])
            time.sleep(1)
    finally:
        running.proc.send_signal(signal.SIGTERM)  # the driver: stops at a batch boundary
    code, out = running.finish()
    assert code == 0, out + "".join(running.lines[-30:])
    got = offsets_in(spark, lakehouse)
    assert len(got) == 350 and got == every_offset(broker, "orders-c")


def test_offsets_gone_backwards_fail_clearly_or_are_counted(
    spark: SparkSession, lakehouse: Lakehouse, broker: Broker
) -> None:
    broker.create_topic("orders-r", 2)
    broker.produce("orders-r", json_records([order(i) for i in range(40)], 2))
    lakehouse.add_table("bronze", "orders", kafka_spec(broker, "orders-r"))
    assert run(spark, lakehouse).rows_out == 40
    broker.delete_topic("orders-r")
    broker.create_topic("orders-r", 2)  # offsets start at 0 again, behind the checkpoint's 20
    broker.produce("orders-r", json_records([order(i) for i in range(100, 130)], 2))

    failed = run(spark, lakehouse, ok=False)
    assert failed.status is RunStatus.FAILED
    assert "orders-r partition" in (failed.error or "")
    assert "source.fail_on_data_loss" in (failed.error or ""), failed.error

    lakehouse.add_table("bronze", "orders", kafka_spec(broker, "orders-r",
                                                       fail_on_data_loss=False))
    went_on = run(spark, lakehouse)
    # Spark goes on from the partitions' latest offsets (15 each): the 30 records of the topic
    # created again are skipped, and each partition's jump is counted.
    assert went_on.counts["offset_jumps"] == 2 and went_on.rows_in == 0
    broker.produce("orders-r", json_records([order(i) for i in range(200, 204)], 2))
    after = run(spark, lakehouse)
    assert (after.rows_out, after.counts["offset_jumps"]) == (4, 0)
    table = lakehouse.project().table("orders", Layer.BRONZE)
    last = spark.table(table.full_name).where(f"_batch_id = {after.last_batch}")
    assert sorted(tuple(r) for r in last.select("_partition", "_offset").collect()) == \
        [(0, 15), (0, 16), (1, 15), (1, 16)]


def test_eventhubs_options_and_the_secret_is_never_shown(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bronze.streams import LOGIN_MODULE, StreamTableSpec

    secret = f"SharedAccessKey=canary{uuid.uuid4().hex}"
    connection = f"Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=l;{secret}"
    monkeypatch.setenv("EH_CONNECTION", connection)
    events = tmp_path / "spark-events"
    events.mkdir()
    lakehouse.write_env(spark_conf={
        "spark.ui.enabled": "false", "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(), "spark.eventLog.compress": "false"})
    # 127.0.0.1 stands for the namespace's host: nothing listens on 9093, the run fails.
    lakehouse.add_table("bronze", "orders", {"source": {
        "format": "eventhubs", "namespace": "127.0.0.1", "event_hub": "orders",
        "connection_string": "${EH_CONNECTION}", "schema": ORDER_SCHEMA,
        "kafka_options": {"default.api.timeout.ms": "3000", "request.timeout.ms": "2000"}}})
    table = lakehouse.project().table("orders", Layer.BRONZE)
    assert isinstance(table.spec, StreamTableSpec)
    assert connection not in repr(table.spec) and "${EH_CONNECTION}" in repr(table.spec)

    options = table.spec.source.spark_options()
    assert {k: v for k, v in options.items() if k != "kafka.sasl.jaas.config"} == {
        "kafka.bootstrap.servers": "127.0.0.1:9093", "subscribe": "orders",
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
        "kafka.request.timeout.ms": "2000", "kafka.session.timeout.ms": "30000",
        "kafka.default.api.timeout.ms": "3000", "startingOffsets": "earliest",
        "failOnDataLoss": "true"}
    assert options["kafka.sasl.jaas.config"] == (
        f'{LOGIN_MODULE} required username="$ConnectionString" password="{connection}";')
    on_databricks = table.spec.source.spark_options(databricks=True)["kafka.sasl.jaas.config"]
    assert on_databricks.startswith("kafkashaded.org.apache.kafka.")

    # The streaming plan (shown in Spark's UI and event log) carries the option redacted.
    job = job_class(table)(spark, table, RunContext())
    plan = job.read()._jdf.queryExecution().toString()
    assert "kafka.sasl.jaas.config=*********(redacted)" in plan and secret not in plan

    # A run in its own JVM, with Spark's event log on: it fails (nothing answers), and the
    # secret is in none of its output.
    done = subprocess.run(
        [*medallion_cmd(), "run", "bronze", "--summary", str(tmp_path / "run.json"),
         "--log-format", "json", "--log-level", "debug"],
        env=lakehouse.cli_env(), capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    outputs = {"stdout": done.stdout, "stderr": done.stderr,
               "summary": (tmp_path / "run.json").read_text()}
    outputs |= {str(f): f.read_text(errors="replace") for f in events.rglob("*") if f.is_file()}
    assert "Timed out waiting for a node assignment" in outputs["summary"]
    assert any("SparkListenerEnvironmentUpdate" in t for t in outputs.values())
    assert [name for name, text in outputs.items() if secret in text] == []


def test_a_kafka_feed_is_configured_with_clear_errors(lakehouse: Lakehouse) -> None:
    from framework.cli import main
    from framework.errors import ConfigError

    common = ["--conf", str(lakehouse.conf), "--env", lakehouse.env_name]
    base = {"format": "kafka", "bootstrap_servers": "127.0.0.1:9", "schema": ORDER_SCHEMA}
    cases = {
        "neither": ({}, "expected exactly one of topics (a list) and topic_pattern, "
                        "found neither"),
        "both": ({"topics": ["a"], "topic_pattern": "a.*"}, "found both"),
        "reserved": ({"topics": ["a"], "kafka_options": {"group.id": "g"}},
                     "expected kafka_options without group.id"),
        "offsets": ({"topics": ["a"], "starting_offsets": "newest"}, "starting_offsets"),
        "format": ({"format": "pulsar", "topics": ["a"]},
                   "expected one of json, csv, parquet, kafka, eventhubs, found 'pulsar'"),
        "secret": ({"format": "eventhubs", "namespace": "n", "event_hub": "h",
                    "connection_string": "Endpoint=sb://n/;SharedAccessKey=abc"},
                   "expected a secret reference"),
    }
    for name, (source, message) in cases.items():
        lakehouse.add_table("bronze", name, {"source": {**base, **source}})
        with pytest.raises(ConfigError) as caught:
            lakehouse.project()
        assert message in str(caught.value), (name, str(caught.value))
        assert "SharedAccessKey=abc" not in str(caught.value)
        (lakehouse.conf / "tables" / "bronze" / f"{name}.yaml").unlink()

    lakehouse.add_table("bronze", "orders", {"source": {**base, "topic_pattern": "orders-.*"}})
    assert main(["validate", "--no-spark", *common]) == 0
    assert main(["infer-schema", "orders", *common]) != 0  # not a feed of files
