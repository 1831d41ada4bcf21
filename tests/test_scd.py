"""Silver's change data (``mode: scd2``; ``mode: upsert`` with deletes and truncates) against
the plain-Python reference (tests/cdc_reference.py): a generated change stream with late,
out-of-order, duplicated events, deletes, re-inserts and truncates, applied by the framework in
micro-batches of several sizes, equals the reference row for row, whatever the batching."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from structlog.testing import capture_logs

from framework.cli import main
from framework.config.model import Layer
from framework.errors import ConfigValidationError
from framework.job import RunContext, RunStatus, TableRunSummary
from silver.job import SilverJob
from tests import cdc_reference as ref
from tests.support import Lakehouse, bronze_spec, cli, replay_last_batch, write_delta_commits

SCHEMA = "id BIGINT, name STRING, segment STRING, note STRING, seq BIGINT, op STRING, " \
         "_batch_id BIGINT"
CODES = {ref.Op.UPSERT: "u", ref.Op.DELETE: "d", ref.Op.TRUNCATE: "t"}
CHANGES = {"keys": ["id"], "sequence_by": "seq", "deletes": "op = 'd'",
           "truncates": "op = 't'", "except_columns": ["op"]}
SCD2 = {**CHANGES, "track_history_except": ["note"]}
VERSION_COLUMNS = "id BIGINT, name STRING, segment STRING, note STRING, __start_at BIGINT, " \
                  "__end_at BIGINT, __is_current BOOLEAN, __deleted BOOLEAN"
LATEST_COLUMNS = "id BIGINT, name STRING, segment STRING, note STRING, seq BIGINT"


def source_row(event: ref.Event) -> tuple[Any, ...]:
    values = event.values
    return (event.key[0] if event.key else None, values.get("name"), values.get("segment"),
            values.get("note"), event.sequence, CODES[event.op], 0)


def lake_with(lakehouse: Lakehouse, **silver: Any) -> None:
    lakehouse.add_table("bronze", "customers", {**bronze_spec(), "name": "customers"})
    lakehouse.add_table("silver", "customers", {
        "description": "customers, as changes", "name": "customers",
        "source": {"table": "customers", "max_files_per_trigger": 1}, **silver})


def apply(spark: SparkSession, lakehouse: Lakehouse, events: Sequence[ref.Event],
          size: int | None) -> TableRunSummary:
    """The events written to bronze one commit per batch of ``size``, then one silver run."""
    project = lakehouse.project()
    write_delta_commits(spark, project.table("customers", Layer.BRONZE).location,
                        [[source_row(e) for e in batch] for batch in ref.batches(events, size)],
                        SCHEMA)
    job = SilverJob(spark, project.table("customers", Layer.SILVER), RunContext())
    summary = job.run()
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    return summary


def in_order_keys(events: Sequence[ref.Event], size: int | None) -> tuple[int, int]:
    """Over the batches of a stream (none counted when it holds a truncate): the keys whose
    events in the batch are all newer than every earlier event of the key and every earlier
    truncate, and the other keys."""
    newest: dict[ref.Key, Any] = {}
    truncated_at = None
    ahead = behind = 0
    for batch in ref.batches(events, size):
        if all(e.op is not ref.Op.TRUNCATE for e in batch):
            first: dict[ref.Key, Any] = {}
            for e in batch:
                first[e.key] = min(first.get(e.key, e.sequence), e.sequence)
            for key, seq in first.items():
                if (key not in newest or seq > newest[key]) and (
                        truncated_at is None or seq > truncated_at):
                    ahead += 1
                else:
                    behind += 1
        for e in batch:
            if e.op is ref.Op.TRUNCATE:
                truncated_at = max(truncated_at or e.sequence, e.sequence)
            else:
                newest[e.key] = max(newest.get(e.key, e.sequence), e.sequence)
    return ahead, behind


def table(spark: SparkSession, lakehouse: Lakehouse) -> DataFrame:
    return spark.read.format("delta").load(
        lakehouse.project().table("customers", Layer.SILVER).location)


def versions(spark: SparkSession, lakehouse: Lakehouse) -> DataFrame:
    return table(spark, lakehouse).select(*[c.split()[0] for c in VERSION_COLUMNS.split(", ")])


def reference(spark: SparkSession, rows: list[dict[str, Any]], schema: str) -> DataFrame:
    names = [c.split()[0] for c in schema.split(", ")]
    return spark.createDataFrame([tuple(r[n] for n in names) for r in rows], schema)


# One stream for every batching, short (a batch of one event is a run of its own): each case
# at least once, late events among them.
STREAM = ref.changes(seed=0, keys=4, events=14, truncates=1)


def test_the_stream_holds_every_case() -> None:
    assert sorted(ref.kinds(STREAM).items()) == [
        ("deletes", 1), ("duplicates", 2), ("inserts", 4), ("late", 4), ("reinserts", 1),
        ("same", 1), ("tracked", 2), ("truncates", 1), ("untracked", 2)]


@pytest.mark.parametrize("size", [1, 7, None])
def test_scd2_equals_the_reference_for_any_batching(
    spark: SparkSession, tmp_path: Path, size: int | None
) -> None:
    """Batches of one event, of 7 and all at once: each result equals the reference, so the
    three are equal."""
    events = STREAM
    lakehouse = Lakehouse(tmp_path)
    lake_with(lakehouse, mode="scd2", scd2=SCD2)
    with capture_logs() as logs:
        summary = apply(spark, lakehouse, events, size)
    assert summary.batches == len(ref.batches(events, size))
    # A key whose events in a batch are all newer than the log's is folded forward from its
    # current version; any other (a late event, a duplicate) is recomputed from its history.
    applied = [e for e in logs if e["event"] == "silver.batch.changes_applied"]
    paths = (sum(e.get("keys_folded_forward", 0) for e in applied),
             sum(e.get("keys_recomputed", 0) for e in applied))
    assert paths == in_order_keys(events, size)
    if size == 1:
        assert paths == (10, 3)  # both ways, in one stream
    want = reference(spark, ref.scd2(events, keys=ref.KEYS,
                                     track_history_except=ref.UNTRACKED), VERSION_COLUMNS)
    assert_df_equality(versions(spark, lakehouse), want, ignore_row_order=True,
                       ignore_nullable=True)
    if size is None:
        return
    # A driver killed after the last batch's MERGE, before its commit: the batch runs again
    # and changes nothing (the log and the table are written idempotently).
    replay_last_batch(spark, lakehouse, "customers")
    assert_df_equality(versions(spark, lakehouse), want, ignore_row_order=True,
                       ignore_nullable=True)


@pytest.mark.parametrize("size", [7, None])
def test_scd1_with_deletes_and_truncates_equals_the_reference(
    spark: SparkSession, tmp_path: Path, size: int | None
) -> None:
    events = STREAM
    lakehouse = Lakehouse(tmp_path)
    lake_with(lakehouse, mode="upsert", upsert=CHANGES)
    apply(spark, lakehouse, events, size)
    want = reference(spark, ref.scd1(events, keys=ref.KEYS, sequence_by="seq"), LATEST_COLUMNS)
    assert_df_equality(table(spark, lakehouse), want, ignore_row_order=True,
                       ignore_nullable=True, ignore_column_order=True)


def test_a_plain_upsert_is_scd1_without_removals(spark: SparkSession, tmp_path: Path) -> None:
    """``upsert:`` with no ``deletes`` or ``truncates`` keeps no change log (the table holds
    each key's newest event, so it is its own log) and gives the table SCD1 with removals
    gives for the same events, late ones and duplicates among them, equal to the reference."""
    events = [e for e in STREAM if e.op is ref.Op.UPSERT]
    want = reference(spark, ref.scd1(events, keys=ref.KEYS, sequence_by="seq"), LATEST_COLUMNS)
    plain, logged = Lakehouse(tmp_path / "plain"), Lakehouse(tmp_path / "logged")
    lake_with(plain, mode="upsert", upsert={"keys": ["id"], "sequence_by": "seq",
                                            "except_columns": ["op"]})
    lake_with(logged, mode="upsert", upsert=CHANGES)
    for lakehouse in (plain, logged):
        apply(spark, lakehouse, events, 7)
        assert_df_equality(table(spark, lakehouse), want, ignore_row_order=True,
                           ignore_nullable=True, ignore_column_order=True)
    changes = plain.project().table("customers", Layer.SILVER).companion_location("changes")
    assert not Path(changes.removeprefix("file:")).exists()


def test_a_change_without_a_sequence_is_quarantined(spark: SparkSession,
                                                      tmp_path: Path) -> None:
    lakehouse = Lakehouse(tmp_path)
    lake_with(lakehouse, mode="scd2", scd2=SCD2)
    rows = [(1, "A", "retail", "", 1, "u", 0), (2, "B", "smb", "", None, "u", 0)]
    project = lakehouse.project()
    write_delta_commits(spark, project.table("customers", Layer.BRONZE).location, [rows],
                        SCHEMA)
    silver = project.table("customers", Layer.SILVER)
    summary = SilverJob(spark, silver, RunContext()).run()
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    assert summary.counts["quarantined_rows"] == 1 and summary.counts["rule:has_seq"] == 1
    assert [r["id"] for r in table(spark, lakehouse).collect()] == [1]
    quarantined = spark.read.format("delta").load(silver.companion_location("quarantine"))
    assert [r["_failed_rules"] for r in quarantined.collect()] == [["has_seq"]]


def test_scd2_config_errors(tmp_path: Path) -> None:
    lakehouse = Lakehouse(tmp_path)
    lake_with(lakehouse, mode="scd2", upsert=CHANGES)
    with pytest.raises(ConfigValidationError) as info:
        lakehouse.project()
    text = str(info.value)
    assert "expected scd2: {keys: [...], sequence_by: column} with mode scd2, found none" in text
    assert "expected upsert: only with mode upsert, found it with mode scd2" in text


def test_a_table_written_in_another_mode_is_refused_with_what_to_do(
        spark: SparkSession, tmp_path: Path) -> None:
    """A table's mode changed in its spec (an SCD1 table without a change log made SCD2, or
    given deletes; an SCD2 table made SCD1): its rows cannot be carried on, and the run says
    so, writing nothing, instead of failing deep in a MERGE or recomputing keys from an empty
    log."""
    events = [e for e in STREAM[:6] if e.op is ref.Op.UPSERT]
    advice = "cannot be carried on in the new mode. Rebuild it from its source: 'medallion " \
        "refresh silver.customers --downstream'"

    def refused(lakehouse: Lakehouse, **spec: Any) -> str:  # (when the next batch comes)
        lake_with(lakehouse, **spec)
        project = lakehouse.project()
        write_delta_commits(spark, project.table("customers", Layer.BRONZE).location,
                            [[source_row(events[0])]], SCHEMA)
        silver = project.table("customers", Layer.SILVER)
        history = spark.sql(f"DESCRIBE HISTORY delta.`{silver.location}`").count()
        summary = SilverJob(spark, silver, RunContext()).run()
        assert summary.status is RunStatus.FAILED
        # nothing written: not a row, not a column
        assert spark.sql(f"DESCRIBE HISTORY delta.`{silver.location}`").count() == history
        return str(summary.error)

    scd1 = Lakehouse(tmp_path / "scd1")
    lake_with(scd1, mode="upsert", upsert={"keys": ["id"], "sequence_by": "seq",
                                           "except_columns": ["op"]})
    apply(spark, scd1, events, None)
    assert "expected a table written in mode scd2, with a change log, found one written " \
        "without SCD type 2 versions: its rows " + advice in refused(scd1, mode="scd2", scd2=SCD2)
    assert "expected a table written in mode upsert, with a change log, found one written " \
        "without a change log: its rows " + advice in refused(scd1, mode="upsert", upsert=CHANGES)
    # what the message says to do: the refresh makes the emptied table again in the new mode
    # (its columns: SCD2's versions) and rebuilds it from the whole of bronze
    lake_with(scd1, mode="scd2", scd2=SCD2)
    assert main(["refresh", "silver.customers", "--conf", str(scd1.conf),
                 "--env", scd1.env_name, "--log-format", "json"]) == 0
    want = reference(spark, ref.scd2(events, keys=ref.KEYS,
                                     track_history_except=ref.UNTRACKED), VERSION_COLUMNS)
    assert_df_equality(versions(spark, scd1), want, ignore_row_order=True,
                       ignore_nullable=True)

    scd2 = Lakehouse(tmp_path / "scd2")
    lake_with(scd2, mode="scd2", scd2=SCD2)
    apply(spark, scd2, events, None)
    assert "expected a table written in mode upsert, found one written with SCD type 2 " \
        "versions: its rows " + advice in refused(scd2, mode="upsert", upsert={
            "keys": ["id"], "sequence_by": "seq", "except_columns": ["op"]})


def test_a_column_the_feed_gains_reaches_the_table_and_its_change_log(
        spark: SparkSession, tmp_path: Path) -> None:
    lakehouse = Lakehouse(tmp_path)
    lake_with(lakehouse, mode="scd2", scd2=SCD2)  # (no columns: every source column taken)
    apply(spark, lakehouse, [e for e in STREAM[:6] if e.op is ref.Op.UPSERT], None)
    project = lakehouse.project()
    spark.createDataFrame([(999, "n", "s", "x", 10_000, "u", 0, "gold")],
                          SCHEMA + ", tier STRING").write.format("delta").mode("append") \
        .option("mergeSchema", "true").save(project.table("customers", Layer.BRONZE).location)
    silver = project.table("customers", Layer.SILVER)
    summary = SilverJob(spark, silver, RunContext()).run()
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    log = spark.read.format("delta").load(silver.companion_location("changes"))
    assert "tier" in log.columns
    rows = table(spark, lakehouse)
    assert [r.tier for r in rows.where("id = 999").collect()] == ["gold"]
    assert rows.where("tier IS NULL").count() == rows.count() - 1  # earlier rows: null


THIRD = {"name": "not_third", "rule": "seq % 3 != 2", "action": "quarantine"}
PLAIN = {"keys": ["id"], "sequence_by": "seq", "except_columns": ["op"]}


@pytest.mark.parametrize("mode", ["scd2", "upsert", "plain upsert"])
def test_changes_quarantined_then_replayed_give_the_table_they_would_have_given(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        mode: str) -> None:
    """A rule quarantines every change of sequence 2 mod 3 (a delete and a duplicate among them);
    the rule dropped, ``quarantine replay`` applies them as changes, late ones at their place in
    each key's history: the table equals the reference of the whole stream, and a second replay
    changes nothing."""
    events = STREAM if mode != "plain upsert" else \
        [e for e in STREAM if e.op is ref.Op.UPSERT]
    spec: dict[str, Any] = {"scd2": {"mode": "scd2", "scd2": SCD2},
                            "upsert": {"mode": "upsert", "upsert": CHANGES},
                            "plain upsert": {"mode": "upsert", "upsert": PLAIN}}[mode]
    if mode == "scd2":
        want = reference(spark, ref.scd2(events, keys=ref.KEYS,
                                         track_history_except=ref.UNTRACKED), VERSION_COLUMNS)
        got = versions
    else:
        want = reference(spark, ref.scd1(events, keys=ref.KEYS, sequence_by="seq"),
                         LATEST_COLUMNS)
        got = table
    held_back = [e for e in events if e.sequence % 3 == 2]
    passed = [e for e in events if e not in held_back]
    # replayed after newer changes of their key: each lands inside its key's history
    assert len(held_back) >= 3 and any(
        e.sequence < max((p.sequence for p in passed if p.key == e.key), default=-1)
        for e in held_back)
    if mode != "plain upsert":
        assert any(e.op is not ref.Op.UPSERT for e in held_back)  # a removal among them
    lakehouse = Lakehouse(tmp_path)
    lake_with(lakehouse, expectations=[THIRD], **spec)
    summary = apply(spark, lakehouse, events, 7)
    assert summary.counts["quarantined_rows"] == len(held_back)
    assert summary.counts["rule:not_third"] == len(held_back)

    lake_with(lakehouse, **spec)  # the rule dropped
    assert cli(lakehouse, "quarantine", "replay", "customers") == 0
    out = capsys.readouterr().out
    assert f"{len(held_back)} rows replayed: {len(held_back)} written, 0 quarantined again" in out
    assert_df_equality(got(spark, lakehouse), want, ignore_row_order=True,
                       ignore_nullable=True, ignore_column_order=True)
    assert "_replay_id" not in table(spark, lakehouse).columns
    quarantine = spark.read.format("delta").load(
        lakehouse.project().table("customers", Layer.SILVER).companion_location("quarantine"))
    assert sorted(r["_state"] for r in quarantine.collect()) == ["replayed"] * len(held_back)

    assert cli(lakehouse, "quarantine", "replay", "customers") == 0  # none left
    assert ".customers: no quarantined rows to replay" in capsys.readouterr().out
    assert_df_equality(got(spark, lakehouse), want, ignore_row_order=True,
                       ignore_nullable=True, ignore_column_order=True)


def test_a_mart_joins_facts_to_the_version_valid_at_their_time_and_still_prunes(
    spark: SparkSession, tmp_path: Path
) -> None:
    from framework.pruning import explain_pruning
    from gold.mart import MartJob

    lakehouse = Lakehouse(tmp_path)
    lake_with(lakehouse, mode="scd2", scd2=SCD2)
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", {"source": "orders", "partition_by": ["id"]})
    for name, as_of in (("orders_then", {"as_of": "seq"}), ("orders_now", {})):
        lakehouse.add_table("gold", name, {
            "kind": "mart", "fact": {"table": "orders", "layer": "silver"},
            "dimensions": [{"table": "customers", "on": "id", "columns": ["segment"],
                            **as_of}]})
    # Customer 1: retail from 10, smb from 20, deleted at 30, back as enterprise at 40;
    # customer 2: retail from 10 only; customers 3..9: smb from 5.
    changes = [ref.Event((1,), 10, ref.Op.UPSERT, {"name": "A", "segment": "retail", "note": ""}),
               ref.Event((1,), 20, ref.Op.UPSERT, {"name": "A", "segment": "smb", "note": ""}),
               ref.Event((1,), 30, ref.Op.DELETE),
               ref.Event((1,), 40, ref.Op.UPSERT,
                         {"name": "A", "segment": "enterprise", "note": ""}),
               ref.Event((2,), 10, ref.Op.UPSERT, {"name": "B", "segment": "retail", "note": ""}),
               *[ref.Event((c,), 5, ref.Op.UPSERT, {"name": "C", "segment": "smb", "note": ""})
                 for c in range(3, 10)]]
    apply(spark, lakehouse, changes, None)
    project = lakehouse.project()
    orders = project.table("orders", Layer.SILVER)
    # An order of customer 1 at each time (5: before its first version), one of each other.
    rows = [(f"o{t}", 1, t) for t in (5, 15, 25, 35, 45)] + [(f"p{c}", c, 50)
                                                              for c in range(2, 10)]
    spark.createDataFrame(rows, "order_id STRING, id BIGINT, seq BIGINT").write \
        .format("delta").partitionBy("id").save(orders.location)
    spark.sql(f"CREATE TABLE {orders.full_name} USING DELTA LOCATION '{orders.location}'")
    for name in ("orders_then", "orders_now"):
        summary = MartJob(spark, project.table(name, Layer.GOLD), RunContext()).run()
        assert summary.status is RunStatus.SUCCEEDED, summary.error

    then = project.table("orders_then", Layer.GOLD).full_name
    now = project.table("orders_now", Layer.GOLD).full_name
    want = "order_id STRING, id BIGINT, seq BIGINT, segment STRING"
    assert_df_equality(
        spark.table(then), spark.createDataFrame(
            [("o15", 1, 15, "retail"), ("o25", 1, 25, "smb"), ("o45", 1, 45, "enterprise"),
             ("p2", 2, 50, "retail"), *[(f"p{c}", c, 50, "smb") for c in range(3, 10)]], want),
        ignore_row_order=True, ignore_nullable=True, ignore_metadata=True)
    assert_df_equality(
        spark.table(now), spark.createDataFrame(
            [*[(f"o{t}", 1, t, "enterprise") for t in (5, 15, 25, 35, 45)],
             ("p2", 2, 50, "retail"), *[(f"p{c}", c, 50, "smb") for c in range(3, 10)]], want),
        ignore_row_order=True, ignore_nullable=True, ignore_metadata=True)

    # A filter on the dimension prunes the fact (partitioned by the join key) to the keys
    # whose version matches: 1 and 2 of 9 for retail.
    pruned = explain_pruning(spark, f"SELECT count(*) FROM {then} WHERE segment = 'retail'")
    fact = pruned.scan("orders")
    assert pruned.dynamic_pruning and fact.dynamic_pruning
    assert (fact.partitions_read, fact.partitions_total) == (2, 9)

    other = Lakehouse(tmp_path / "other")
    lake_with(other, mode="scd2", columns=[{"name": c} for c in ("id", "name", "seq", "op")],
              scd2={**CHANGES, "except_columns": ["op", "seq"], "track_history": ["segment"]})
    with pytest.raises(ConfigValidationError) as info:
        other.project()
    text = str(info.value)
    assert "scd2.track_history: expected columns among the output columns (id, name, op, seq)" \
        ", found segment" in text
    assert "expected the sequence_by columns to be kept, found seq in except_columns" in text
    with pytest.raises(ConfigValidationError, match="expected at most one of track_history and "
                       "track_history_except, found both"):
        lake_with(other, mode="scd2", scd2={**SCD2, "track_history": ["name"]})
        other.project()
