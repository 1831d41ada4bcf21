"""Feeds that change shape: columns by name, the schema evolution modes, type changes, and the
schema history, on JSON, CSV and Parquet (real Spark, real Delta)."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze.job import BronzeJob
from framework.checkpoint import last_committed_batch
from framework.config.model import Layer
from framework.job import RunContext, RunStatus, TableRunSummary
from tests.support import REPO, Lakehouse, medallion_cmd, run_history

SCHEMA = "id STRING, ts TIMESTAMP, amount INT, region STRING"
TS = "2026-11-01T10:00:00Z"
TS_VALUE = datetime(2026, 11, 1, 10, 0, 0)
COLUMNS = ["id", "ts", "amount", "region"]


def spec(fmt: str, mode: str | None = None, schema: str = SCHEMA, **source: Any
         ) -> dict[str, Any]:
    src: dict[str, Any] = {"path": f"landing/{fmt}", "format": fmt, "schema": schema,
                           "clean_source": "archive", **source}
    if mode:
        src["schema_evolution"] = mode
    return {"description": f"a drifting {fmt} feed", "source": src}


def run(spark: SparkSession, lakehouse: Lakehouse, name: str) -> TableRunSummary:
    return BronzeJob(spark, lakehouse.project().table(name), RunContext()).run()


def ok(summary: TableRunSummary) -> TableRunSummary:
    assert summary.status is RunStatus.SUCCEEDED, summary.error
    return summary


# ------------------------------------------------------------------ writing files of each format
def write(spark: SparkSession, folder: Path, name: str, fmt: str, columns: list[str],
          rows: list[list[Any]], types: dict[str, str] | None = None) -> None:
    """One landing file: ``rows`` of ``columns`` (values as Python objects)."""
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "json":
        with (folder / f"{name}.json").open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(dict(zip(columns, row, strict=True))) + "\n")
    elif fmt == "csv":
        import csv

        with (folder / f"{name}.csv").open("w", encoding="utf-8", newline="") as fh:
            out = csv.writer(fh, lineterminator="\n")
            out.writerow(columns)
            out.writerows([["" if v is None else v for v in row] for row in rows])
    else:
        ddl = ", ".join(f"`{c}` {(types or {}).get(c, 'STRING')}" for c in columns)
        df = spark.createDataFrame([tuple(r) for r in rows], ddl)
        tmp = folder.parent / f".tmp-{name}"
        df.coalesce(1).write.mode("overwrite").parquet(str(tmp))
        part = next(tmp.glob("part-*.parquet"))
        part.rename(folder / f"{name}.parquet")
        subprocess.run(["rm", "-rf", str(tmp)], check=True)


# The drifts: each a file of two rows. Values as each format writes them: JSON and Parquet
# keep types; CSV holds text.
PARQUET_TYPES = {"ts": "TIMESTAMP", "amount": "INT", "AMOUNT": "INT"}


def drifts(fmt: str) -> dict[str, tuple[list[str], list[list[Any]], dict[str, str]]]:
    ts: Any = TS_VALUE if fmt == "parquet" else TS
    n = (lambda v: v) if fmt != "csv" else str
    wide = dict(PARQUET_TYPES, amount="BIGINT")
    text = dict(PARQUET_TYPES, amount="STRING")
    return {
        "base": (COLUMNS, [["b1", ts, n(1), "north"], ["b2", ts, n(2), "south"]],
                 PARQUET_TYPES),
        "added": ([*COLUMNS, "channel"], [["a1", ts, n(3), "north", "web"],
                                          ["a2", ts, n(4), "east", None]], PARQUET_TYPES),
        "removed": (COLUMNS[:3], [["r1", ts, n(5)], ["r2", ts, n(6)]], PARQUET_TYPES),
        "reordered": (["region", "ts", "amount", "id"], [["south", ts, n(7), "o1"],
                                                         ["west", ts, n(8), "o2"]],
                      PARQUET_TYPES),
        "case": (["ID", "ts", "AMOUNT", "region"], [["c1", ts, n(9), "north"],
                                                    ["c2", ts, n(10), "south"]], PARQUET_TYPES),
        "widened": (COLUMNS, [["w1", ts, n(3_000_000_000), "north"],
                              ["w2", ts, n(11), "south"]], wide),
        "incompatible": (COLUMNS, [["i1", ts, "abc", "north"], ["i2", ts, "12", "south"]],
                         text),
    }


def expected(fmt: str, mode: str) -> list[tuple[Any, ...]]:
    """(id, ts, amount, region, rescued as a dict or None, channel) per row, as the mode
    reads each drift."""
    add = mode == "addNewColumns"
    rescue_new = mode in ("rescue",)
    rows: list[tuple[Any, ...]] = [
        ("b1", TS_VALUE, 1, "north", None, None), ("b2", TS_VALUE, 2, "south", None, None),
        ("a1", TS_VALUE, 3, "north", {"channel": "web"} if rescue_new else None,
         "web" if add else None),
        # a JSON key outside the schema is kept even when null (its presence is data)
        ("a2", TS_VALUE, 4, "east", {"channel": None} if rescue_new and fmt == "json"
         else None, None),
        ("r1", TS_VALUE, 5, None, None, None), ("r2", TS_VALUE, 6, None, None, None),
        ("o1", TS_VALUE, 7, "south", None, None), ("o2", TS_VALUE, 8, "west", None, None),
    ]
    if fmt == "json":  # JSON keys are matched exactly, as Spark's JSON reader does
        for i, amount, region in (("c1", 9, "north"), ("c2", 10, "south")):
            kept = {"ID": i, "AMOUNT": amount} if mode != "none" else None
            rows.append((None, TS_VALUE, None, region, kept, None))
    else:
        rows += [("c1", TS_VALUE, 9, "north", None, None),
                 ("c2", TS_VALUE, 10, "south", None, None)]
    big: Any = "3000000000" if fmt == "csv" else 3_000_000_000
    rows += [("w1", TS_VALUE, None, "north", {"amount": big}, None),
             ("w2", TS_VALUE, 11, "south", None, None),
             ("i1", TS_VALUE, None, "north", {"amount": "abc"}, None)]
    # "12" is text in JSON and Parquet (a string where a number is expected), in CSV a number
    rows.append(("i2", TS_VALUE, 12, "south", None, None) if fmt == "csv" else
                ("i2", TS_VALUE, None, "south", {"amount": "12"}, None))
    return rows


@pytest.mark.parametrize("fmt", ["json", "csv", "parquet"])
@pytest.mark.parametrize("mode", ["rescue", "none", "addNewColumns"])
def test_drift_matrix(spark: SparkSession, lakehouse: Lakehouse, fmt: str, mode: str) -> None:
    """Every drift in one batch: the rows by name, the values that do not fit rescued (the
    row kept), the new column rescued, ignored or added; nothing quarantined."""
    name = f"feed_{fmt}"
    lakehouse.add_table("bronze", name, spec(fmt, mode, path=f"landing/{fmt}"))
    landing = lakehouse.path("landing", fmt)
    for drift, (columns, rows, types) in drifts(fmt).items():
        write(spark, landing, drift, fmt, columns, rows, types)

    summary = ok(run(spark, lakehouse, name))
    table = lakehouse.project().table(name)
    bronze = spark.table(table.full_name)
    got = [(r["id"], r["ts"], r["amount"], r["region"],
            json.loads(r["_rescued_data"]) if r["_rescued_data"] else None,
            r["channel"] if "channel" in bronze.columns else None) for r in bronze.collect()]
    assert sorted(got, key=repr) == sorted(expected(fmt, mode), key=repr)
    assert spark.table(table.qualified("quarantine")).count() == 0
    assert summary.counts["records_read"] == 14 and summary.rows_out == 14
    # The table's schema: the spec's; addNewColumns adds the new column at the end.
    data = [c for c in bronze.columns if not c.startswith("_")]
    assert data == ([*COLUMNS, "channel"] if mode == "addNewColumns" else COLUMNS)
    if mode == "addNewColumns":
        assert dict(bronze.dtypes)["channel"] == "string"
    ledger = {Path(r["path"]).stem: r["notes"]
              for r in spark.table(table.qualified("files")).collect()}
    if fmt != "json":  # a file's columns missing or new are said in its ledger row
        assert ledger["removed"] == "missing columns (null): region"
        word = {"rescue": "rescued", "none": "ignored", "addNewColumns": None}[mode]
        assert ledger["added"] == (f"new columns ({word}): channel" if word else None)
        assert ledger["base"] is None and ledger["reordered"] is None


def test_reordered_csv_header_is_read_by_name(spark: SparkSession, lakehouse: Lakehouse) -> None:
    """A CSV file whose header orders the columns differently puts each value in its column
    (it was read by position: id = "south", region = "d2")."""
    lakehouse.add_table("bronze", "customers", spec("csv"))
    landing = lakehouse.path("landing", "csv")
    landing.mkdir(parents=True)
    (landing / "a.csv").write_text(f"id,ts,amount,region\nd1,{TS},5,north\n")
    (landing / "b.csv").write_text(f"region,ts,amount,id\nsouth,{TS},7,d2\n")
    ok(run(spark, lakehouse, "customers"))
    bronze = spark.table(lakehouse.project().table("customers").full_name)
    expected_rows = spark.createDataFrame(
        [("d1", TS_VALUE, 5, "north"), ("d2", TS_VALUE, 7, "south")], SCHEMA)
    assert_df_equality(bronze.select(*COLUMNS), expected_rows, ignore_row_order=True)


def test_csv_file_with_a_new_column_is_ingested(spark: SparkSession, lakehouse: Lakehouse
                                                ) -> None:
    """A CSV file with a column the schema lacks keeps its rows: the known columns by name,
    the new one rescued (every row was quarantined, then the file)."""
    lakehouse.add_table("bronze", "customers", spec("csv"))
    landing = lakehouse.path("landing", "csv")
    landing.mkdir(parents=True)
    (landing / "a.csv").write_text(f"id,channel,region,ts,amount\nd1,web,north,{TS},5\n"
                                   f"d2,shop,south,{TS},6\n")
    summary = ok(run(spark, lakehouse, "customers"))
    table = lakehouse.project().table("customers")
    bronze = spark.table(table.full_name)
    expected_rows = spark.createDataFrame(
        [("d1", TS_VALUE, 5, "north", '{"channel":"web"}'),
         ("d2", TS_VALUE, 6, "south", '{"channel":"shop"}')], f"{SCHEMA}, _rescued_data STRING")
    assert_df_equality(bronze.select(*COLUMNS, "_rescued_data"), expected_rows,
                       ignore_row_order=True)
    assert summary.counts["quarantined_rows"] == 0 and summary.counts["failed_files"] == 0
    (row,) = spark.table(table.qualified("files")).collect()
    assert row["status"] == "archived" and row["notes"] == "new columns (rescued): channel"


def test_a_value_of_another_type_is_rescued_not_quarantined(
        spark: SparkSession, lakehouse: Lakehouse) -> None:
    """JSON "amount": "12.5" for an INT column and a new key: the row is kept, amount null,
    both values in the rescued column with their JSON types."""
    lakehouse.add_table("bronze", "orders", spec("json"))
    landing = lakehouse.path("landing", "json")
    landing.mkdir(parents=True)
    (landing / "a.json").write_text(
        f'{{"id": "e1", "ts": "{TS}", "amount": "12.5", "region": "north", "channel": "web", '
        f'"promo": false, "n": 0}}\n')
    summary = ok(run(spark, lakehouse, "orders"))
    table = lakehouse.project().table("orders")
    (row,) = spark.table(table.full_name).collect()
    assert (row["id"], row["amount"], row["region"]) == ("e1", None, "north")
    assert json.loads(row["_rescued_data"]) == {"amount": "12.5", "channel": "web",
                                                "promo": False, "n": 0}
    assert '"n":0' in row["_rescued_data"] and '"promo":false' in row["_rescued_data"]
    assert spark.table(table.qualified("quarantine")).count() == 0
    assert summary.counts["quarantined_rows"] == 0


def test_fail_on_new_columns_stops_the_batch_until_the_spec_accepts_them(
        spark: SparkSession, lakehouse: Lakehouse) -> None:
    """failOnNewColumns: the batch fails before anything is written, naming the file, the
    column and what to do; once the spec has the column, the next run reads the same batch."""
    lakehouse.add_table("bronze", "customers", spec("csv", "failOnNewColumns"))
    landing = lakehouse.path("landing", "csv")
    landing.mkdir(parents=True)
    (landing / "a.csv").write_text(f"id,ts,amount,region\nd1,{TS},5,north\n")
    ok(run(spark, lakehouse, "customers"))
    (landing / "b.csv").write_text(f"id,ts,amount,region,channel\nd2,{TS},6,south,web\n")
    table = lakehouse.project().table("customers")

    failed = run(spark, lakehouse, "customers")
    assert failed.status is RunStatus.FAILED
    assert failed.error is not None
    assert "b.csv" in failed.error and "new column channel" in failed.error
    assert "medallion schema customers --add \"channel STRING\"" in failed.error
    assert spark.table(table.full_name).count() == 1  # nothing of the batch written
    assert last_committed_batch(table.checkpoint) == 0
    assert (landing / "b.csv").exists()

    lakehouse.add_table("bronze", "customers",
                        spec("csv", "failOnNewColumns", schema=f"{SCHEMA}, channel STRING"))
    again = ok(run(spark, lakehouse, "customers"))
    assert again.first_batch == 1 and again.rows_out == 1
    rows = spark.table(table.full_name).select("id", "channel").collect()
    assert sorted((r["id"], r["channel"]) for r in rows) == [("d1", None), ("d2", "web")]


def test_fail_on_new_columns_refuses_a_json_value_of_another_type(
        spark: SparkSession, lakehouse: Lakehouse) -> None:
    lakehouse.add_table("bronze", "orders", spec("json", "failOnNewColumns"))
    landing = lakehouse.path("landing", "json")
    landing.mkdir(parents=True)
    (landing / "a.json").write_text(f'{{"id": "e1", "ts": "{TS}", "amount": 3}}\n'
                                    f'{{"id": "e2", "ts": "{TS}", "amount": "x"}}\n')
    failed = run(spark, lakehouse, "orders")
    assert failed.status is RunStatus.FAILED and failed.error is not None
    assert "amount (value does not fit its column's type)" in failed.error
    assert spark.table(lakehouse.project().table("orders").full_name).count() == 0


def test_add_new_columns_without_a_restart_and_the_schema_history(
        spark: SparkSession, lakehouse: Lakehouse) -> None:
    """addNewColumns: a new JSON key becomes a column (typed from its values) from the batch
    where it first appears, within the same run; earlier rows have null; every schema is in
    the history with its batch, and 'medallion schema' prints it."""
    lakehouse.add_table("bronze", "orders", spec("json", "addNewColumns",
                                                 max_files_per_trigger=1))
    landing = lakehouse.path("landing", "json")
    landing.mkdir(parents=True)
    (landing / "a.json").write_text(f'{{"id": "e1", "ts": "{TS}", "amount": 1}}\n')
    (landing / "b.json").write_text(f'{{"id": "e2", "ts": "{TS}", "amount": 2, "qty": 5, '
                                    f'"note": {{"x": 1}}}}\n')
    import os
    os.utime(landing / "b.json", (2_000_000_000, 2_000_000_000))  # read after a.json
    summary = ok(run(spark, lakehouse, "orders"))
    assert summary.batches == 2
    table = lakehouse.project().table("orders")
    bronze = spark.table(table.full_name)
    assert dict(bronze.dtypes)["qty"] == "bigint" and dict(bronze.dtypes)["note"] == "string"
    rows = {r["id"]: (r["qty"], r["note"], r["_rescued_data"]) for r in bronze.collect()}
    assert rows == {"e1": (None, None, None), "e2": (5, '{"x":1}', None)}
    history = spark.table(table.qualified("schemas")).orderBy("version").collect()
    assert [(h["version"], h["batch_id"], h["cause"], h["added"]) for h in history] == [
        (1, 0, "created", None), (2, 1, "addNewColumns", "note, qty")]
    # the run history's row of that batch says which columns it added
    runs = {r["batch_id"]: r["schema_change"] for r in
            run_history(spark, lakehouse, table.full_name) if r["status"] == "committed"}
    assert runs == {0: None, 1: "added note string, qty bigint"}
    env = lakehouse.cli_env()
    out = subprocess.run([*medallion_cmd(), "schema", "orders", "--env", lakehouse.env_name,
                          "--conf", str(lakehouse.conf)], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "addNewColumns" in out.stdout and "note, qty" in out.stdout


def test_widening_a_column_in_the_spec_alters_the_table(
        spark: SparkSession, lakehouse: Lakehouse) -> None:
    """INT to BIGINT in the spec widens the Delta column in place (rows kept, history
    recorded); BIGINT back to INT is a configuration error naming the column."""
    lakehouse.add_table("bronze", "orders", spec("json"))
    landing = lakehouse.path("landing", "json")
    landing.mkdir(parents=True)
    (landing / "a.json").write_text(f'{{"id": "e1", "ts": "{TS}", "amount": 7}}\n')
    ok(run(spark, lakehouse, "orders"))
    wide = SCHEMA.replace("amount INT", "amount BIGINT")
    lakehouse.add_table("bronze", "orders", spec("json", schema=wide))
    (landing / "b.json").write_text(f'{{"id": "e2", "ts": "{TS}", "amount": 3000000000}}\n')
    ok(run(spark, lakehouse, "orders"))
    table = lakehouse.project().table("orders")
    bronze = spark.table(table.full_name)
    assert dict(bronze.dtypes)["amount"] == "bigint"
    assert sorted((r["id"], r["amount"]) for r in bronze.collect()) == [
        ("e1", 7), ("e2", 3_000_000_000)]
    last = spark.table(table.qualified("schemas")).orderBy(F.desc("version")).first()
    assert last is not None and (last["cause"], last["widened"]) == ("spec", "amount bigint")

    lakehouse.add_table("bronze", "orders", spec("json"))  # back to INT: narrowing
    failed = run(spark, lakehouse, "orders")
    assert failed.status is RunStatus.FAILED and failed.error is not None
    assert "'amount'" in failed.error and "widen" in failed.error


def test_a_new_column_reaches_silver_tables_that_take_every_column(
        spark: SparkSession, lakehouse: Lakehouse) -> None:
    """addNewColumns in bronze: a silver table without a column list gains the column (earlier
    rows null); one with a column list keeps its columns."""
    from silver.job import SilverJob

    lakehouse.add_table("bronze", "orders", spec("json", "addNewColumns"))
    lakehouse.add_table("silver", "all_columns", {
        "description": "every column", "source": {"table": "orders"}})
    lakehouse.add_table("silver", "listed", {
        "description": "two columns", "source": {"table": "orders"},
        "columns": [{"name": "id"}, {"name": "amount"}]})
    landing = lakehouse.path("landing", "json")
    landing.mkdir(parents=True)

    def run_all() -> None:
        ok(run(spark, lakehouse, "orders"))
        project = lakehouse.project()
        for name in ("all_columns", "listed"):
            ok(SilverJob(spark, project.table(name, Layer.SILVER), RunContext()).run())

    (landing / "a.json").write_text(f'{{"id": "e1", "ts": "{TS}", "amount": 1}}\n')
    run_all()
    (landing / "b.json").write_text(f'{{"id": "e2", "ts": "{TS}", "amount": 2, '
                                    f'"channel": "web"}}\n')
    run_all()
    project = lakehouse.project()
    every = spark.table(project.table("all_columns", Layer.SILVER).full_name)
    assert every.columns == [*COLUMNS, "channel"]
    assert sorted((r["id"], r["channel"]) for r in every.collect()) == [
        ("e1", None), ("e2", "web")]
    listed = spark.table(project.table("listed", Layer.SILVER).full_name)
    assert listed.columns == ["id", "amount"] and listed.count() == 2


def test_a_run_stopped_between_altering_the_table_and_recording_it_is_completed(
        spark: SparkSession, lakehouse: Lakehouse) -> None:
    """addNewColumns alters the table, then records the schema, then writes the batch: a
    driver stopped after the first step leaves a column the history lacks; the next run
    records it (as the batch's own change) and reads the batch with it."""
    lakehouse.add_table("bronze", "orders", spec("json", "addNewColumns"))
    landing = lakehouse.path("landing", "json")
    landing.mkdir(parents=True)
    (landing / "a.json").write_text(f'{{"id": "e1", "ts": "{TS}", "amount": 1}}\n')
    ok(run(spark, lakehouse, "orders"))
    table = lakehouse.project().table("orders")
    # what the stopped batch had done: the table altered for its new key, nothing else
    spark.sql(f"ALTER TABLE delta.`{table.location}` ADD COLUMNS (qty BIGINT)")
    (landing / "b.json").write_text(f'{{"id": "e2", "ts": "{TS}", "amount": 2, "qty": 4}}\n')
    ok(run(spark, lakehouse, "orders"))
    history = spark.table(table.qualified("schemas")).orderBy("version").collect()
    assert [(h["version"], h["batch_id"], h["cause"], h["added"]) for h in history] == [
        (1, 0, "created", None), (2, 1, "addNewColumns", "qty")]
    rows = {r["id"]: r["qty"] for r in spark.table(table.full_name).collect()}
    assert rows == {"e1": None, "e2": 4}


def test_a_csv_file_without_its_header_is_quarantined_not_read_short(
        spark: SparkSession, lakehouse: Lakehouse) -> None:
    """header: true and a file whose first line is data: the line was taken for a header and
    its row lost; now the file goes whole to the quarantine folder, the reason in the ledger;
    header: false reads every line."""
    lakehouse.add_table("bronze", "customers", spec("csv"))
    landing = lakehouse.path("landing", "csv")
    landing.mkdir(parents=True)
    rows = "".join(f"d{i},{TS},{i},north\n" for i in range(5))
    (landing / "no-header.csv").write_text(rows)
    summary = ok(run(spark, lakehouse, "customers"))
    table = lakehouse.project().table("customers")
    assert spark.table(table.full_name).count() == 0 and summary.counts["failed_files"] == 1
    (row,) = spark.table(table.qualified("files")).collect()
    assert row["status"] == "quarantined" and "options.header" in row["error"]

    lakehouse.add_table("bronze", "positional", spec("csv", path="landing/positional",
                                                     options={"header": "false"}))
    (lakehouse.path("landing", "positional")).mkdir(parents=True)
    (lakehouse.path("landing", "positional") / "no-header.csv").write_text(rows)
    ok(run(spark, lakehouse, "positional"))
    got = spark.table(lakehouse.project().table("positional").full_name)
    assert sorted(r["id"] for r in got.collect()) == [f"d{i}" for i in range(5)]


def test_a_json_feed_in_latin1_is_read_in_its_encoding(
        spark: SparkSession, lakehouse: Lakehouse) -> None:
    """options.encoding is honoured for JSON as for CSV (it was quarantined as not UTF-8)."""
    lakehouse.add_table("bronze", "orders", spec("json", options={"encoding": "ISO-8859-1"}))
    landing = lakehouse.path("landing", "json")
    landing.mkdir(parents=True)
    (landing / "a.json").write_bytes(
        f'{{"id": "e1", "ts": "{TS}", "region": "Münster"}}\n'.encode("iso-8859-1"))
    summary = ok(run(spark, lakehouse, "orders"))
    (row,) = spark.table(lakehouse.project().table("orders").full_name).collect()
    assert row["region"] == "Münster" and summary.counts["failed_files"] == 0
