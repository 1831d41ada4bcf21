"""Event time under backlogs: a feed delivered in order keeps its order through bronze and
silver, whatever the batch sizes of bronze, however many files a bronze commit writes, and
however the deliveries fall between runs.

The truth is computed here from the delivered files alone: a row is late when its event time
is at or behind the watermark of the rows delivered before its file (the newest event time
among them minus the delay; Spark's own rule, ``event time <= watermark``); a row whose key
was kept before is a duplicate. Silver must then hold every on-time row once, drop as late
only late rows (a late row that arrives in the same micro-batch as the rows it is late
against may be kept), and drop as duplicates exactly the duplicates.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession
from structlog.testing import capture_logs

from framework.cli import main
from framework.config.model import Layer
from framework.job import RunContext, RunStatus, TableRunSummary
from framework.layers import job_class
from tests.support import REPO, Lakehouse

T0 = datetime(2026, 3, 1, tzinfo=UTC)
SPAN = timedelta(hours=4)  # of event time per delivered file
DELAY = timedelta(hours=10)  # silver's dedup delay: the watermark trails by this much
SCHEMA = "order_id STRING, customer_id STRING, quantity INT, event_time TIMESTAMP"


@dataclass
class Feed:
    """Files in delivery order (each a list of records) and the truth about their rows."""

    files: list[list[dict[str, Any]]] = field(default_factory=list)
    on_time: set[str] = field(default_factory=set)  # keys silver must hold
    late: set[str] = field(default_factory=set)  # keys of late rows (never duplicated)
    duplicates: int = 0  # rows repeating a key kept before

    @property
    def rows(self) -> int:
        return sum(len(f) for f in self.files)


def make_feed(files: int, seed: int, record: Any = None) -> Feed:
    """``files`` files of 4 hours of events each, out of order within a file, growing in size
    (Spark packs bigger files into earlier tasks, so a bronze commit's files do not follow
    delivery order); duplicates of the previous file; rows far behind the watermark in file
    4; and in file 5, rows just behind and just ahead of the watermark of the files before
    it."""
    rng = random.Random(seed)
    make = record or _record
    feed = Feed()
    newest: datetime | None = None
    previous: list[dict[str, Any]] = []
    n = 0
    for f in range(files):
        rows = []
        for _ in range(20 + 6 * f):
            rows.append(make(f"o{n:05d}", T0 + f * SPAN + timedelta(
                seconds=rng.randrange(int(SPAN.total_seconds())))))
            n += 1
        resent = [dict(r) for r in rng.sample(previous, min(3, len(previous)))]
        previous = list(rows)  # the next file re-sends some of these plain events
        rows += resent
        if f == 4:
            rows += [make(f"late{j}", T0 + timedelta(hours=1, minutes=j)) for j in range(4)]
        if f == 5 and newest is not None:
            watermark = newest - DELAY
            rows += [make(f"edge_late{j}", watermark - timedelta(minutes=1 + j))
                     for j in range(2)]
            rows += [make(f"edge_on_time{j}", watermark + timedelta(minutes=1 + j))
                     for j in range(2)]
        rng.shuffle(rows)
        feed.files.append(rows)
        newest = max([newest or T0, *(_at(r) for r in rows)])
    _judge(feed)
    return feed


def _record(key: str, at: datetime) -> dict[str, Any]:
    return {"order_id": key, "customer_id": f"c{int(at.timestamp()) % 7}", "quantity": 1,
            "event_time": at.strftime("%Y-%m-%dT%H:%M:%SZ")}


def _at(record: dict[str, Any]) -> datetime:
    return datetime.strptime(record["event_time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _judge(feed: Feed) -> None:
    """The truth, in delivery order, a file at a time."""
    newest: datetime | None = None
    for rows in feed.files:
        for r in rows:
            key, at = r["order_id"], _at(r)
            if newest is not None and at <= newest - DELAY:
                feed.late.add(key)
            elif key in feed.on_time:
                feed.duplicates += 1
            else:
                feed.on_time.add(key)
        newest = max([newest or T0, *(_at(r) for r in rows)])
    assert feed.late and feed.duplicates and not feed.late & feed.on_time


def deliver(folder: Path, files: list[list[dict[str, Any]]], first: int, *,
            with_land: bool = False) -> None:
    """Files ``first``... into ``folder``, in order: through ``medallion land``'s storage
    operation, or written locally with times a second apart (as an exporter would)."""
    staging = folder.parent / f".staging-{first}"
    staging.mkdir(parents=True, exist_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, rows in enumerate(files, start=first):
        path = staging / f"part-{i:04d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths.append(path)
    if with_land:
        from framework.storage import LocalStorage, land

        land(LocalStorage(), [str(p) for p in paths], str(folder))
    else:
        base = datetime.now(UTC).timestamp() - 1000
        for i, path in enumerate(paths, start=first):
            os.utime(path, (base + i, base + i))
            shutil.move(path, folder / path.name)
    shutil.rmtree(staging)


def run(spark: SparkSession, lakehouse: Lakehouse, layer: Layer) -> TableRunSummary:
    table = lakehouse.project().table("orders", layer)
    summary = job_class(table)(spark, table, RunContext()).run()
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    return summary


@contextmanager
def files_of(spark: SparkSession, records: int | None) -> Iterator[None]:
    """Bronze writes a Delta file per ``records`` rows (many files a commit)."""
    key = "spark.sql.files.maxRecordsPerFile"
    before = spark.conf.get(key)
    if records:
        spark.conf.set(key, str(records))
    try:
        yield
    finally:
        spark.conf.set(key, before or "0")


def late_in_one_file_batches(feed: Feed) -> set[str]:
    """The late rows Spark drops when each micro-batch is one delivered file: in micro-batch
    k a row is late when it is behind the watermark micro-batch k - 1 used to expire state,
    made from the batches before that one (Spark keeps a watermark for late rows one batch
    behind the one for eviction, so chained stateful operators agree)."""
    dropped, newest = set(), []
    for f, rows in enumerate(feed.files):
        before = max(newest[:f - 1], default=None)
        dropped |= {r["order_id"] for r in rows if before is not None
                    and _at(r) <= before - DELAY}
        newest.append(max(_at(r) for r in rows))
    return dropped


def check(spark: SparkSession, lakehouse: Lakehouse, feed: Feed,
          silver: list[TableRunSummary], exact: bool = False) -> None:
    """Points 1-3 against the truth; with ``exact`` (micro-batches a delivered file each),
    silver holds exactly the rows Spark's watermark keeps."""
    table = lakehouse.project().table("orders", Layer.SILVER).full_name
    keys = [r["order_id"] for r in spark.table(table).select("order_id").collect()]
    assert len(keys) == len(set(keys)), "a key written twice"
    got = set(keys)
    assert feed.on_time <= got, f"on-time rows dropped: {sorted(feed.on_time - got)[:10]}"
    assert got <= feed.on_time | feed.late
    late_dropped = sum(s.counts["late_rows_dropped"] for s in silver)
    assert late_dropped == len(feed.late - got)  # each row dropped as late was late
    assert sum(s.counts["duplicates_dropped"] for s in silver) == feed.duplicates
    assert sum(s.rows_in for s in silver) == feed.rows
    if exact:
        dropped = late_in_one_file_batches(feed)
        assert dropped and dropped < feed.late  # the last rows late by a file are kept
        assert got == (feed.on_time | feed.late) - dropped and late_dropped == len(dropped)


