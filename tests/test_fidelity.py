"""Bronze reads every record as its specification says (RFC 8259 and JSON Lines, RFC 4180).

The corpus of ``tests/fidelity_cases.py`` is landed and read by one bronze run per feed (JSON,
CSV with a header, CSV without one). Per category: every valid record is in bronze with its
exact values and rescued data, every malformed one is in the quarantine with its exact text
and a reason, and nothing else; per feed, the records of the files = bronze rows + quarantined
rows, all counted exactly.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bronze.job import BronzeJob
from framework.job import RunContext, RunStatus, TableRunSummary
from tests.fidelity_cases import (
    Case,
    Feed,
    FeedFile,
    Outcome,
    csv_feed,
    json_feed,
    positional_feed,
)
from tests.support import Lakehouse, bronze_spec

# One worker runs them all: each feed is landed and read once per worker that asks for it.
pytestmark = pytest.mark.xdist_group("fidelity")

FEEDS: dict[str, Callable[[], Feed]] = {"events": json_feed, "customers": csv_feed,
                                        "positional": positional_feed}
CORPUS = {name: make() for name, make in FEEDS.items()}
RESCUED = "_rescued_data"
ABSENT = "(no row)"  # an id missing from bronze, or one bronze holds and the corpus does not


@dataclass(frozen=True)
class Landed:
    """A feed's files after one bronze run: the run and its two tables."""

    feed: Feed
    summary: TableRunSummary
    bronze: DataFrame
    quarantine: DataFrame

    def of(self, table: DataFrame, files: list[FeedFile]) -> DataFrame:
        """The rows of ``table`` read from ``files``."""
        name = F.element_at(F.split(F.col("_source_file"), "/"), -1)
        return table.where(name.isin([f.name for f in files]))


def land(spark: SparkSession, base: Path, name: str, feed: Feed) -> Landed:
    lakehouse = Lakehouse(base)
    spec = bronze_spec(path=f"landing/{name}", format=feed.format, schema=feed.schema)
    if feed.options:
        spec["source"]["options"] = dict(feed.options)
    lakehouse.add_table("bronze", name, spec)
    landing = lakehouse.path("landing", name)
    landing.mkdir(parents=True)
    for f in feed.files:
        # newline="": every line end (LF, CRLF, none at the end) is written as the case has it
        with (landing / f.name).open("w", encoding="utf-8", newline="") as fh:
            fh.write(f.text())
    table = lakehouse.project().table(name)
    summary = BronzeJob(spark, table, RunContext()).run()
    # Cached: every test of the feed reads them again, a Delta read costing a second or two.
    return Landed(feed, summary, spark.table(table.full_name).cache(),
                  spark.table(table.qualified("quarantine")).cache())


@pytest.fixture(scope="module")
def landed(spark: SparkSession,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Landed]]:
    """Each feed landed and read once, when a test first asks for it."""
    runs: dict[str, Landed] = {}

    def get(name: str) -> Landed:
        if name not in runs:
            runs[name] = land(spark, tmp_path_factory.mktemp(f"fidelity-{name}"), name,
                              CORPUS[name])
        run = runs[name]
        assert run.summary.status is RunStatus.SUCCEEDED, run.summary.error
        return run

    yield get
    for run in runs.values():
        run.bronze.unpersist()
        run.quarantine.unpersist()


def categories(name: str) -> list[tuple[str, str]]:
    return [(name, c) for c in CORPUS[name].categories()]


PER_CATEGORY = [*categories("events"), *categories("customers"), *categories("positional")]


# ---------------------------------------------------------------------- per category
@pytest.mark.parametrize("feed, category", PER_CATEGORY)
def test_valid_records_land_in_bronze_with_their_exact_values(
        spark: SparkSession, landed: Callable[[str], Landed], feed: str, category: str) -> None:
    run = landed(feed)
    files = run.feed.in_category(category)
    expected_cases = _cases(files, Outcome.BRONZE)
    got = run.of(run.bronze, files).select(*run.feed.columns)
    expected = spark.createDataFrame([c.row for c in expected_cases], run.feed.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)
    # A double's zero keeps its sign ("-0.0" is negative zero), which == does not tell.
    signs = {c.key: _zero_signs(c.row) for c in expected_cases if -1.0 in _zero_signs(c.row)}
    if signs:
        rows = {r[0]: tuple(r) for r in got.collect()}
        assert {k: _zero_signs(rows[k]) for k in signs} == signs


