"""The quarantine's lifecycle (silver.quarantine): list quarantined rows by rule and age, replay
them through the table's spec as it is now, exactly once, or discard them with a reason."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from framework.config.model import Layer
from framework.job import RunContext, RunStatus, TableRunSummary
from silver.job import SilverJob
from tests.support import Lakehouse, bronze_spec, cli, silver_spec, write_delta_commits

BASE = datetime(2026, 11, 1, 8, 0, 0)
COLUMNS = [{"name": "order_id"}, {"name": "quantity", "type": "tinyint"},
           {"name": "event_time"}, {"name": "ingested_batch", "expr": "_batch_id"}]
TENTHS = [{**c, "expr": "quantity div 10"} if c["name"] == "quantity" else c for c in COLUMNS]
POSITIVE = {"name": "positive_quantity", "rule": "quantity > 0", "action": "quarantine"}


def row(key: str, quantity: int, minutes: int, batch: int = 7) -> tuple[Any, ...]:
    return (key, "c1", quantity, BASE + timedelta(minutes=minutes), batch)


def setup(lakehouse: Lakehouse, **spec: Any) -> str:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    lakehouse.add_table("silver", "orders", silver_spec(
        columns=COLUMNS, event_time="event_time", expectations=[POSITIVE], **spec))
    return lakehouse.project().table("orders", Layer.BRONZE).location


def respec(lakehouse: Lakehouse, **changes: Any) -> None:
    path = lakehouse.conf / "tables" / "silver" / "orders.yaml"
    spec = yaml.safe_load(path.read_text())
    spec.update(changes)
    lakehouse.add_table("silver", "orders", spec)


def run(spark: SparkSession, lakehouse: Lakehouse) -> TableRunSummary:
    summary = SilverJob(spark, lakehouse.project().table("orders", Layer.SILVER),
                        RunContext()).run()
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    return summary


def table_rows(spark: SparkSession, lakehouse: Lakehouse) -> list[tuple[Any, ...]]:
    """(order_id, quantity, ingested_batch, _replay_id or None) of silver.orders."""
    df = spark.read.format("delta").load(
        lakehouse.project().table("orders", Layer.SILVER).location)
    replay = F.col("_replay_id") if "_replay_id" in df.columns else F.lit(None)
    return sorted(tuple(r) for r in df.select("order_id", "quantity", "ingested_batch",
                                              replay).collect())


def quarantine_rows(spark: SparkSession, lakehouse: Lakehouse) -> list[tuple[Any, ...]]:
    """(order_id, quantity, rules, state, replay id, reason) of the quarantine."""
    location = lakehouse.project().table("orders", Layer.SILVER) \
        .companion_location("quarantine")
    return sorted(
        (json.loads(r["_row"])["order_id"], json.loads(r["_row"]).get("quantity"),
         sorted(r["_failed_rules"]), r["_state"], r["_replay_id"], r["_reason"])
        for r in spark.read.format("delta").load(location).collect())


def replay_ids(spark: SparkSession, lakehouse: Lakehouse) -> set[int]:
    return {r[3] for r in table_rows(spark, lakehouse) if r[3] is not None}


def test_rows_quarantined_by_a_rule_are_replayed_once_after_the_rule_is_corrected(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rule too strict quarantines o2 (quantity 0) and o3 (-1). Corrected to quantity >= 0,
    a replay writes o2 with its original ingestion columns and the replay's id, o3 breaks the
    rule again and is quarantined again; the rows taken are marked replayed; a second replay
    takes only what is quarantined now."""
    bronze = setup(lakehouse)
    write_delta_commits(spark, bronze, [[row("o1", 1, 1), row("o2", 0, 2, batch=11),
                                         row("o3", -1, 3), row("o4", 5, 4)]])
    run(spark, lakehouse)
    assert [r[0] for r in table_rows(spark, lakehouse)] == ["o1", "o4"]

    assert cli(lakehouse, "quarantine", "list", "orders") == 0
    listed = [line.split("|") for line in capsys.readouterr().out.splitlines()]
    assert [[c.strip() for c in line[:3]] for line in listed if len(line) == 5][1:] == [
        ["quarantined", "positive_quantity", "2"]]

    respec(lakehouse, expectations=[{**POSITIVE, "rule": "quantity >= 0"}])
    assert cli(lakehouse, "quarantine", "replay", "silver.orders") == 0
    out = capsys.readouterr().out
    assert "2 rows replayed: 1 written, 1 quarantined again" in out

    (replay,) = replay_ids(spark, lakehouse)
    assert table_rows(spark, lakehouse) == [("o1", 1, 7, None), ("o2", 0, 11, replay),
                                            ("o4", 5, 7, None)]
    assert quarantine_rows(spark, lakehouse) == [
        ("o2", 0, ["positive_quantity"], "replayed", replay, None),
        ("o3", -1, ["positive_quantity"], "quarantined", None, None),
        ("o3", -1, ["positive_quantity"], "replayed", replay, None)]

    # nothing more to replay by this rule but o3, which breaks it again
    assert cli(lakehouse, "quarantine", "replay", "orders", "--rule", "no_such_rule") == 0
    assert "no quarantined rows to replay" in capsys.readouterr().out
    assert [r[0] for r in table_rows(spark, lakehouse)] == ["o1", "o2", "o4"]


