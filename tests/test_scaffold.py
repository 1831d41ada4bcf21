"""``medallion new``: a feed's specs written from its sample files, on real Spark."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

from framework.cli import build_parser, main
from framework.config.loader import load_checked
from framework.config.model import Layer
from tests.support import Lakehouse

ROWS: list[dict[str, Any]] = [
    {"id": 1, "event_time": "2026-11-01T08:00:00", "amount": 12.5, "category": "books"},
    {"id": 2, "event_time": "2026-11-01T09:30:00", "amount": 3.0, "category": "games"},
    {"id": 3, "event_time": "2026-11-01T17:45:00", "amount": 7.25, "category": "books"},
    {"id": 4, "event_time": "2026-11-02T08:10:00", "amount": 20.0, "category": "games"},
    {"id": 5, "event_time": "2026-11-02T11:00:00", "amount": 1.5, "category": "books"},
    {"id": 6, "event_time": "2026-11-03T06:30:00", "amount": 9.75, "category": "books"},
]
JSON_DDL = "id BIGINT, event_time TIMESTAMP, amount DOUBLE, category STRING"
CSV_FILES = {
    "orders-1.csv": "order_id,placed_at,qty,region\n"
                    "A1,2026-11-01 08:00:00,3,west\nA2,2026-11-01 09:00:00,1,east\n",
    "orders-2.csv": "order_id,placed_at,qty,region\n"
                    "A3,2026-11-02 10:00:00,2,west\nA4,2026-11-02 12:30:00,5,west\n",
}
CSV_DDL = "order_id STRING, placed_at TIMESTAMP, qty INT, region STRING"


def _json_sample(folder: Path, rows: list[dict[str, Any]] = ROWS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    sample = folder / "sales.jsonl"
    sample.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return sample


def _new(lakehouse: Lakehouse, *args: str) -> int:
    return main(["new", *args, "--conf", str(lakehouse.conf), "--env", lakehouse.env_name,
                 "--log-format", "console"])


def _spec(lakehouse: Lakehouse, layer: str, name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(
        (lakehouse.conf / "tables" / layer / f"{name}.yaml").read_text(encoding="utf-8"))
    return loaded


def _specs(lakehouse: Lakehouse) -> dict[str, str]:
    tables = lakehouse.conf / "tables"
    return {str(p.relative_to(tables)): p.read_text(encoding="utf-8")
            for p in sorted(tables.rglob("*.yaml"))} if tables.exists() else {}


def _loads(lakehouse: Lakehouse) -> Any:
    project, problems = load_checked(lakehouse.conf, lakehouse.env_name, columns=True)
    assert problems == []
    assert project is not None
    return project


def _next_commands(out: str) -> list[list[str]]:
    lines = out.split("next:\n", 1)[1].splitlines()
    return [shlex.split(line)[1:] for line in lines if line.startswith("  medallion ")]


def test_new_writes_specs_from_json_lines_that_load_and_commands_that_parse(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = _json_sample(tmp_path / "samples")
    assert _new(lakehouse, "sales", "--from", str(sample)) == 0
    out = capsys.readouterr().out

    project = _loads(lakehouse)
    bronze = _spec(lakehouse, "bronze", "sales")
    assert bronze["source"] == {"path": "landing/sales", "format": "json", "schema": JSON_DDL}
    silver = _spec(lakehouse, "silver", "sales")
    assert silver["source"] == "sales"
    assert silver["columns"] == [{"name": "id", "type": "bigint"},
                                 {"name": "event_time", "type": "timestamp"},
                                 {"name": "amount", "type": "double"},
                                 {"name": "category", "type": "string"}]
    assert silver["event_time"] == "event_time"
    assert silver["dedup"] == {"keys": ["id"], "delay": "1 day"}
    assert silver["expectations"] == [
        {"name": "has_id", "rule": "id IS NOT NULL", "action": "quarantine"}]
    assert not (lakehouse.conf / "tables" / "gold").exists()
    # the landing folder made, so that validate (as `validate` does) warns of nothing; then the
    # next three commands, each one the parser takes
    landing = lakehouse.path("landing", "sales")
    assert landing.is_dir() and f"ready: {landing}" in out.splitlines()
    assert "configuration valid" in out
    assert "warning:" not in out, out
    commands = _next_commands(out)
    silver_name = project.table("sales", Layer.SILVER).full_name
    assert [c[:2] for c in commands] == [["land", "sales"], ["run", "all"],
                                         ["sql", f"SELECT * FROM {silver_name} LIMIT 10"]]
    assert commands[0][2] == str(sample)
    for command in commands:
        build_parser().parse_args(command)


def test_new_reads_a_folder_of_csv_files_by_their_header(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    for name, text in CSV_FILES.items():
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "_SUCCESS").write_text("", encoding="utf-8")  # left out, as Spark does
    assert _new(lakehouse, "orders", "--from", str(folder)) == 0

    _loads(lakehouse)
    assert _spec(lakehouse, "bronze", "orders")["source"]["schema"] == CSV_DDL
    assert _spec(lakehouse, "bronze", "orders")["source"]["format"] == "csv"
    silver = _spec(lakehouse, "silver", "orders")
    assert silver["dedup"]["keys"] == ["order_id"]
    assert silver["event_time"] == "placed_at"
    land = _next_commands(capsys.readouterr().out)[0]
    assert land == ["land", "orders", *(str(folder / n) for n in sorted(CSV_FILES)),
                    "--conf", str(lakehouse.conf), "--env", lakehouse.env_name]


def test_without_a_key_or_a_time_the_silver_spec_says_what_to_add(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path
) -> None:
    rows = [{"label": "a", "sent_on": "1 Nov 2026"}, {"label": "a", "sent_on": "2 Nov 2026"}]
    assert _new(lakehouse, "labels", "--from", str(_json_sample(tmp_path, rows))) == 0
    _loads(lakehouse)
    text = (lakehouse.conf / "tables" / "silver" / "labels.yaml").read_text(encoding="utf-8")
    silver = yaml.safe_load(text)
    assert "dedup" not in silver and "event_time" not in silver
    assert "no key was found" in text
    assert "which column says when each event happened?" in text
    assert 'expr: "to_timestamp(sent_on)"' in text


def test_new_never_overwrites_a_spec(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = _json_sample(tmp_path / "samples")
    assert _new(lakehouse, "sales", "--from", str(sample)) == 0
    before = _specs(lakehouse)
    capsys.readouterr()

    assert _new(lakehouse, "sales", "--from", str(sample), "--gold") == 2
    err = capsys.readouterr().err.strip().splitlines()
    bronze = lakehouse.conf / "tables" / "bronze" / "sales.yaml"
    assert err == [f"error: expected no spec at {bronze}, found one: 'medallion new' never "
                   "replaces a spec; choose another table name or remove the file"]
    assert _specs(lakehouse) == before  # nothing written, not even the gold spec

    # one target taken is enough: the others are not written either
    silver_only = lakehouse.conf / "tables" / "silver" / "other.yaml"
    silver_only.write_text("source: sales\n", encoding="utf-8")
    before = _specs(lakehouse)
    assert _new(lakehouse, "other", "--from", str(sample)) == 2
    assert str(silver_only) in capsys.readouterr().err
    assert _specs(lakehouse) == before


def test_new_with_gold_writes_a_daily_calendar_aggregate(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _new(lakehouse, "sales", "--from", str(_json_sample(tmp_path)), "--gold") == 0
    project = _loads(lakehouse)
    gold = _spec(lakehouse, "gold", "sales_daily")
    assert gold == {"description": "Sales per day.", "source": "sales",
                    "event_time": "event_time", "window": {"type": "calendar", "unit": "day"},
                    "group_by": ["category"],
                    "aggregates": [{"name": "row_count", "expr": "count(*)",
                                    "comment": "Rows of the day"},
                                   {"name": "total_amount", "expr": "sum(amount)",
                                    "comment": "Sum of amount"}]}
    table = project.table("sales_daily", Layer.GOLD)
    assert table.spec.window is not None and table.spec.window.unit == "day"
    assert f"SELECT * FROM {table.full_name} LIMIT 10" in capsys.readouterr().out


@pytest.mark.parametrize("case, expected", [
    ("missing", "error: expected a sample file or folder at --from {path}, found nothing there"),
    ("empty", "error: expected sample files in the folder {path}, found none"),
    ("unknown", "error: expected sample files named .json, .jsonl, .ndjson, .csv, .parquet, "
                ".pq (or --format json|csv|parquet), found {path}"),
    ("name", "error: expected a table name of letters, digits and '_' not starting with a "
             "digit (at most 128 characters), found '1-sales'"),
    ("malformed", "error: expected JSON Lines (one JSON object per line) in {path}, found "
                  "what Spark cannot read: "),
    ("not parquet", "error: expected Parquet files in {path}, found what Spark cannot read: "),
    ("gold without time", "error: expected a TIMESTAMP column for the calendar aggregate (--gold), "
                          "found none in {path} (columns: id BIGINT, amount DOUBLE)"),
])
def test_bad_input_is_one_line_and_writes_nothing(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], case: str, expected: str
) -> None:
    path, table, extra = tmp_path / "in", "sales", []
    if case == "empty":
        path.mkdir()
    elif case == "unknown":
        path = tmp_path / "sales.txt"
        path.write_text("id\n1\n", encoding="utf-8")
    elif case == "name":
        path, table = _json_sample(tmp_path), "1-sales"
    elif case == "malformed":
        path = tmp_path / "sales.json"
        path.write_text('{"id": 1}\n{"id": 2\n', encoding="utf-8")
    elif case == "not parquet":
        path, extra = _json_sample(tmp_path), ["--format", "parquet"]
    elif case == "gold without time":
        rows = [{"id": r["id"], "amount": r["amount"]} for r in ROWS]
        path, extra = _json_sample(tmp_path, rows), ["--gold"]
    assert _new(lakehouse, table, "--from", str(path), *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(expected.format(path=path)), err[0]
    assert _specs(lakehouse) == {}


def test_new_then_land_then_run_gives_the_samples_rows_in_silver(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = _json_sample(tmp_path / "samples")
    assert _new(lakehouse, "sales", "--from", str(sample), "--gold") == 0
    land, run, sql = _next_commands(capsys.readouterr().out)
    assert main(land) == 0
    assert main(run) == 0
    silver = _loads(lakehouse).table("sales", Layer.SILVER).full_name
    rows = spark.table(silver).select("id", "event_time", "amount", "category").collect()
    assert len(rows) == len(ROWS)
    assert sorted((r["id"], r["event_time"].isoformat(), r["amount"], r["category"])
                  for r in rows) == sorted(tuple(r.values()) for r in ROWS)
    capsys.readouterr()
    assert main([*sql, "--json"]) == 0
    days = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((d["window_date"], d["category"], d["row_count"], d["total_amount"])
                  for d in days) == [("2026-11-01", "books", 2, 19.75),
                                     ("2026-11-01", "games", 1, 3.0),
                                     ("2026-11-02", "books", 1, 1.5),
                                     ("2026-11-02", "games", 1, 20.0),
                                     ("2026-11-03", "books", 1, 9.75)]


SERIES = {  # readings of two meters: no column unique, the meter and the time together are
    "readings-1.csv": "meter_id,read_at,kwh,pulses\n"
                      "m1,2026-01-30 08:00:00,1.5,15\nm2,2026-01-30 08:00:00,0.5,5\n"
                      "m1,2026-01-31 08:00:00,2.0,20\n",
    "readings-2.csv": "meter_id,read_at,kwh,pulses\n"
                      "m2,2026-01-31 08:00:00,1.0,10\nm1,2026-02-01 08:00:00,3.0,30\n"
                      "m2,2026-02-01 08:00:00,4.0,40\n",
}


def test_a_series_is_keyed_by_what_tells_it_and_its_time_and_gold_takes_a_unit(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "readings"
    folder.mkdir()
    for name, text in SERIES.items():
        (folder / name).write_text(text, encoding="utf-8")
    assert _new(lakehouse, "readings", "--from", str(folder), "--gold", "month") == 0
    project = _loads(lakehouse)
    # pulses is unique in the samples, but a count, not a key
    silver = _spec(lakehouse, "silver", "readings")
    assert silver["dedup"] == {"keys": ["meter_id", "read_at"], "delay": "1 day"}
    assert silver["expectations"] == [
        {"name": "has_meter_id_and_read_at", "rule": "meter_id IS NOT NULL AND read_at IS NOT "
         "NULL", "action": "quarantine"}]
    gold = _spec(lakehouse, "gold", "readings_monthly")
    assert gold["window"] == {"type": "calendar", "unit": "month"}
    assert gold["description"] == "Readings per month."
    assert gold["aggregates"][0] == {"name": "row_count", "expr": "count(*)",
                                     "comment": "Rows of the month"}
    assert gold["aggregates"][1]["expr"] == "sum(kwh)"
    table = project.table("readings_monthly", Layer.GOLD)
    out = capsys.readouterr().out
    assert f"SELECT * FROM {table.full_name} LIMIT 10" in out
    assert f"# Written by medallion new readings --from {folder} --gold month\n" in (
        lakehouse.conf / "tables" / "gold" / "readings_monthly.yaml").read_text(encoding="utf-8")
    # one reading sent twice: no longer unique together, so no key is proposed
    (folder / "readings-3.csv").write_text("meter_id,read_at,kwh,pulses\n"
                                           "m2,2026-02-01 08:00:00,4.0,41\n", encoding="utf-8")
    assert _new(lakehouse, "again", "--from", str(folder)) == 0
    again = _spec(lakehouse, "silver", "again")
    assert "dedup" not in again and "expectations" not in again
