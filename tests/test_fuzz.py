"""Hostile configuration, fuzzed (``bench/fuzz.py`` at a smaller count): every mutated
configuration is answered by ``medallion validate`` with exit 0 or 2 and problems that name
their file, no traceback, each in under 30 s, memory bounded."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench.fuzz import MAX_GROWTH_MB, bomb, fuzz
from framework.cli import main
from tests.support import REPO

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
