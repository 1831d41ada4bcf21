"""Crash consistency, with real process kills: ``bench/chaos.py`` kills ``medallion run all``
with SIGKILL in a bronze schema change (a drifting feed), a silver and a gold
phase, on a store that refuses a share of the moves of landing files, restarts it, and
compares the lake with a clean run of the same feed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench.chaos import main as chaos

pytestmark = pytest.mark.slow

# (without the demo's later delivery: it is run through once more on both roots, with no
# interruption and the store repaired, which adds nothing to what the kills test)
SMALL = ["--orders", "300", "--files", "30", "--deliveries", "1", "--no-reserve", "--no-later",
         "--tables", "orders,stores,store_sales,regional_sales"]


def test_kills_in_bronze_silver_and_gold_on_a_faulty_store_lose_nothing(
        spark: SparkSession, tmp_path: Path) -> None:
    # Seed 3 replays what the harness found: on a store whose URLs have no authority
    # (faulty:/..., like dbfs:/...) the rows per file were matched under another spelling of
    # the path, and every batch after a restart failed its balance check.
    result = chaos([*SMALL, "--seed", "3", "--faults", "0.5", "--work", str(tmp_path),
                    "--phases", "schema-change,silver-merge,mart-rewrite"])
    assert result["kills"] == 3, result
    assert result["phases_hit"] == ["schema-change", "silver-merge", "mart-rewrite"], result
    assert result["missed"] == [], result
    assert result["operations_refused"] > 0, result  # the store did refuse moves
    assert result["lost"] == 0 and result["duplicated"] == 0, result
    assert result["mismatched_tables"] == [] and result["summary_mismatches"] == [], result
    # one run history row per committed batch of every query, kills or not
    assert result["history_mismatches"] == [], result
    assert result["history_rows"]["committed"] > 0, result
    assert result["ratio"] == 1.0
