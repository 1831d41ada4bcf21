"""framework.delta: small tables the framework builds from Python values, tables made and
found, their history and properties by name or by location."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    BooleanType,
    DateType,
    DecimalType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from framework.delta import (
    append,
    clear_unfinished_create,
    create_table,
    detail,
    is_delta_table,
    latest_commit,
    literal_rows,
    read_table,
    set_properties,
    table_properties,
)

SCHEMA = StructType([
    StructField("path", StringType()),
    StructField("size", LongType()),
    StructField("at", TimestampType()),
    StructField("day", DateType()),
    StructField("price", DecimalType(10, 2)),
    StructField("ok", BooleanType()),
])


@pytest.fixture
def new_york(spark: SparkSession) -> Iterator[None]:
    """A session time zone other than the process's, as on a cluster set to local time."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    yield
    spark.conf.set("spark.sql.session.timeZone", str(before))


def test_literal_rows_hold_every_value_as_createdataframe_does(spark: SparkSession,
                                                               new_york: None) -> None:
    naive = datetime(2026, 11, 22, 23, 30, 15, 123456)
    aware = datetime(2026, 3, 8, 2, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    rows = [
        (f'landing/o\'r"d\\er {i} é.json', i * 1_000_003, naive + timedelta(minutes=i),
         date(2026, 1, 1) + timedelta(days=i), Decimal(f"{i}.{i % 100:02d}"), i % 2 == 0)
        for i in range(300)
    ] + [
        ("aware", 1, aware, None, None, None),
        (None, None, datetime(2026, 1, 1, tzinfo=UTC), None, Decimal("-0.01"), False),
    ]
    expected = spark.createDataFrame(rows, SCHEMA)
    assert_df_equality(literal_rows(spark, rows, SCHEMA), expected, ignore_row_order=True)


def test_literal_rows_of_nothing_is_an_empty_table_of_the_schema(spark: SparkSession) -> None:
    df = literal_rows(spark, [], SCHEMA)
    assert df.schema == SCHEMA
    assert df.count() == 0


def test_a_value_that_does_not_fit_its_column_fails_rather_than_turning_null(
    spark: SparkSession,
) -> None:
    with pytest.raises(Exception, match=r"FAILFAST|Malformed"):
        literal_rows(spark, [("a", "not a number", None, None, None, None)], SCHEMA).collect()


@pytest.mark.parametrize("spelling", ["", "file:"])
@pytest.mark.parametrize("leftover", [[], [".00000000000000000000.json.3f2a.tmp"]])
def test_a_create_killed_before_its_first_commit_does_not_block_the_table(
        spark: SparkSession, tmp_path: Path, leftover: list[str], spelling: str) -> None:
    # What `bench/chaos.py --seed 3` found: the driver killed inside CREATE TABLE left an
    # empty _delta_log, and every later run failed with DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION.
    location = tmp_path / "orders"
    (location / "_delta_log").mkdir(parents=True)
    for name in leftover:
        (location / "_delta_log" / name).write_text('{"commitInfo":')
    name = f"spark_catalog.default.unfinished_{len(leftover)}_{uuid.uuid4().hex[:6]}"
    schema = StructType([StructField("id", LongType())])
    assert not is_delta_table(spark, spelling + str(location))  # an empty log is no table
    assert create_table(spark, name, schema, spelling + str(location))
    assert is_delta_table(spark, spelling + str(location))
    assert spark.table(name).count() == 0
    assert sorted(p.name for p in (location / "_delta_log").iterdir() if p.suffix == ".json") \
        == ["00000000000000000000.json"]


def test_a_location_holding_data_is_left_for_delta_to_refuse(
        spark: SparkSession, tmp_path: Path) -> None:
    location = tmp_path / "data"
    (location / "_delta_log").mkdir(parents=True)
    (location / "part-0.parquet").write_bytes(b"not ours to delete")
    assert not clear_unfinished_create(spark, str(location))
    assert (location / "part-0.parquet").exists() and (location / "_delta_log").exists()


def test_a_missing_path_or_a_folder_of_files_is_no_delta_table(
        spark: SparkSession, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    spark.range(3).write.parquet(str(plain))
    assert not is_delta_table(spark, str(tmp_path / "missing"))
    assert not is_delta_table(spark, str(plain))
    assert not is_delta_table(spark, f"file:{tmp_path / 'missing'}")


def test_a_rebuilt_empty_table_takes_the_layout_asked(spark: SparkSession,
                                                      tmp_path: Path) -> None:
    """A refresh empties a table, then its job makes it again with the spec's layout when it
    differs (here its clustering only)."""
    location = str(tmp_path / "t")
    name = f"spark_catalog.default.rebuilt_{uuid.uuid4().hex[:8]}"
    schema = StructType([StructField("id", LongType()), StructField("day", StringType())])
    assert create_table(spark, name, schema, location)
    spark.sql(f"INSERT INTO {name} VALUES (1, 'a')")
    # holding rows: never replaced
    assert not create_table(spark, name, schema, location, cluster_by=["id"], rebuild=True)
    spark.sql(f"DELETE FROM {name}")
    assert create_table(spark, name, schema, location, cluster_by=["id"], rebuild=True)
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{location}`").first()
    assert detail is not None
    assert (detail["partitionColumns"], detail["clusteringColumns"]) == ([], ["id"])
    assert not create_table(spark, name, schema, location, cluster_by=["id"], rebuild=True)


def test_a_new_table_starts_with_its_new_properties_and_a_found_one_keeps_its_own(
        spark: SparkSession, tmp_path: Path) -> None:
    location = str(tmp_path / "t")
    name = f"spark_catalog.default.born_{uuid.uuid4().hex[:8]}"
    schema = StructType([StructField("id", LongType())])
    # made here: its first commit has them, no commit of their own follows
    assert create_table(spark, name, schema, location, properties={"medallion.a": "1"},
                        new_properties={"medallion.spec": '{"x": ["it\'s"]}'})
    first = latest_commit(spark, location)
    assert first is not None and first.version == 0
    mine = {k: v for k, v in table_properties(spark, location).items()
            if k.startswith("medallion.")}
    assert mine == {"medallion.a": "1", "medallion.spec": '{"x": ["it\'s"]}'}
    # registered again over its folder (the catalog lost it): the log's properties stay, none
    # new is taken, and those asked are had (Delta itself refuses any but the log's exact set)
    spark.sql(f"DROP TABLE {name}")  # (an external table: the folder stays)
    assert create_table(spark, name, schema, location, properties={"medallion.a": "1"},
                        new_properties={"medallion.spec": "{}"})
    assert {k: v for k, v in table_properties(spark, name).items()
            if k.startswith("medallion.")} == mine
    assert latest_commit(spark, location).version == 0  # type: ignore[union-attr]
    spark.sql(f"DROP TABLE {name}")
    assert create_table(spark, name, schema, location, properties={"medallion.b": "2"})
    assert {k: v for k, v in table_properties(spark, name).items()
            if k.startswith("medallion.")} == {**mine, "medallion.b": "2"}


def test_history_and_properties_by_name_and_by_location(spark: SparkSession,
                                                       tmp_path: Path) -> None:
    location = str(tmp_path / "t")
    name = f"spark_catalog.default.door_{uuid.uuid4().hex[:8]}"
    schema = StructType([StructField("id", LongType())])
    assert create_table(spark, name, schema, location, properties={"medallion.a": "1"})
    assert latest_commit(spark, name) == latest_commit(spark, location)
    first = latest_commit(spark, location)
    assert first is not None and first.version == 0 and isinstance(first.timestamp, datetime)
    append(spark.range(2), location)
    set_properties(spark, name, {"medallion.b": "it's"})
    last = latest_commit(spark, location)
    assert last is not None and last.version == 2
    for table in (name, location):
        assert {k: v for k, v in table_properties(spark, table).items()
                if k.startswith("medallion.")} == {"medallion.a": "1", "medallion.b": "it's"}
        assert detail(spark, table)["format"] == "delta"
    assert read_table(spark, location).count() == 2
    assert read_table(spark, location, version=0).count() == 0
