"""Hostile input, fuzzed (``bench/fuzz.py`` at a smaller count): every mutated configuration
is answered by ``medallion validate`` with exit 0 or 2 and problems that name their file, no
traceback, each in under 30 s, memory bounded; every hostile landing file is ingested or
quarantined, its records read = bronze + quarantine, on a local disk and through Hadoop."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench.fuzz import MAX_GROWTH_MB, bomb, fuzz
from bench.hostile_files import (
    CSV_SCHEMA,
    HIDDEN,
    check,
    write_csv_feed,
    write_json_feed,
    write_tiny_feed,
)
from bronze.job import BronzeJob
from framework.cli import main
from framework.job import RunContext
from tests.support import REPO, Lakehouse, bronze_spec

pytestmark = pytest.mark.slow


def test_200_mutated_configurations_are_all_answered_cleanly(
        spark: SparkSession, tmp_path: Path) -> None:
    result = fuzz(200, seed=7, work=tmp_path)
    assert result["failures"] == [], result
    assert result["ratio"] == 1.0
    assert result["exit_codes"].get("2", 0) > 100  # most mutations break the configuration
    assert set(result["mutations"]) >= {"bomb", "deep", "bytes", "duplicate", "wrong_type",
                                        "unknown_key", "delete_key", "absurd", "tabs"}
    assert result["memory_growth_mb"] <= MAX_GROWTH_MB


@pytest.mark.parametrize("text, expected", [
    (bomb().encode(), "once its aliases are expanded"),
    (b"key: " + b"[" * 10_000 + b"]" * 10_000, "nested more than 50 levels deep"),
    (b"\xff\xfe\x00source: x", "expected UTF-8 text"),
])
def test_a_hostile_file_is_a_problem_of_its_own(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: bytes, expected: str) -> None:
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    (conf / "tables" / "silver" / "orders.yaml").write_bytes(text)
    assert main(["validate", "--conf", str(conf), "--env", "local", "--no-spark"]) == 2
    err = capsys.readouterr().err
    assert f"{conf}/tables/silver/orders.yaml: expected" in err and expected in err


# ------------------------------------------------------------------------- hostile files
@pytest.mark.parametrize("store", ["local", "hadoop"])
def test_hostile_landing_files_are_each_ingested_or_quarantined(
        spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str],
        store: str) -> None:
    # Ran with spark.driver.memory 2g, local[2] (the driver is the executor); a record of
    # 200 MB with the same memory: bench/fuzz.py --data.
    if store == "hadoop":  # the Hadoop file system, under a scheme of its own (faulty://,
        # refusing nothing): Spark names files there by escaped URIs
        lakehouse.write_env(root=f"faulty://{lakehouse.root}",
                            metastore=str(lakehouse.base / "metastore_db"))
    limit = 1_000_000
    lakehouse.add_table("bronze", "hostile", bronze_spec(path="landing/hostile",
                                                         max_record_bytes=limit))
    feed = write_json_feed(lakehouse.path("landing", "hostile"), random.Random(3),
                           big_bytes=3 * limit, depth=10_000)
    feeds = {"hostile": (feed, "order_id")}
    if store == "local":
        lakehouse.add_table("bronze", "hostile_csv", bronze_spec(
            path="landing/hostile_csv", format="csv", schema=CSV_SCHEMA, max_record_bytes=limit))
        lakehouse.add_table("bronze", "tiny", bronze_spec(path="landing/tiny"))
        feeds |= {"hostile_csv": (write_csv_feed(lakehouse.path("landing", "hostile_csv"),
                                                 big_bytes=2 * limit), "id"),
                  "tiny": (write_tiny_feed(lakehouse.path("landing", "tiny"), 200), "order_id")}
    project = lakehouse.project()
    for name, (files, id_column) in feeds.items():
        table = project.table(name)
        summary = BronzeJob(spark, table, RunContext()).run()
        assert check(spark, files, table, id_column, summary) == {}, name
    assert len(feed.expected) == 22

    assert main(["status", "--conf", str(lakehouse.conf), "--env", lakehouse.env_name]) == 0
    out = capsys.readouterr().out
    assert "1 file(s) in landing will never be read" in out and HIDDEN in out