def orders_lake(lakehouse: Lakehouse, bronze_max_files: int | None,
                silver_source: Any = "orders") -> None:
    source: dict[str, Any] = {"path": "landing/orders", "format": "json", "schema": SCHEMA}
    if bronze_max_files:
        source["max_files_per_trigger"] = bronze_max_files
    lakehouse.add_table("bronze", "orders", {"source": source})
    lakehouse.add_table("silver", "orders", {
        "source": silver_source, "event_time": "event_time",
        "dedup": {"keys": ["order_id"], "delay": "10 hours"}})


# (bronze files a micro-batch, rows a bronze Delta file, deliveries as file counts, land)
COMBINATIONS = {
    "one_backlog_bronze_5": (5, None, [8], False),
    "three_deliveries_bronze_2_landed": (2, None, [3, 3, 2], True),
    "two_deliveries_bronze_all_many_files": (None, 7, [5, 3], False),
}


@pytest.mark.parametrize("combination", list(COMBINATIONS))
def test_on_time_rows_are_kept_whatever_the_batch_sizes(
    spark: SparkSession, lakehouse: Lakehouse, combination: str
) -> None:
    bronze_max, records, deliveries, with_land = COMBINATIONS[combination]
    orders_lake(lakehouse, bronze_max)
    feed = make_feed(sum(deliveries), seed=len(combination))
    landing = lakehouse.path("landing", "orders")
    silver, first = [], 0
    with capture_logs() as events:
        for count in deliveries:
            deliver(landing, feed.files[first:first + count], first, with_land=with_land)
            first += count
            with files_of(spark, records):
                bronze = run(spark, lakehouse, Layer.BRONZE)
            assert bronze.rows_out == sum(len(f) for f in feed.files[first - count:first])
            silver.append(run(spark, lakehouse, Layer.SILVER))
    check(spark, lakehouse, feed, silver)
    # A silver batch that spans more event time than the delay is warned about, with the
    # rows of the batch that its own watermark passes.
    wide = [e for e in events if e["event"] == "silver.batch.wide_event_time"]
    assert wide and sum(s.counts["rows_at_risk"] for s in silver) == sum(
        e["rows_at_risk"] for e in wide)
    if len(deliveries) == 1:
        kept = [_at(r) for rows in feed.files for r in rows
                if r["order_id"] in feed.on_time | feed.late]
        at_risk = len({r["order_id"] for rows in feed.files for r in rows
                       if _at(r) <= max(kept) - DELAY})
        assert wide[0]["rows_at_risk"] == silver[0].counts["rows_at_risk"] == at_risk > 0


