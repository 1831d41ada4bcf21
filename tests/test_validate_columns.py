"""``medallion validate`` checks each key naming a column of an upstream table against the
columns that table declares (with and without Spark), and says which tables Spark could not
check."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

from bronze.batch import METADATA_FIELDS
from bronze.spec import INGESTION_COLUMNS
from framework.cli import main
from framework.columns import Column, ddl_columns
from framework.config.model import Layer
from tests.support import REPO, Lakehouse

FEED = {"path": "landing/events", "format": "json"}
CHANGES = {"source": {"path": "landing/accounts", "format": "json",
                      "schema": "id BIGINT, name STRING"}, "cdc": "debezium"}


def validate(lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str], *options: str
             ) -> tuple[int, dict[str, str]]:
    """The exit code of ``medallion validate`` and its problems, by file (under conf/tables)
    and key."""
    code = main(["validate", "--conf", str(lakehouse.conf), "--env", lakehouse.env_name,
                 *options])
    err = capsys.readouterr().err
    problems = dict(line.split("/tables/", 1)[1].split(": ", 1)
                    for line in err.splitlines() if line.startswith("  - "))
    return code, problems


def events(**silver: Any) -> dict[str, Any]:
    """A silver table of bronze.events (``id STRING, d DATE``), with event time ``d``."""
    return {"source": "events", "event_time": "d", **silver}


def test_bronze_declares_the_columns_it_adds() -> None:
    assert [Column(f.name, f.dataType.simpleString()) for f in METADATA_FIELDS] == \
        list(INGESTION_COLUMNS)


def test_ddl_is_read_into_columns_without_spark() -> None:
    assert ddl_columns("`a b` DECIMAL(10, 2), m MAP<STRING, INT> NOT NULL COMMENT 'x, y', "
                       "t timestamp") == (Column("a b", "decimal(10,2)"),
                                          Column("m", "map<string,int>"),
                                          Column("t", "timestamp"))
    assert ddl_columns("id BIGINT, (") is None


@pytest.mark.parametrize("options", [["--no-spark"], []], ids=["no_spark", "spark"])
def test_an_event_time_that_is_no_timestamp_is_refused_with_the_cast_to_add(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str],
    options: list[str]
) -> None:
    lakehouse.add_table("bronze", "events", {"source": {**FEED, "schema": "id STRING, d DATE"}})
    lakehouse.add_table("silver", "events", events(columns=[{"name": "id"}, {"name": "d"}]))
    lakehouse.add_table("silver", "untyped", events())  # every column of the source

    code, problems = validate(lakehouse, capsys, *options)
    assert code == 2
    assert sorted(problems) == ["silver/events.yaml:event_time", "silver/untyped.yaml:event_time"]
    assert problems["silver/events.yaml:event_time"] == (
        "expected event_time to name a TIMESTAMP column (Spark's watermark takes no other), "
        'found d of type date: give columns[1] type: timestamp, or expr: "to_timestamp(d)" '
        '(or "cast(d AS timestamp)")')
    assert "found d of type date: list it in columns with {name: d, type: timestamp}" in \
        problems["silver/untyped.yaml:event_time"]

    lakehouse.add_table("silver", "events", events(
        columns=[{"name": "id"}, {"name": "d", "type": "timestamp"}]))
    (lakehouse.conf / "tables" / "silver" / "untyped.yaml").unlink()
    assert validate(lakehouse, capsys, *options) == (0, {})


def test_gold_event_time_of_a_type_only_spark_knows_is_refused_with_spark(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.add_table("bronze", "events", {"source": {**FEED, "schema": "id STRING, d DATE"}})
    lakehouse.add_table("silver", "events", events(columns=[
        {"name": "id"}, {"name": "d", "type": "timestamp"}, {"name": "day", "expr": "to_date(d)"}]))
    lakehouse.add_table("gold", "daily", {
        "source": "events", "event_time": "day", "watermark": "1 hour",
        "window": {"type": "tumbling", "duration": "1 day"},
        "aggregates": [{"name": "events", "expr": "count(*)"}]})
    # an expression's type is not known without Spark
    assert validate(lakehouse, capsys, "--no-spark") == (0, {})
    code, problems = validate(lakehouse, capsys)
    silver = lakehouse.project().table("events", Layer.SILVER).full_name
    assert code == 2 and problems == {"gold/daily.yaml:event_time": (
        f"expected event_time to name a TIMESTAMP column of {silver} (Spark's watermark takes "
        f"no other), found day of type date: make it one in the spec of {silver} (type: "
        f'timestamp on its column, or expr: "to_timestamp(...)")')}


def test_change_keys_must_name_columns_of_a_debezium_feed(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.add_table("bronze", "accounts", CHANGES)
    lakehouse.add_table("silver", "accounts", {
        "source": "accounts", "mode": "upsert",
        "upsert": {"keys": ["id"], "sequence_by": "lsn", "deletes": "op = 'd'"}})
    lakehouse.add_table("silver", "hidden", {  # _ columns are taken only when listed
        "source": "accounts", "mode": "upsert",
        "upsert": {"keys": ["id"], "sequence_by": "_cdc_sequence"}})
    bronze = lakehouse.project().table("accounts", Layer.BRONZE).full_name

    code, problems = validate(lakehouse, capsys, "--no-spark")
    assert code == 2 and sorted(problems) == ["silver/accounts.yaml:upsert.sequence_by",
                                              "silver/hidden.yaml:upsert.sequence_by"]
    assert problems["silver/accounts.yaml:upsert.sequence_by"] == (
        f"expected a column of {bronze} (columns: id, name, _cdc_op, _cdc_ts_ms, _cdc_sequence, "
        f"_rescued_data, _source_file, _file_modification_time, _file_size, _ingested_at, "
        f"_batch_id), found 'lsn'")
    assert problems["silver/hidden.yaml:upsert.sequence_by"] == (
        f"expected a column silver takes from {bronze} without columns (all but those starting "
        f"with _), found '_cdc_sequence': list the columns to keep in columns, with "
        f"{{name: _cdc_sequence}}")

    # the keys right, the condition still naming a column the table lacks: Spark says so
    listed = {"source": "accounts", "mode": "upsert",
              "columns": [{"name": "id"}, {"name": "name"}, {"name": "_cdc_op"},
                          {"name": "_cdc_sequence"}],
              "upsert": {"keys": ["id"], "sequence_by": "_cdc_sequence", "deletes": "op = 'd'",
                         "except_columns": ["_cdc_op"]}}
    lakehouse.add_table("silver", "accounts", listed)
    (lakehouse.conf / "tables" / "silver" / "hidden.yaml").unlink()
    assert validate(lakehouse, capsys, "--no-spark") == (0, {})
    code, problems = validate(lakehouse, capsys)
    assert code == 2 and list(problems) == ["silver/accounts.yaml:upsert.deletes"]
    assert problems["silver/accounts.yaml:upsert.deletes"].startswith(
        "expected a condition over the columns of ")
    assert "found \"op = 'd'\": [UNRESOLVED_COLUMN" in \
        problems["silver/accounts.yaml:upsert.deletes"]

    lakehouse.add_table("silver", "accounts", {
        **listed, "upsert": {**listed["upsert"], "deletes": "_cdc_op = 'd'"}})
    assert validate(lakehouse, capsys) == (0, {})


def test_a_misspelt_aggregate_and_a_broken_rule_are_found_in_the_first_pass(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.add_table("bronze", "orders", {"source": {
        **FEED, "schema": "order_id STRING, amount INT, event_time TIMESTAMP"}})
    lakehouse.add_table("silver", "orders", {
        "source": "orders", "event_time": "event_time",
        "expectations": [{"name": "positive", "rule": "amount > 0 AND"},
                         # an alias of a name is the spec's own to replace: no problem
                         {"name": "aliased", "rule": "amount < 1000 AS small"}],
        "dedup": {"keys": ["order_id"], "delay": "1 hour"}})
    lakehouse.add_table("gold", "totals", {
        "source": "orders", "event_time": "event_time", "watermark": "1 hour",
        "window": {"type": "tumbling", "duration": "1 hour"}, "group_by": ["ordr_id"],
        "aggregates": [{"name": "total", "expr": "sum(amout)"}],
        "output_mode": "sometimes"})  # a problem of the configuration

    code, problems = validate(lakehouse, capsys)
    assert code == 2
    assert sorted(problems) == ["gold/totals.yaml:aggregates[0].expr",
                                "gold/totals.yaml:group_by[0]", "gold/totals.yaml:output_mode",
                                "silver/orders.yaml:expectations[0].rule"]
    assert problems["silver/orders.yaml:expectations[0].rule"] == (
        "expected a Spark SQL expression such as 'sum(amount)' or 'quantity > 0', found "
        "'amount > 0 AND': it ends in a word Spark takes for the column's name (an alias), not "
        "part of the expression: an operator without its right side?")
    assert "found 'sum(amout)': [UNRESOLVED_COLUMN" in \
        problems["gold/totals.yaml:aggregates[0].expr"]
    # (the spec has a problem of its own: its columns are resolved by Spark alone)
    assert "found 'ordr_id': [UNRESOLVED_COLUMN" in problems["gold/totals.yaml:group_by[0]"]


def test_validate_says_which_tables_spark_did_not_check(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.add_table("bronze", "orders", {"source": {**FEED, "schema": "id STRING"},
                                             "colour": "blue", "rescued_column": [1]})
    lakehouse.add_table("bronze", "broken", {"description": "no source"})
    lakehouse.add_table("silver", "orders", {"source": "broken"})
    args = ["validate", "--conf", str(lakehouse.conf), "--env", lakehouse.env_name]
    assert main(args) == 2
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "with Spark" in line]
    spec = lakehouse.conf / "tables" / "bronze" / "broken.yaml"
    assert notes == [
        f"bronze.broken: SQL not checked with Spark until the problems above are fixed "
        f"({spec})",
        "silver.orders: columns not resolved with Spark until the problems of bronze.broken "
        "above are fixed"]
    assert main([*args, "--no-spark"]) == 2  # without Spark, nothing to say of it
    assert "with Spark" not in capsys.readouterr().err


def test_the_shipped_configuration_passes_the_column_checks(
    capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "--conf", str(REPO / "conf"), "--env", "local", "--no-spark"]) == 0
    assert "configuration valid" in capsys.readouterr().out


@pytest.mark.parametrize("missing", ["watermark", "event_time"])
def test_a_window_without_its_watermark_or_event_time_is_one_problem_with_spark(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str], missing: str
) -> None:
    """A window the spec cannot close is said once, and Spark's check of the rest goes on."""
    lakehouse.add_table("bronze", "events", {"source": {**FEED,
                                                        "schema": "id STRING, t TIMESTAMP"}})
    lakehouse.add_table("silver", "events", {"source": "events", "event_time": "t"})
    spec = {"source": "events", "event_time": "t", "watermark": "1 hour",
            "window": {"type": "tumbling", "duration": "1 hour"}, "group_by": ["id"],
            "aggregates": [{"name": "n", "expr": "count(*)"}]}
    del spec[missing]
    lakehouse.add_table("gold", "hourly", spec)
    code, problems = validate(lakehouse, capsys)
    assert code == 2
    assert list(problems) == [f"gold/hourly.yaml:{missing}"], problems
    assert problems[f"gold/hourly.yaml:{missing}"].startswith(
        f"expected key '{missing}' with a tumbling window"), problems