def test_a_value_that_did_not_fit_its_type_is_replayed_from_its_source_row(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    """300 does not fit a tinyint: quarantined (cast:quantity), its typed row holds null. The
    column's expression corrected to tenths, the replay reads the source row kept beside it
    (300), and writes 30."""
    bronze = setup(lakehouse)
    write_delta_commits(spark, bronze, [[row("o1", 1, 1), row("o2", 300, 2)]])
    run(spark, lakehouse)
    assert quarantine_rows(spark, lakehouse) == [  # (null is no positive quantity either)
        ("o2", None, ["cast:quantity", "positive_quantity"], "quarantined", None, None)]

    respec(lakehouse, columns=TENTHS)
    assert cli(lakehouse, "quarantine", "replay", "orders", "--rule", "cast:quantity") == 0

    (replay,) = replay_ids(spark, lakehouse)
    assert table_rows(spark, lakehouse) == [("o1", 1, 7, None), ("o2", 30, 7, replay)]
    assert [r[3] for r in quarantine_rows(spark, lakehouse)] == ["replayed"]


def test_a_replay_stopped_before_its_last_step_is_completed_once_by_the_next_command(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    """A constraint refuses the replay's last step (rows marked replayed) after its writes:
    the rows stay 'replaying', list says so; the next replay completes it, writing nothing
    twice; the rows replayed keep their place."""
    bronze = setup(lakehouse)
    write_delta_commits(spark, bronze, [[row("o1", 1, 1), row("o2", 0, 2), row("o3", -2, 3)]])
    run(spark, lakehouse)
    respec(lakehouse, expectations=[{**POSITIVE, "rule": "quantity >= 0"}])
    location = lakehouse.project().table("orders", Layer.SILVER) \
        .companion_location("quarantine")
    spark.sql(f"ALTER TABLE delta.`{location}` ADD CONSTRAINT not_yet "
              "CHECK (_state IS NULL OR _state <> 'replayed')")

    assert cli(lakehouse, "quarantine", "replay", "orders") == 1
    capsys.readouterr()
    (replay,) = replay_ids(spark, lakehouse)
    assert [r[0] for r in table_rows(spark, lakehouse)] == ["o1", "o2"]
    assert [r[3] for r in quarantine_rows(spark, lakehouse)] == [
        "replaying", "quarantined", "replaying"]
    assert cli(lakehouse, "quarantine", "list", "orders") == 0
    assert f"replay {replay} was stopped half way" in capsys.readouterr().out

    spark.sql(f"ALTER TABLE delta.`{location}` DROP CONSTRAINT not_yet")
    assert cli(lakehouse, "quarantine", "replay", "orders", "--rule", "none_such") == 0
    assert f"completed replay {replay}: 2 rows replayed: 1 written, 1 quarantined again" in \
        capsys.readouterr().out
    assert table_rows(spark, lakehouse) == [("o1", 1, 7, None), ("o2", 0, 7, replay)]
    assert quarantine_rows(spark, lakehouse) == [
        ("o2", 0, ["positive_quantity"], "replayed", replay, None),
        ("o3", -2, ["positive_quantity"], "quarantined", None, None),
        ("o3", -2, ["positive_quantity"], "replayed", replay, None)]


def test_a_replay_of_a_deduplicated_table_writes_no_key_twice(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    """o2 was quarantined, then sent again right, after the watermark passed it, and written;
    o5 was quarantined twice. The replay writes o5 once and o2 not at all (its key is in the
    table)."""
    bronze = setup(lakehouse, dedup={"keys": ["order_id"], "delay": "1 minute"})
    write_delta_commits(spark, bronze, [[row("o1", 1, 1), row("o2", 0, 2), row("o5", 0, 3)],
                                        [row("p1", 1, 30)], [row("p2", 1, 31)],
                                        [row("o2", 2, 32)], [row("o5", 0, 33)]])
    # (the state forgets o* in the batch after the one that moved the watermark past them)
    run(spark, lakehouse)
    assert [r[0] for r in table_rows(spark, lakehouse)] == ["o1", "o2", "p1", "p2"]
    assert [r[0] for r in quarantine_rows(spark, lakehouse)] == ["o2", "o5", "o5"]

    respec(lakehouse, expectations=[{**POSITIVE, "rule": "quantity >= 0"}])
    assert cli(lakehouse, "quarantine", "replay", "orders") == 0

    (replay,) = replay_ids(spark, lakehouse)
    assert [(r[0], r[3]) for r in table_rows(spark, lakehouse)] == [
        ("o1", None), ("o2", None), ("o5", replay), ("p1", None), ("p2", None)]


def test_discard_sets_rows_aside_with_a_reason_and_replay_leaves_them(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    bronze = setup(lakehouse)
    write_delta_commits(spark, bronze, [[row("o1", 0, 1), row("o2", 300, 2)]])
    run(spark, lakehouse)

    assert cli(lakehouse, "quarantine", "discard", "orders", "--rule", "cast:quantity") == 2
    assert cli(lakehouse, "quarantine", "discard", "orders", "--rule", "cast:quantity",
               "--reason", "sensor glitch, confirmed with the shop") == 0
    assert "1 quarantined rows discarded" in capsys.readouterr().out
    assert cli(lakehouse, "quarantine", "list", "orders", "--older-than", "1d") == 0
    assert "(0 rows)" in capsys.readouterr().out  # (none that old)

    respec(lakehouse, expectations=[{**POSITIVE, "rule": "quantity >= 0"}],
           columns=TENTHS)
    assert cli(lakehouse, "quarantine", "replay", "orders") == 0

    assert [r[0] for r in table_rows(spark, lakehouse)] == ["o1"]
    assert [(r[0], r[3], r[5]) for r in quarantine_rows(spark, lakehouse)] == [
        ("o1", "replayed", None), ("o2", "discarded", "sensor glitch, confirmed with the shop")]


def test_the_command_refuses_bad_input_with_what_it_expected(
    lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    setup(lakehouse)
    assert cli(lakehouse, "quarantine", "replay", "orders", "--older-than", "soon") == 2
    assert "expected --older-than as 30d, 12h or 90m, found 'soon'" in capsys.readouterr().err
    assert cli(lakehouse, "quarantine", "list", "bronze.orders") == 2
    assert "expected a silver table (quarantined rows are a silver table's), found " \
        "bronze.orders" in capsys.readouterr().err