@pytest.mark.parametrize("feed, category", PER_CATEGORY)
def test_keys_and_values_outside_the_schema_are_rescued_with_their_json_types(
        landed: Callable[[str], Landed], feed: str, category: str) -> None:
    run = landed(feed)
    files = run.feed.in_category(category)
    expected_cases = _cases(files, Outcome.BRONZE)
    rows = run.of(run.bronze, files).select(run.feed.columns[0], RESCUED).collect()
    got = {r[0]: _parse(r[RESCUED]) for r in rows if r[0] is not None}
    expected = {c.key: c.rescued for c in expected_cases if c.key is not None}
    differences = [f"id {k!r}: got {got.get(k, ABSENT)!r}, expected {expected.get(k, ABSENT)!r}"
                   for k in sorted(got.keys() | expected.keys(), key=str)
                   if _typed(got.get(k, ABSENT)) != _typed(expected.get(k, ABSENT))]
    assert not differences, "\n".join(differences)
    # Records without an id rescue nothing (the corpus rescues only records with one).
    assert [r[RESCUED] for r in rows if r[0] is None and r[RESCUED] is not None] == []


@pytest.mark.parametrize("feed, category", PER_CATEGORY)
def test_malformed_records_are_quarantined_whole_with_a_reason(
        landed: Callable[[str], Landed], feed: str, category: str) -> None:
    run = landed(feed)
    files = run.feed.in_category(category)
    rows = run.of(run.quarantine, files).select("_raw", "_reason").collect()
    got = Counter(r["_raw"] for r in rows)
    expected = Counter(c.text for c in _cases(files, Outcome.QUARANTINE))
    missing, unexpected = sorted(expected - got), sorted(got - expected)
    assert not missing and not unexpected, \
        f"not quarantined: {missing!r}\nquarantined, not malformed: {unexpected!r}"
    assert all(r["_reason"] for r in rows)


# ---------------------------------------------------------------------- per feed
@pytest.mark.parametrize("feed", list(CORPUS))
def test_records_read_are_the_bronze_rows_and_the_quarantined_ones(
        landed: Callable[[str], Landed], feed: str) -> None:
    run = landed(feed)
    good = len(run.feed.cases(Outcome.BRONZE))
    bad = len(run.feed.cases(Outcome.QUARANTINE))
    assert good + bad == run.feed.records()
    counts = run.summary.counts
    assert (run.bronze.count(), run.quarantine.count()) == (good, bad)
    assert (counts["records_read"], run.summary.rows_out, counts["quarantined_rows"]) == \
        (good + bad, good, bad)
    assert counts["failed_files"] == 0 and counts["files"] == len(run.feed.files)


def test_the_corpus_is_large_enough() -> None:
    json_lines, csv_rows = CORPUS["events"].records(), CORPUS["customers"].records()
    assert json_lines >= 300 and csv_rows >= 100, (json_lines, csv_rows)
    assert CORPUS["positional"].records() == 5
    for feed in CORPUS.values():
        keys = [c.key for c in feed.cases(Outcome.BRONZE) if c.key is not None]
        assert len(keys) == len(set(keys)), "ids must be unique within a feed"


# ---------------------------------------------------------------------- comparisons
def _parse(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _typed(value: Any) -> Any:
    """A JSON value with its type beside each part: ``0`` and ``false``, ``"0"`` and ``0`` or
    ``1`` and ``true`` differ (Python's == takes True for 1); an integer and a float of the
    same value do not (JSON has one number type)."""
    if value is None or isinstance(value, bool):
        return (type(value).__name__, value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", [_typed(v) for v in value])
    return ("object", {k: _typed(v) for k, v in value.items()})


def _zero_signs(row: tuple[Any, ...]) -> tuple[float | None, ...]:
    return tuple(math.copysign(1.0, v) if isinstance(v, float) and v == 0 else None
                 for v in row)


def _cases(files: list[FeedFile], outcome: Outcome) -> list[Case]:
    return [c for f in files for c in f.expected(outcome)]
