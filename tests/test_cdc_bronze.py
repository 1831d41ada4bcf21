"""``cdc: debezium`` on bronze feeds: Debezium change events (both JSON shapes) landed as rows
with ``_cdc_op``, ``_cdc_ts_ms`` and ``_cdc_sequence``; malformed envelopes quarantined with
their reason; Kafka tombstones skipped and counted; configuration errors said clearly. End to
end: a Postgres table's Debezium stream (snapshot, changes, deletes with their tombstones,
duplicates, late events) through a real broker, bronze and a silver ``mode: scd2`` table, equal
to the plain-Python reference (tests/cdc_reference.py)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
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
from tests import cdc_reference as ref
from tests.kafka_broker import Broker
from tests.support import Lakehouse

ROW_SCHEMA = "id BIGINT, name STRING, age INT"
EXPECTED_SCHEMA = f"{ROW_SCHEMA}, _cdc_op STRING, _cdc_ts_ms BIGINT, _cdc_sequence BIGINT, " \
                  "_rescued_data STRING"
FILE_COLUMNS = ["_source_file", "_file_modification_time", "_file_size", "_ingested_at",
                "_batch_id"]
Record = tuple[int, bytes | None, bytes | None]  # (partition, key, value), as produced
KAFKA_COLUMNS = ["_topic", "_partition", "_offset", "_kafka_timestamp", "_key", "_ingested_at",
                 "_batch_id"]


def event(op: str | None, *, before: Any = None, after: Any = None, ts_ms: Any = 1000,
          source: dict[str, Any] | None = None, wrapped: bool = False) -> dict[str, Any]:
    """A Debezium change event: payload only, or ``{"schema": ..., "payload": ...}``; ``ts_ms``
    any JSON value (a bad one is quarantined)."""
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


def run(spark: SparkSession, lakehouse: Lakehouse, name: str, ok: bool = True,
        layer: Layer = Layer.BRONZE) -> TableRunSummary:
    table = lakehouse.project().table(name, layer)
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
    records: list[Record] = [(i % 2, key, json.dumps(e).encode())
                             for i, (key, e) in enumerate(events)]
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


# ---------------------------------------------------------------------- Debezium into SCD2
ACCOUNT_SCHEMA = "id BIGINT, name STRING, segment STRING, note STRING"
ACCOUNT_TOPIC = "shop.public.accounts"
PARTITIONS = 3  # Debezium's records of one key go to one partition (the key's hash)
SNAPSHOT_LSN = 23_000_000  # the snapshot's position; a change k of the stream is at + 8k
SNAPSHOT = {0: {"name": "Ada", "segment": "retail", "note": "s0"},
            1: {"name": "Bo", "segment": "smb", "note": "s1"},
            2: {"name": "Cy", "segment": "enterprise", "note": "s2"}}
ACCOUNT_VERSIONS = f"{ACCOUNT_SCHEMA}, __start_at BIGINT, __end_at BIGINT, " \
                   "__is_current BOOLEAN, __deleted BOOLEAN"


@dataclass
class DebeziumStream:
    """A Postgres table's change stream as Debezium sends it to Kafka (REPLICA IDENTITY FULL:
    ``before`` holds the whole old row), cut into rounds of records in order of arrival."""

    events: list[ref.Event]  # every change event sent (duplicates included)
    rounds: list[list[Record]]  # a tombstone's value is None
    sent: list[tuple[int, str, int]]  # (id, op, lsn) of each change event sent
    cases: Counter[str]  # what the stream holds, to check that it covers what it should


def debezium_stream(seed: int, cuts: Sequence[int]) -> DebeziumStream:
    """The snapshot (op r, one position for every row), then ``ref.changes`` over the same keys,
    its sequences made positions after the snapshot's, delivered in its order (late events
    and exact duplicates, which Debezium re-sends after a restart, included); cut at ``cuts``
    (events delivered) into rounds.

    An event's op follows the row's state at its position: r in the snapshot, then c (no row),
    u (``before``: the row it replaces) or d (``before``: the row it removes, then a tombstone).
    Debezium deletes only a row that exists: a delete of an absent key is left out."""
    snapshot = [ref.Event((k,), SNAPSHOT_LSN, ref.Op.UPSERT, v) for k, v in SNAPSHOT.items()]
    stream = [replace(e, sequence=SNAPSHOT_LSN + 8 * e.sequence)
              for e in ref.changes(seed, keys=6, events=40, late_fraction=0.3)]
    cases: Counter[str] = Counter()
    rows: dict[ref.Key, dict[str, Any]] = {}
    deleted: set[ref.Key] = set()
    messages: dict[tuple[ref.Key, int], tuple[str, bytes]] = {}  # (op, value) of an event
    for e in [*snapshot, *sorted({e.sequence: e for e in stream}.values(),
                                  key=lambda e: e.sequence)]:
        before = rows.pop(e.key, None)
        if e.op is ref.Op.DELETE:
            if before is None:
                continue
            op = "d"
            deleted.add(e.key)
        else:
            rows[e.key] = {"id": e.key[0], **e.values}
            op = "r" if e.sequence == SNAPSHOT_LSN else "u" if before else "c"
            cases["insert after a delete"] += op == "c" and e.key in deleted
            if before:
                changed = {c for c in e.values if e.values[c] != before[c]}
                cases["tracked update" if changed - set(ref.UNTRACKED) else
                      "untracked update" if changed else "same row"] += 1
        envelope = event(op, before=before, after=rows.get(e.key),
                         ts_ms=1_700_000_000_000 + e.sequence,
                         source={"lsn": e.sequence, "table": "accounts",
                                 **({"snapshot": "true"} if op == "r" else {})})
        messages[e.key, e.sequence] = op, json.dumps(envelope).encode()

    arrivals = [e for e in (*snapshot, *stream) if (e.key, e.sequence) in messages]
    bounds = [0, *cuts, len(arrivals)]
    rounds: list[list[Record]] = [[] for _ in bounds[1:]]
    newest: dict[ref.Key, tuple[int, int]] = {}  # per key: the greatest position, its round
    for i, e in enumerate(arrivals):
        at = sum(i >= b for b in bounds[1:-1])
        (op, value), key = messages[e.key, e.sequence], json.dumps({"id": e.key[0]}).encode()
        rounds[at] += [(e.key[0] % PARTITIONS, key, value)] + \
            [(e.key[0] % PARTITIONS, key, None)] * (op == "d")
        seen, round_seen = newest.get(e.key, (-1, at))
        cases["late"] += seen > e.sequence
        cases["late across rounds"] += seen > e.sequence and round_seen < at
        if seen < e.sequence:
            newest[e.key] = e.sequence, at
    sent = [(e.key[0], messages[e.key, e.sequence][0], e.sequence) for e in arrivals]
    cases["duplicate"] = len(sent) - len(set(sent))
    cases["delete"] = sum(op == "d" for _, op, _ in sent)
    return DebeziumStream(arrivals, rounds, sent, cases)


@pytest.mark.xdist_group("kafka")
def test_debezium_changes_through_kafka_into_an_scd2_table_equal_the_reference(
    spark: SparkSession, lakehouse: Lakehouse, broker: Broker
) -> None:
    stream = debezium_stream(seed=4, cuts=(24,))
    assert {c: stream.cases[c] for c in (
        "insert after a delete", "tracked update", "untracked update", "delete", "duplicate",
        "late", "late across rounds")} == {
        "insert after a delete": 4, "tracked update": 8, "untracked update": 12, "delete": 7,
        "duplicate": 5, "late": 12, "late across rounds": 4}
    broker.create_topic(ACCOUNT_TOPIC, PARTITIONS)
    lakehouse.add_table("bronze", "accounts", {
        "description": "accounts, from Debezium (Postgres) on Kafka",
        "source": {"format": "kafka", "bootstrap_servers": broker.bootstrap,
                   "topics": [ACCOUNT_TOPIC], "schema": ACCOUNT_SCHEMA},
        "cdc": {"format": "debezium", "sequence": ["source.lsn"]}})
    lakehouse.add_table("silver", "accounts", {
        "description": "accounts, a version per change of name or segment",
        "source": "accounts",
        "columns": [{"name": c} for c in ("id", "name", "segment", "note", "_cdc_op",
                                          "_cdc_sequence")],
        "mode": "scd2",
        "scd2": {"keys": ["id"], "sequence_by": "_cdc_sequence", "deletes": "_cdc_op = 'd'",
                 "track_history_except": ["note"], "except_columns": ["_cdc_op"]}})

    # Each round produced, then bronze and silver run (availableNow): a micro-batch each.
    bronze, silver = [], []
    for records in stream.rounds:
        assert broker.produce(ACCOUNT_TOPIC, records) == len(records)
        bronze.append(run(spark, lakehouse, "accounts"))
        silver.append(run(spark, lakehouse, "accounts", layer=Layer.SILVER))

    # Bronze: every change event sent, duplicates included; each tombstone skipped, counted.
    assert [(s.rows_in, s.rows_out, s.counts["quarantined_rows"], s.counts["cdc_tombstones"])
            for s in bronze] == [(26, 24, 0, 2), (24, 19, 0, 5)]
    project = lakehouse.project()
    landed = spark.table(project.table("accounts", Layer.BRONZE).full_name)
    assert_df_equality(landed.select("id", "_cdc_op", "_cdc_sequence"),
                       spark.createDataFrame(stream.sent, "id BIGINT, _cdc_op STRING, "
                                             "_cdc_sequence BIGINT"),
                       ignore_row_order=True, ignore_nullable=True)
    # Silver: one micro-batch per round, each bronze row read once; the reference's versions.
    assert [(s.batches, s.rows_in) for s in silver] == [(1, 24), (1, 19)]
    want = ref.scd2(stream.events, keys=["id"], track_history_except=ref.UNTRACKED)
    assert (len(want), sum(r["__deleted"] for r in want),
            sum(r["__is_current"] for r in want)) == (18, 6, 4)
    got = spark.table(project.table("accounts", Layer.SILVER).full_name)
    assert "_cdc_op" not in got.columns
    names = [c.split()[0] for c in ACCOUNT_VERSIONS.split(", ")]
    assert_df_equality(got.select(*names), spark.createDataFrame(
        [tuple(r[n] for n in names) for r in want], ACCOUNT_VERSIONS),
        ignore_row_order=True, ignore_nullable=True)
