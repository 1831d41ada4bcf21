"""Silver's change data from full snapshots (``snapshot_by``) against the plain-Python reference
(tests/cdc_reference.py: the events between consecutive snapshots, then SCD1 or SCD2 of them):
five extracts with inserts, updates of tracked and untracked columns, deletes and keys that come
back, applied one snapshot per micro-batch and all in one, equal the reference row for row; a
replayed batch of them changes nothing; a late extract is quarantined, never applied or
dropped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from framework.config.model import Layer
from framework.errors import ConfigValidationError
from framework.job import RunContext, RunStatus, RunSummary
from silver.job import SilverJob
from tests import cdc_reference as ref
from tests.support import Lakehouse, bronze_spec, cli, replay_last_batch, write_delta_commits

BRONZE = "id BIGINT, name STRING, segment STRING, note STRING, _source_file STRING"
# The snapshot's id is the extract date in the landed file's name (null for a file without).
COLUMNS = [{"name": "id"}, {"name": "name"}, {"name": "segment"}, {"name": "note"},
           {"name": "extract_date", "type": "date", "expr": "nullif(regexp_extract("
            "_source_file, '([0-9]{4}-[0-9]{2}-[0-9]{2})[.]csv$', 1), '')"}]
SNAPSHOT = {"keys": ["id"], "snapshot_by": "extract_date"}
VERSIONS = "id BIGINT, name STRING, segment STRING, note STRING, __start_at DATE, " \
           "__end_at DATE, __is_current BOOLEAN, __deleted BOOLEAN"
LATEST = "id BIGINT, name STRING, segment STRING, note STRING, extract_date DATE"


def row(key: int, name: str, segment: str, note: str) -> dict[str, Any]:
    return {"id": key, "name": name, "segment": segment, "note": note}


# Five daily extracts of customers (name and segment tracked, the note not).
D1, D2, D3, D4, D5 = (date(2024, 1, day) for day in range(1, 6))
EXTRACTS: dict[date, list[dict[str, Any]]] = {
    D1: [row(1, "Ada", "retail", "n1"), row(2, "Bo", "smb", "n1"), row(3, "Cy", "retail", "n1"),
         row(6, "Fa", "retail", "n0")],
    D2: [row(1, "Ada", "smb", "n1"),                    # a tracked column changes
         row(2, "Bo", "smb", "n2"),                     # the untracked note alone
         row(3, "Cy", "retail", "n1"), row(4, "Di", "enterprise", "n1"),  # an insert
         row(6, "Fa", "retail", "n0")],
    D3: [row(1, "Ada", "smb", "n1"), row(3, "Cy", "retail", "n3"),  # 2 is gone
         row(4, "Di", "enterprise", "n1"), row(6, "Fa", "retail", "n0"),
         row(6, "Fa", "retail", "n0")],                 # the same row twice in the extract
    D4: [row(1, "Ada", "smb", "n1"), row(2, "Bo", "retail", "n4"),   # 2 back, changed; 3 gone
         row(4, "Di", "smb", "n4"), row(6, "Fa", "retail", "n0")],   # tracked and untracked
    D5: [row(2, "Bo", "retail", "n4"), row(3, "Cy", "retail", "n5"),  # 3 back; 1 gone
         row(4, "Di", "smb", "n4"), row(5, "Ed", "retail", "n5"),    # an insert
         row(6, "Fa", "retail", "n0")],
}


def bronze_rows(day: date | None, rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    file = f"landing/customers/customers_{day.isoformat()}.csv" if day else \
        "landing/customers/README.csv"
    return [(r["id"], r["name"], r["segment"], r["note"], file) for r in rows]


def lake(tmp_path: Path, one_per_batch: bool, **silver: Any) -> Lakehouse:
    lakehouse = Lakehouse(tmp_path)
    lakehouse.add_table("bronze", "customers", {**bronze_spec(), "name": "customers"})
    source: dict[str, Any] = {"table": "customers"}
    if one_per_batch:  # every bronze commit here is one file: a micro-batch per snapshot
        source["max_files_per_trigger"] = 1
    lakehouse.add_table("silver", "customers", {
        "description": "customers, from daily extracts", "name": "customers",
        "source": source, "columns": COLUMNS, **silver})
    return lakehouse


def run(spark: SparkSession, lakehouse: Lakehouse,
        commits: Sequence[Sequence[tuple[Any, ...]]]) -> RunSummary:
    """The bronze commits written (one file each), then one silver run."""
    project = lakehouse.project()
    write_delta_commits(spark, project.table("customers", Layer.BRONZE).location, commits,
                        BRONZE)
    summary = SilverJob(spark, project.table("customers", Layer.SILVER), RunContext()).run()
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    return summary


def extracts(*days: date) -> list[list[tuple[Any, ...]]]:
    return [bronze_rows(day, EXTRACTS[day]) for day in days]


def table(spark: SparkSession, lakehouse: Lakehouse, schema: str | None = None) -> DataFrame:
    df = spark.read.format("delta").load(
        lakehouse.project().table("customers", Layer.SILVER).location)
    return df.select(*[c.split()[0] for c in schema.split(", ")]) if schema else df


def reference(spark: SparkSession, rows: list[dict[str, Any]], schema: str) -> DataFrame:
    names = [c.split()[0] for c in schema.split(", ")]
    return spark.createDataFrame([tuple(r[n] for n in names) for r in rows], schema)


def equal(got: DataFrame, want: DataFrame) -> None:
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True,
                       ignore_column_order=True)


def test_scd2_from_snapshots_equals_the_reference_in_any_batching(spark: SparkSession,
                                                                   tmp_path: Path) -> None:
    events = ref.snapshot_changes(EXTRACTS, keys=ref.KEYS)
    want = reference(spark, ref.scd2(events, keys=ref.KEYS, track_history_except=["note"]),
                     VERSIONS)
    spec = {"mode": "scd2", "scd2": {**SNAPSHOT, "track_history_except": ["note"]}}
    each, whole = lake(tmp_path / "each", True, **spec), lake(tmp_path / "whole", False, **spec)
    assert run(spark, each, extracts(D1, D2, D3, D4, D5)).batches == 5
    run(spark, whole, extracts(D1, D2, D3, D4, D5))
    equal(table(spark, each, VERSIONS), want)
    equal(table(spark, whole), table(spark, each))  # the kept extract_date too
    # The one batch of five snapshots again: its events are logged already, and each snapshot
    # is compared with the same state as the first time (not quarantined as older than the log).
    assert replay_last_batch(spark, whole, "customers").counts["quarantined_rows"] == 0
    equal(table(spark, whole, VERSIONS), want)


def test_scd1_from_snapshots_equals_the_reference_in_any_batching(spark: SparkSession,
                                                                   tmp_path: Path) -> None:
    events = ref.snapshot_changes(EXTRACTS, keys=ref.KEYS)
    want = reference(spark, ref.scd1(events, keys=ref.KEYS, sequence_by="extract_date"),
                     LATEST)
    spec = {"mode": "upsert", "upsert": SNAPSHOT}
    each, whole = lake(tmp_path / "each", True, **spec), lake(tmp_path / "whole", False, **spec)
    run(spark, each, extracts(D1, D2, D3, D4, D5))
    run(spark, whole, extracts(D1, D2, D3, D4, D5))
    equal(table(spark, each), want)
    equal(table(spark, whole), want)


def test_a_late_snapshot_is_quarantined_and_a_redelivered_one_changes_nothing(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse = lake(tmp_path, False, mode="scd2", scd2=SNAPSHOT)
    run(spark, lakehouse, extracts(D1, D2, D4))
    # One commit: D3 (older than D4: late), D4 again, D5, and a file without a date.
    late = [*bronze_rows(D3, EXTRACTS[D3]), *bronze_rows(D4, EXTRACTS[D4]),
            *bronze_rows(D5, EXTRACTS[D5]), *bronze_rows(None, EXTRACTS[D5][:1])]
    summary = run(spark, lakehouse, [late])
    counts = summary.counts
    assert (counts["quarantined_rows"], counts["rule:snapshot_in_order"],
            counts["rule:has_extract_date"]) == (len(EXTRACTS[D3]) + 1, len(EXTRACTS[D3]), 1)
    assert summary.rows_out == len(EXTRACTS[D4]) + len(EXTRACTS[D5])
    events = ref.snapshot_changes({d: EXTRACTS[d] for d in (D1, D2, D4, D5)}, keys=ref.KEYS)
    equal(table(spark, lakehouse, VERSIONS), reference(spark, ref.scd2(events, keys=ref.KEYS),
                                                       VERSIONS))
    silver = lakehouse.project().table("customers", Layer.SILVER)
    quarantined = spark.read.format("delta").load(silver.companion_location("quarantine"))
    assert sorted(tuple(r["_failed_rules"]) for r in quarantined.collect()) == sorted(
        [("snapshot_in_order",)] * len(EXTRACTS[D3]) + [("has_extract_date",)])
    # a row of a snapshot is not a change on its own: a replay is refused, saying why
    assert cli(lakehouse, "quarantine", "replay", "customers") == 2
    assert "expected a table of changes or appended rows to replay rows into, found " \
        f"{silver.full_name} made from full snapshots" in capsys.readouterr().err
    assert spark.read.format("delta").load(silver.companion_location("quarantine")) \
        .where("_state = 'quarantined'").count() == len(EXTRACTS[D3]) + 1


def test_snapshot_config_errors(tmp_path: Path) -> None:
    lakehouse = lake(tmp_path, True, mode="scd2", scd2={
        **SNAPSHOT, "sequence_by": "extract_date", "deletes": "note = 'd'",
        "truncates": "note = 't'"}, event_time="extract_date",
        dedup={"keys": ["id"], "delay": "1 day"})
    with pytest.raises(ConfigValidationError) as info:
        lakehouse.project()
    text = str(info.value)
    assert "scd2.snapshot_by: expected either sequence_by (rows are changes) or snapshot_by " \
        "(rows are full snapshots), found both" in text
    for key in ("deletes", "truncates"):
        assert f"scd2.{key}: expected no {key} with snapshot_by (the removals are derived: a " \
            "key absent from a snapshot is deleted), found" in text
    assert "dedup: expected no dedup with snapshot_by (every snapshot holds each key again, " \
        "and dedup would drop it from all but the first), found dedup on id" in text

    other = lake(tmp_path / "other", True, mode="upsert", upsert={"keys": ["id"]})
    with pytest.raises(ConfigValidationError, match=r"upsert: expected sequence_by .* or "
                       r"snapshot_by .*, found neither"):
        other.project()
    other = lake(tmp_path / "other", True, mode="upsert", upsert={
        "keys": ["id"], "snapshot_by": "extracted_on"})
    with pytest.raises(ConfigValidationError, match=r"upsert\.snapshot_by: expected columns "
                       r"among the output columns .*, found extracted_on"):
        other.project()

    # A file limit can split an extract of several files: medallion validate says so.
    project = lake(tmp_path / "advised", True, mode="upsert", upsert=SNAPSHOT).project()
    silver = project.table("customers", Layer.SILVER)
    [advice] = silver.spec.advise(silver, project)
    assert "derives changes from full snapshots and reads" in advice
    assert "max_files_per_trigger: 1" in advice
    assert "each part is then taken for the whole snapshot" in advice