def test_one_file_batches_equal_the_truth_exactly(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    # Bronze commits one file a batch, so silver's one-file limit reads whole commits: its
    # micro-batches are the delivered files and its watermark is the truth's.
    orders_lake(lakehouse, 1, {"table": "orders", "max_files_per_trigger": 1})
    feed = make_feed(8, seed=11)
    deliver(lakehouse.path("landing", "orders"), feed.files, 0)
    run(spark, lakehouse, Layer.BRONZE)
    silver = run(spark, lakehouse, Layer.SILVER)
    assert silver.batches >= 8
    check(spark, lakehouse, feed, [silver], exact=True)


def _sample_record(key: str, at: datetime) -> dict[str, Any]:
    return {**_record(key, at), "store_id": "s01", "quantity": 2, "unit_price": "3.50",
            "status": "paid"}


def test_the_shipped_configuration_keeps_on_time_rows_of_a_landed_backlog(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path
) -> None:
    # The sample's bronze and silver orders, with a delay of 10 hours for a feed of 4 hours a
    # file: bronze takes ten files a micro-batch, and here writes a Delta file per 25 rows,
    # so each commit is dozens of files, none in delivery order. The backlog is landed with
    # `medallion land`, in delivery order, in one call.
    specs = REPO / "conf" / "tables"
    bronze = yaml.safe_load((specs / "bronze" / "orders.yaml").read_text())
    silver = yaml.safe_load((specs / "silver" / "orders.yaml").read_text())
    silver.pop("checks")  # (its orders held for a store silver.stores lacks: no stores here)
    lakehouse.add_table("bronze", "orders", bronze)
    lakehouse.add_table("silver", "orders", {**silver, "dedup": {
        **silver["dedup"], "delay": "10 hours"}})
    feed = make_feed(24, seed=5, record=_sample_record)
    exports = []
    for i, rows in enumerate(feed.files):
        exports.append(tmp_path / f"orders-{i:04d}.json")
        exports[-1].write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["--conf", str(lakehouse.conf), "--env", lakehouse.env_name, "--log-format", "json"]
    assert main(["init", *args]) == 0
    assert main(["land", "orders", *map(str, exports), *args]) == 0
    with files_of(spark, 25):
        run(spark, lakehouse, Layer.BRONZE)
    check(spark, lakehouse, feed, [run(spark, lakehouse, Layer.SILVER)])


def test_validate_warns_when_a_file_limit_can_split_upstream_commits(
    lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    orders_lake(lakehouse, 10, {"table": "orders", "max_files_per_trigger": 1})
    lakehouse.path("landing", "orders").mkdir(parents=True)
    args = ["validate", "--no-spark", "--conf", str(lakehouse.conf), "--env",
            lakehouse.env_name]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "warning:" in out and "max_files_per_trigger: 1" in out
    assert "can split an upstream commit" in out
    orders_lake(lakehouse, 10)
    assert main(args) == 0
    assert "warning:" not in capsys.readouterr().out
