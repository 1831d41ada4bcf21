"""``cdc: debezium`` on bronze feeds: Debezium change events (both JSON shapes) landed as rows
with ``_cdc_op``, ``_cdc_ts_ms`` and ``_cdc_sequence``; malformed envelopes quarantined with
their reason; Kafka tombstones skipped and counted; configuration errors said clearly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import Row, SparkSession
from structlog.testing import capture_logs

from bronze.cdc import CdcSpec, sequence_types
from framework.config.model import Layer
from framework.errors import ConfigError, ConfigValidationError
from framework.job import RunContext, RunStatus, TableRunSummary
from framework.layers import job_class
from tests.kafka_broker import Broker, kafka_broker
from tests.support import Lakehouse

ROW_SCHEMA = "id BIGINT, name STRING, age INT"
EXPECTED_SCHEMA = f"{ROW_SCHEMA}, _cdc_op STRING, _cdc_ts_ms BIGINT, _cdc_sequence BIGINT, " \
                  "_rescued_data STRING"
FILE_COLUMNS = ["_source_file", "_file_modification_time", "_file_size", "_ingested_at",
                "_batch_id"]
KAFKA_COLUMNS = ["_topic", "_partition", "_offset", "_kafka_timestamp", "_key", "_ingested_at",
                 "_batch_id"]


def event(op: str | None, *, before: Any = None, after: Any = None, ts_ms: int | None = 1000,
          source: dict[str, Any] | None = None, wrapped: bool = False) -> dict[str, Any]:
    """A Debezium change event: payload only, or ``{"schema": ..., "payload": ...}``."""
    payload: dict[str, Any] = {"before": before, "after": after,
                               "source": {"connector": "postgresql", "db": "shop",
                                          **(source or {})},
                               "ts_ms": ts_ms}
    if op is not None:
        payload["op"] = op
    if wrapped:  # schemas.enable=true: the schema of the payload beside it
        return {"schema": {"type": "struct", "name": "shop.public.customers.Envelope",
                           "optional": False, "fields": []}, "payload": payload}
    return payload


def person(i: int, name: str, age: Any, **extra: Any) -> dict[str, Any]:
    return {"id": i, "name": name, "age": age, **extra}


def write_lines(path: Path, records: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                            for r in records), encoding="utf-8")


def cdc_feed(landing: str, cdc: Any, **extra: Any) -> dict[str, Any]:
    return {"description": "customers, from Debezium",
            "source": {"path": landing, "format": "json", "schema": ROW_SCHEMA,
                       "clean_source": "off"}, "cdc": cdc, **extra}


def run(spark: SparkSession, lakehouse: Lakehouse, name: str, ok: bool = True
        ) -> TableRunSummary:
    table = lakehouse.project().table(name, Layer.BRONZE)
    summary = job_class(table)(spark, table, RunContext()).run()
    if ok:
        assert summary.status is RunStatus.SUCCEEDED, summary.error
    return summary


def test_change_events_of_a_file_become_rows_with_op_time_and_sequence(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lsn = {"lsn": 100}
    write_lines(lakehouse.path("landing", "customers", "events-1.json"), [
        # the snapshot: op r, one sequence for the whole snapshot, both JSON shapes
        event("r", after=person(1, "Ada", 36), source={**lsn, "snapshot": "true"}),
        event("r", after=person(2, "Bob", 41), source={**lsn, "snapshot": "last"},
              wrapped=True),
        # then the changes
        event("c", after=person(3, "Cy", 22), ts_ms=2000, source={"lsn": 200}),
        event("u", before=person(1, "Ada", 36), after=person(1, "Ada L.", 37), ts_ms=2100,
              source={"lsn": 210}, wrapped=True),
        event("d", before=person(2, "Bob", 41), after=None, ts_ms=2200, source={"lsn": 220}),
        # a key outside the row's schema and a value of another type: rescued, row kept
        event("u", before=person(3, "Cy", 22), after=person(3, "Cy", "twenty-three",
                                                              phone="555"),
              ts_ms=2300, source={"lsn": 230}),
    ])
    write_lines(lakehouse.path("landing", "accounts", "binlog.json"), [
        event("r", after=person(7, "Eve", 50), ts_ms=10,
              source={"file": "mysql-bin.000003", "pos": 154, "row": 0}),
        event("c", after=person(8, "Fay", 28), ts_ms=20,
              source={"file": "mysql-bin.000003", "pos": 900, "row": 0}, wrapped=True),
        event("c", after=person(9, "Gus", 33), ts_ms=20,
              source={"file": "mysql-bin.000003", "pos": 900, "row": 1}),
        event("d", before=person(7, "Eve", 50), ts_ms=30,
              source={"file": "mysql-bin.000004", "pos": 4, "row": 0}),
    ])
    lakehouse.add_table("bronze", "customers", cdc_feed("landing/customers", "debezium"))
    lakehouse.add_table("bronze", "accounts", cdc_feed(
        "landing/accounts", {"format": "debezium",
                             "sequence": ["source.file", "source.pos", "source.row INT"]}))

    customers = run(spark, lakehouse, "customers")
    accounts = run(spark, lakehouse, "accounts")

    project = lakehouse.project()
    got = spark.table(project.table("customers", Layer.BRONZE).full_name)
    assert got.columns == [*ROW_SCHEMA_NAMES, "_cdc_op", "_cdc_ts_ms", "_cdc_sequence",
                           "_rescued_data", *FILE_COLUMNS]
    expected = spark.createDataFrame([
        (1, "Ada", 36, "r", 1000, 100, None),
        (2, "Bob", 41, "r", 1000, 100, None),
        (3, "Cy", 22, "c", 2000, 200, None),
        (1, "Ada L.", 37, "u", 2100, 210, None),
        (2, "Bob", 41, "d", 2200, 220, None),  # a delete: the row as it was (before)
        (3, "Cy", None, "u", 2300, 230, '{"age":"twenty-three","phone":"555"}'),
    ], EXPECTED_SCHEMA)
    assert_df_equality(got.select(*expected.columns), expected, ignore_row_order=True,
                       ignore_nullable=True)
    assert (customers.rows_in, customers.rows_out, customers.counts["quarantined_rows"]) == \
        (6, 6, 0)

    got = spark.table(project.table("accounts", Layer.BRONZE).full_name)
    sequence = "STRUCT<file: STRING, pos: BIGINT, row: INT>"
    expected = spark.createDataFrame([
        (7, "Eve", 50, "r", 10, Row(file="mysql-bin.000003", pos=154, row=0)),
        (8, "Fay", 28, "c", 20, Row(file="mysql-bin.000003", pos=900, row=0)),
        (9, "Gus", 33, "c", 20, Row(file="mysql-bin.000003", pos=900, row=1)),
        (7, "Eve", 50, "d", 30, Row(file="mysql-bin.000004", pos=4, row=0)),
    ], f"{ROW_SCHEMA}, _cdc_op STRING, _cdc_ts_ms BIGINT, _cdc_sequence {sequence}")
    assert_df_equality(got.select(*expected.columns), expected, ignore_row_order=True,
                       ignore_nullable=True)
    assert accounts.rows_out == 4
    # The struct orders field by field: the file, then the position, then the row.
    ordered = [r["id"] for r in got.orderBy("_cdc_sequence").collect()]
    assert ordered == [7, 8, 9, 7]


ROW_SCHEMA_NAMES = ["id", "name", "age"]


def test_malformed_envelopes_are_quarantined_with_their_reason(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    good = [event("c", after=person(1, "Ada", 36), source={"lsn": 5}),
            event("d", before=person(1, "Ada", 36), source={"lsn": 6}, wrapped=True)]
    bad = {
        "not json at all":
            "expected a Debezium change event (one JSON object), found text that is not "
            "one JSON value",
        "[1, 2]": "expected a Debezium change event (one JSON object), found [1,2]",
        json.dumps({"schema": {"type": "struct"}, "payload": None}):
            "expected payload to hold a Debezium change event (a JSON object), found null",
        json.dumps(event(None, after=person(2, "B", 1), source={"lsn": 7})):
            "expected op one of c, u, r, d, found none",
        json.dumps(event("t", source={"lsn": 8})): 'expected op one of c, u, r, d, found "t"',
        json.dumps(event("c", after=None, source={"lsn": 9})):
            "expected after (the row, a JSON object) for op c, found null",
        json.dumps({k: v for k, v in event("d", after=None, source={"lsn": 10}).items()
                    if k != "before"}):
            "expected before (the row, a JSON object) for op d, found none",
        json.dumps(event("u", after=[1, 2], source={"lsn": 11}, wrapped=True)):
            "expected after (the row, a JSON object) for op u, found [1,2]",
        json.dumps(event("c", after=person(3, "C", 3))):
            "expected the sequence field source.lsn (BIGINT), found none",
        json.dumps(event("c", after=person(4, "D", 4), source={"lsn": None})):
            "expected the sequence field source.lsn (BIGINT), found null",
        json.dumps(event("c", after=person(5, "E", 5), source={"lsn": "0/16B3748"})):
            'expected the sequence field source.lsn of type BIGINT, found "0/16B3748"',
        json.dumps(event("r", after=person(6, "F", 6), ts_ms="soon", source={"lsn": 12})):
            'expected ts_ms a number (milliseconds), found "soon"',
    }
    write_lines(lakehouse.path("landing", "customers", "mixed.json"),
                [good[0], *bad, good[1]])
    # Without a rescued column, a row value that does not fit quarantines the event.
    unfit = json.dumps(event("u", after=person(9, "Ida", "old"), source={"lsn": 13}))
    write_lines(lakehouse.path("landing", "strict", "mixed.json"), [good[0], unfit])
    lakehouse.add_table("bronze", "customers", cdc_feed("landing/customers", "debezium"))
    lakehouse.add_table("bronze", "strict", cdc_feed("landing/strict", "debezium",
                                                     rescued_column=None))

    summary = run(spark, lakehouse, "customers")
    strict = run(spark, lakehouse, "strict")

    project = lakehouse.project()
    table = project.table("customers", Layer.BRONZE)
    quarantine = spark.table(table.qualified("quarantine"))
    assert {r["_raw"]: r["_reason"] for r in quarantine.collect()} == bad
    assert quarantine.count() == len(bad) == 12
    assert (summary.rows_in, summary.rows_out, summary.counts["quarantined_rows"]) == (14, 2, 12)
    expected = spark.createDataFrame([(1, "Ada", 36, "c", 5), (1, "Ada", 36, "d", 6)],
                                     f"{ROW_SCHEMA}, _cdc_op STRING, _cdc_sequence BIGINT")
    got = spark.table(table.full_name).select(*expected.columns)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)

    strict_table = project.table("strict", Layer.BRONZE)
    assert "_rescued_data" not in spark.table(strict_table.full_name).columns
    assert [(r["_raw"], r["_reason"]) for r in
            spark.table(strict_table.qualified("quarantine")).collect()] == [
        (unfit, "expected the values of after to fit source.schema's types, found one that "
                "does not (rescued_column is null)")]
    assert (strict.rows_out, strict.counts["quarantined_rows"]) == (1, 1)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """The test broker of tests/test_kafka.py (deploy/kafka/broker.sh), for this module."""
    with kafka_broker(tmp_path_factory.mktemp("kafka")) as running:
        yield running


@pytest.mark.xdist_group("kafka")
def test_change_events_from_kafka_with_a_tombstone_skipped_and_counted(
    spark: SparkSession, lakehouse: Lakehouse, broker: Broker
) -> None:
    broker.create_topic("shop.public.customers", 2)
    events = [
        (b'{"id":1}', event("r", after=person(1, "Ada", 36), source={"lsn": 100})),
        (b'{"id":2}', event("r", after=person(2, "Bob", 41), source={"lsn": 100},
                            wrapped=True)),
        (b'{"id":3}', event("c", after=person(3, "Cy", 22), ts_ms=2000, source={"lsn": 200})),
        (b'{"id":1}', event("u", before=person(1, "Ada", 36), after=person(1, "Ada", 37),
                            ts_ms=2100, source={"lsn": 210}, wrapped=True)),
        (b'{"id":2}', event("d", before=person(2, "Bob", 41), ts_ms=2200,
                            source={"lsn": 220})),
    ]
    records = [(i % 2, key, json.dumps(e).encode()) for i, (key, e) in enumerate(events)]
    # the tombstone Debezium sends after a delete (same key, no value), and a bad envelope
    records += [(0, b'{"id":2}', None), (1, b'{"id":9}', b'{"op": "c", "after": null}')]
    assert broker.produce("shop.public.customers", records) == 7
    lakehouse.add_table("bronze", "customers", {
        "description": "customers, from Debezium on Kafka",
        "source": {"format": "kafka", "bootstrap_servers": broker.bootstrap,
                   "topics": ["shop.public.customers"], "schema": ROW_SCHEMA},
        "cdc": {"format": "debezium", "sequence": ["source.lsn"]}})

    with capture_logs() as logs:
        summary = run(spark, lakehouse, "customers")

    table = lakehouse.project().table("customers", Layer.BRONZE)
    got = spark.table(table.full_name)
    assert got.columns == [*ROW_SCHEMA_NAMES, "_cdc_op", "_cdc_ts_ms", "_cdc_sequence",
                           "_rescued_data", *KAFKA_COLUMNS]
    expected = spark.createDataFrame([
        (1, "Ada", 36, "r", 1000, 100, None),
        (2, "Bob", 41, "r", 1000, 100, None),
        (3, "Cy", 22, "c", 2000, 200, None),
        (1, "Ada", 37, "u", 2100, 210, None),
        (2, "Bob", 41, "d", 2200, 220, None),
    ], EXPECTED_SCHEMA)
    assert_df_equality(got.select(*expected.columns), expected, ignore_row_order=True,
                       ignore_nullable=True)
    assert (summary.rows_in, summary.rows_out, summary.counts["quarantined_rows"],
            summary.counts["cdc_tombstones"]) == (7, 5, 1, 1)
    quarantine = spark.table(table.qualified("quarantine")).collect()
    assert [(r["_raw"], r["_reason"]) for r in quarantine] == [
        ('{"op": "c", "after": null}',
         "expected after (the row, a JSON object) for op c, found null")]
    committed = [e for e in logs if e["event"] == "bronze.batch.committed"]
    assert sum(e["cdc_tombstones"] for e in committed) == 1
    assert sum(e["bronze_rows"] for e in committed) == 5


@pytest.mark.parametrize(("table", "key", "message"), [
    ({"source": {"format": "csv", "schema": ROW_SCHEMA}, "cdc": "debezium"}, "cdc",
     "expected source.format json for cdc: debezium (change events are JSON documents, one "
     "per line), found csv"),
    ({"source": {"format": "json"}, "cdc": "debezium"}, "source.schema",
     "expected source.schema, the DDL of the table's row (what after and before hold, e.g. "
     "'id BIGINT, name STRING'), for cdc: debezium, found none"),
    ({"cdc": {"format": "debezium", "sequence": []}}, "cdc.sequence",
     "expected at least one dotted path in sequence (e.g. [source.lsn]), found an empty list"),
    ({"cdc": "maxwell"}, "cdc.format", "'debezium'"),
    ({"cdc": {"format": "debezium", "sequence": ["lsn"]}}, "cdc.sequence",
     "expected each sequence entry to be a path source.<field>, transaction.<field> or "
     "ts_ms, optionally followed by a type (e.g. 'source.lsn' or 'source.scn "
     "DECIMAL(38,0)'), found 'lsn'"),
    ({"cdc": {"format": "debezium", "sequence": ["source.ts_ms", "ts_ms"]}}, "cdc.sequence",
     "expected sequence paths whose last parts differ (they name the fields of "
     "_cdc_sequence), found 'source.ts_ms' and 'ts_ms'"),
    ({"cdc": "debezium", "rescued_column": "_cdc_op"}, "rescued_column",
     "expected a rescued column named other than _cdc_op, _cdc_ts_ms, _cdc_sequence (the "
     "change columns), found '_cdc_op'"),
])
def test_invalid_cdc_configuration_is_a_clear_error(
    lakehouse: Lakehouse, table: dict[str, Any], key: str, message: str
) -> None:
    spec = cdc_feed("landing/customers", None)
    spec = {**spec, **{k: v for k, v in table.items() if k != "source"},
            "source": {**spec["source"], **table.get("source", {})}}
    if "schema" not in table.get("source", {"schema": 1}):
        del spec["source"]["schema"]
    lakehouse.add_table("bronze", "customers", spec)
    with pytest.raises(ConfigValidationError) as info:
        lakehouse.project()
    (error,) = info.value.errors
    assert error.key == key
    assert message in str(error), str(error)


def test_invalid_cdc_configuration_of_a_kafka_feed_and_its_row(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    source = {"format": "kafka", "bootstrap_servers": "127.0.0.1:9", "topics": ["t"],
              "schema": ROW_SCHEMA}
    lakehouse.add_table("bronze", "customers", {"source": source,
                                                "cdc": {"format": "debezium", "sequence": []}})
    with pytest.raises(ConfigValidationError, match="expected at least one dotted path"):
        lakehouse.project()
    # A row column named as a change column: refused before anything is read or created.
    lakehouse.add_table("bronze", "customers", cdc_feed(
        "landing/customers", "debezium",
        source={"path": "landing/customers", "format": "json", "clean_source": "off",
                "schema": "id BIGINT, _cdc_op STRING"}))
    summary = run(spark, lakehouse, "customers", ok=False)
    assert summary.status is RunStatus.FAILED
    assert "expected row columns named other than _cdc_op, _cdc_ts_ms, _cdc_sequence (added " \
           "by cdc), found _cdc_op" in str(summary.error)
    # A type stated after a path that Spark does not know.
    with pytest.raises(ConfigError, match=r"expected a Spark SQL type such as BIGINT or "
                       r"DECIMAL\(38,0\) after the path, found 'NUMBERISH'") as info:
        sequence_types(CdcSpec.model_validate({"format": "debezium",
                                               "sequence": ["source.scn NUMBERISH"]}))
    assert info.value.key == "cdc.sequence[0]"
