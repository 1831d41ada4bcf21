"""The command line and the lifecycle in-process, on the shared session: failures give exit
code 1 and an event, continuous mode keeps picking up files until stopped, status reports."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bronze.job import BronzeJob
from framework.cli import main
from framework.job import RunContext, RunStatus, StopSignal, TriggerPolicy
from tests.support import (
    Lakehouse,
    archived_files,
    bronze_spec,
    files_under,
    medallion_cmd,
    write_json_lines,
    write_order_files,
)


def _args(lakehouse: Lakehouse, *args: str) -> list[str]:
    return [*args, "--conf", str(lakehouse.conf), "--env", lakehouse.env_name]


def test_a_failing_query_exits_non_zero_and_logs_the_failure(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    write_order_files(lakehouse.path("landing", "orders"), files=1, per_file=3)
    table = lakehouse.project().table("orders")
    # The table already exists with an incompatible type: the run fails before its query
    # starts, naming the column.
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {lakehouse.schemas['bronze']}")
    spark.sql(f"CREATE TABLE {table.full_name} (order_id INT) USING DELTA "
              f"LOCATION '{table.location}'")
    code = main(_args(lakehouse, "run", "bronze", "--log-format", "json"))
    assert code == 1
    captured = capsys.readouterr()
    assert "failed" in captured.out and table.full_name in captured.out
    events = [json.loads(line) for line in captured.err.splitlines() if line.startswith("{")]
    failed = [e for e in events if e["event"] == "job.failed"]
    assert failed and "step 'prepare' failed" in failed[0]["error"]
    assert "'order_id'" in failed[0]["error"] and "widen" in failed[0]["error"]
    # nothing was archived: the batch did not commit
    assert len(files_under(lakehouse.path("landing", "orders"))) == 1


def test_continuous_mode_picks_up_new_files_until_stopped(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    landing = lakehouse.path("landing", "orders")
    first = write_order_files(landing, files=2, per_file=5)
    table = lakehouse.project().table("orders")
    ctx = RunContext(trigger=TriggerPolicy(continuous=True, interval="1 second"))
    job = BronzeJob(spark, table, ctx)
    result: list[object] = []
    runner = threading.Thread(target=lambda: result.append(job.run()))
    runner.start()

    def wait_for(rows: int) -> None:
        deadline = time.monotonic() + 180
        while sum(b.good for b in list(job.batches.values())) < rows:
            assert time.monotonic() < deadline, f"timed out waiting for {rows} rows"
            assert runner.is_alive(), result
            time.sleep(0.5)

    wait_for(len(first))
    later = write_order_files(landing, files=1, per_file=5, start=100, prefix="later")
    wait_for(len(first) + len(later))
    ctx.stop.request("test")
    runner.join(timeout=180)
    (summary,) = result
    assert summary.status is RunStatus.STOPPED  # type: ignore[attr-defined]
    assert summary.rows_out == 15  # type: ignore[attr-defined]
    assert spark.read.format("delta").load(table.location).count() == 15


def test_a_continuous_run_keeps_every_feed_running_at_once(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    from framework.runner import run_until_stopped

    for name in ("orders", "returns"):
        lakehouse.add_table("bronze", name, bronze_spec(path=f"landing/{name}"))
        write_order_files(lakehouse.path("landing", name), files=1, per_file=5, prefix=name)
    lakehouse.write_env(processing_interval="1 second")
    project = lakehouse.project()
    tables = project.in_flow_order(project.tables)
    locations = [t.location for t in tables]
    stop = StopSignal()
    seen: list[str] = []

    def watch() -> None:  # (the run holds this thread, for its signal handlers)
        deadline = time.monotonic() + 300
        try:
            while not all(_rows(spark, location) == 5 for location in locations):
                assert time.monotonic() < deadline, "timed out waiting for both feeds"
                time.sleep(0.5)
            seen.append("both feeds")
            # both queries keep running: a file landed now in either feed is read
            write_order_files(lakehouse.path("landing", "returns"), files=1, per_file=3,
                              start=50, prefix="later")
            while _rows(spark, locations[1]) < 8:
                assert time.monotonic() < deadline, "timed out waiting for the later file"
                time.sleep(0.5)
            seen.append("the later file")
        finally:
            stop.request("test")

    watcher = threading.Thread(target=watch)
    watcher.start()
    summary = run_until_stopped(spark, project, tables, continuous=True, stop=stop)
    watcher.join()
    assert seen == ["both feeds", "the later file"]
    assert [(t.table.rsplit(".", 1)[-1], t.status) for t in summary.tables] == [
        ("orders", RunStatus.STOPPED), ("returns", RunStatus.STOPPED)]


def _rows(spark: SparkSession, location: str) -> int:
    try:
        return spark.read.format("delta").load(location).count()
    except Exception:  # (not created yet)
        return 0


def test_status_reports_rows_batches_and_backlog(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(max_files_per_trigger=1))
    landing = lakehouse.path("landing", "orders")
    write_order_files(landing, files=2, per_file=4)
    assert main(_args(lakehouse, "run", "bronze", "--log-format", "json")) == 0
    write_order_files(landing, files=3, per_file=4, start=50, prefix="waiting")
    capsys.readouterr()
    assert main(_args(lakehouse, "status", "--log-format", "json")) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines()
               if line.startswith(lakehouse.project().table("orders").full_name))
    cells = [c.strip() for c in row.split("|")]
    # rows, version, last batch, pending files and their bytes
    pending = sum(p.stat().st_size for p in lakehouse.path("landing", "orders").glob("*.json"))
    assert cells[1:] == ["delta", "8", cells[3], "1", "3", str(pending)]


def test_sql_prints_a_table(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    query = "SELECT 1 AS one, 'x' AS two"
    assert main(_args(lakehouse, "sql", query, "--log-format", "json")) == 0
    first = capsys.readouterr()
    assert first.out.splitlines() == ["one | two", "----+----", "1   | x", "(1 row)"]
    # the lake's first query that starts Spark says how to get answers in about a second;
    # the next ones do not
    hints = [json.loads(line)["hint"] for line in first.err.splitlines()
             if '"sql.starting_spark"' in line]
    assert len(hints) == 1 and "`medallion serve`" in hints[0]
    assert main(_args(lakehouse, "sql", query, "--log-format", "console")) == 0
    assert "medallion serve" not in capsys.readouterr().err


def test_sql_says_when_it_cuts_its_output_in_both_formats(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    query = "SELECT id FROM range(5)"
    assert main(_args(lakehouse, "sql", query, "--limit", "3", "--log-format", "json")) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.strip() for line in out[2:]] == [
        "0", "1", "2", "(3 rows)", "output cut at 3 rows: the query returns more (--limit N "
        "shows more)"]
    assert main(_args(lakehouse, "sql", query, "--limit", "3", "--json",
                      "--log-format", "json")) == 0
    captured = capsys.readouterr()
    assert [json.loads(line) for line in captured.out.splitlines()] == \
        [{"id": 0}, {"id": 1}, {"id": 2}]  # rows only: the notice is on stderr
    assert "output cut at 3 rows: the query returns more" in captured.err
    # the whole result: no notice, in either format
    assert main(_args(lakehouse, "sql", query, "--limit", "5", "--json")) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 5
    assert "output cut" not in captured.err + captured.out
    with pytest.raises(SystemExit):
        main(_args(lakehouse, "sql", query, "--limit", "0"))
    assert "expected a whole number of rows, 1 or more, found '0'" in capsys.readouterr().err


def test_land_uploads_whole_files_into_the_landing_folder_and_never_overwrites(
    lakehouse: Lakehouse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    export = tmp_path / "orders-0001.json"
    export.write_text('{"order_id": "o1"}\n')
    assert main(_args(lakehouse, "land", "orders", str(export), "--log-format", "json")) == 0
    landed = lakehouse.path("landing", "orders", "orders-0001.json")
    assert landed.read_text() == export.read_text()
    assert [p.name for p in lakehouse.path("landing", "orders").iterdir()] == [landed.name]
    assert main(_args(lakehouse, "land", "orders", str(export), "--log-format", "json")) == 1
    assert "expected no file" in capsys.readouterr().err
    assert main(_args(lakehouse, "land", "orders", str(tmp_path / "missing.json"))) == 2
    capsys.readouterr()
    more = [tmp_path / f"orders-000{i}.json" for i in (2, 3)]
    for file in more:
        file.write_text('{"order_id": "o2"}\n')
    assert main(_args(lakehouse, "land", "orders", *map(str, more), "--log-format", "console")) \
        == 0
    out = capsys.readouterr()  # a line a file, at a terminal as in a job
    assert out.out.splitlines() == [f"landed: {lakehouse.path('landing', 'orders', f.name)}"
                                    for f in more] and out.err == ""


# ---------------------------------------------------------------------- a lake from scratch
SALES_SCHEMA = "order_id STRING, store_id STRING, amount INT, event_time TIMESTAMP"


def _sales_lake(lakehouse: Lakehouse, broken: bool = True) -> None:
    """Orders and stores in bronze and silver, a broken feed (no landing folder) with a
    silver table over it, and a gold mart over silver that sorts before everything else."""
    feeds = [("orders", SALES_SCHEMA), ("stores", "store_id STRING, region STRING")]
    for name, schema in feeds + ([("broken", SALES_SCHEMA)] if broken else []):
        lakehouse.add_table("bronze", name, {"source": {
            "path": f"landing/{name}", "format": "json", "schema": schema}})
        lakehouse.add_table("silver", name, {"source": name})
    lakehouse.add_table("gold", "a_sales_by_region", {
        "kind": "mart", "fact": {"table": "orders", "layer": "silver"},
        "dimensions": [{"table": "stores", "on": "store_id"}]})
    landing = lakehouse.path("landing")
    write_json_lines(landing / "orders" / "o.json", [
        {"order_id": f"o{i}", "store_id": f"s{i % 3}", "amount": i,
         "event_time": "2026-11-01T10:00:00Z"} for i in range(9)])
    write_json_lines(landing / "stores" / "s.json", [
        {"store_id": f"s{i}", "region": "west" if i else "east"} for i in range(3)])


@pytest.mark.parametrize("parallel", ["1", "3"])
def test_run_all_on_a_fresh_lake_makes_its_schemas_and_skips_only_what_reads_a_failure(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], parallel: str
) -> None:
    _sales_lake(lakehouse)
    summary_path = tmp_path / "summary.json"
    code = main(_args(lakehouse, "run", "all", "--summary", str(summary_path),
                      "--log-format", "json", "--parallel", parallel))
    assert code == 1  # one feed failed
    # the summary in flow order, however the tables ran
    assert [(t["layer"], t["table"].rsplit(".", 1)[-1]) for t in json.loads(
        summary_path.read_text())["tables"]] == [
        ("bronze", "broken"), ("bronze", "orders"), ("bronze", "stores"),
        ("silver", "broken"), ("silver", "orders"), ("silver", "stores"),
        ("gold", "a_sales_by_region")]
    tables = {t["table"].rsplit(".", 1)[-1] + "@" + t["layer"]: t
              for t in json.loads(summary_path.read_text())["tables"]}
    status = {name: t["status"] for name, t in tables.items()}
    assert status == {"orders@bronze": "succeeded", "stores@bronze": "succeeded",
                      "broken@bronze": "failed", "orders@silver": "succeeded",
                      "stores@silver": "succeeded", "broken@silver": "skipped",
                      "a_sales_by_region@gold": "succeeded"}
    assert "medallion init" in tables["broken@bronze"]["error"]
    assert tables["broken@silver"]["error"] == (
        f"it reads spark_catalog.{lakehouse.schemas['bronze']}.broken, which failed")
    captured = capsys.readouterr()
    assert "broken skipped: it reads" in captured.out  # the printed summary says why
    mart = f"{lakehouse.schemas['gold']}.a_sales_by_region"
    assert spark.table(mart).count() == 9

    # When each job started and ended, in the order the events were written: one after
    # another, or the bronze feeds at once, and every table after those it reads
    events = [(e["event"].removeprefix("job."), e["table"].rsplit(".", 1)[-1] + "@" + e["layer"])
              for line in captured.err.splitlines() if line.startswith("{")
              for e in [json.loads(line)] if e["event"] in ("job.started", "job.finished")]
    at = {event: i for i, event in enumerate(events)}
    bronze = ["broken@bronze", "orders@bronze", "stores@bronze"]
    if parallel == "1":
        assert [name for kind, name in events if kind == "started"] == [
            name for name in status if name != "broken@silver"]
        assert all(events[i][1] == events[i + 1][1] for i in range(0, len(events), 2))
    else:
        assert max(at[("started", b)] for b in bronze) < min(at[("finished", b)] for b in bronze)
    for table, reads in (("orders@silver", ["orders@bronze"]), ("stores@silver", ["stores@bronze"]),
                         ("a_sales_by_region@gold", ["orders@silver", "stores@silver"])):
        assert at[("started", table)] > max(at[("finished", r)] for r in reads)
    assert ("started", "broken@silver") not in at  # skipped


def test_a_run_with_nothing_new_starts_no_jvm_and_one_new_file_runs_only_its_flow(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path
) -> None:
    _sales_lake(lakehouse, broken=False)
    mart = f"{lakehouse.schemas['gold']}.a_sales_by_region"

    def run_all(*extra: str) -> dict[str, str]:
        summary = tmp_path / "summary.json"
        assert main(_args(lakehouse, "run", "all", "--summary", str(summary), *extra)) == 0
        return {t["table"].rsplit(".", 1)[-1] + "@" + t["layer"]: t["status"]
                for t in json.loads(summary.read_text())["tables"]}

    assert set(run_all().values()) == {"succeeded"}
    assert spark.table(mart).count() == 9

    # Nothing new: answered from the lake's files. With no Java to start, a run that started
    # Spark would fail (the gateway cannot launch).
    env = {**lakehouse.cli_env(), "JAVA_HOME": str(tmp_path / "no-java")}
    summary = tmp_path / "quiet.json"
    began = time.monotonic()
    done = subprocess.run([*medallion_cmd(), "run", "all", "--summary", str(summary)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    quiet = json.loads(summary.read_text())
    assert quiet["status"] == "succeeded"
    assert [t["status"] for t in quiet["tables"]] == ["up_to_date"] * 5
    assert time.monotonic() - began < 60  # (no JVM: seconds, on a loaded machine too)

    # One new file of orders: only the orders flow runs
    write_json_lines(lakehouse.path("landing", "orders", "o2.json"), [
        {"order_id": f"o{i}", "store_id": "s1", "amount": i,
         "event_time": "2026-11-01T11:00:00Z"} for i in range(9, 12)])
    assert run_all() == {"orders@bronze": "succeeded", "stores@bronze": "up_to_date",
                         "orders@silver": "succeeded", "stores@silver": "up_to_date",
                         "a_sales_by_region@gold": "succeeded"}
    assert spark.table(mart).count() == 12

    # A changed spec runs its table again, and what reads it only if it wrote something
    lakehouse.add_table("silver", "stores", {"source": "stores", "description": "the stores"})
    assert run_all("--parallel", "3") == {
        "orders@bronze": "up_to_date", "stores@bronze": "up_to_date",
        "orders@silver": "up_to_date", "stores@silver": "succeeded",
        "a_sales_by_region@gold": "up_to_date"}


def test_status_works_on_an_empty_lake_missing_tables_and_views(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    _sales_lake(lakehouse)
    assert main(_args(lakehouse, "status", "--log-format", "json")) == 0
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines()[2:-1]]
    assert {r[1].strip() for r in rows} == {"missing"} and len(rows) == 7
    assert main(_args(lakehouse, "run", "all", "--log-format", "json")) == 1
    capsys.readouterr()
    assert main(_args(lakehouse, "status", "--log-format", "json")) == 0
    kinds = {r[0].strip().rsplit(".", 1)[-1] + "@" + r[0].split(".")[1].split("_")[0]:
             (r[1].strip(), r[2].strip())
             for r in (line.split("|") for line in capsys.readouterr().out.splitlines()[2:-1])}
    assert kinds["a_sales_by_region@gold"] == ("view", "NULL")  # the files cannot count it
    assert kinds["orders@silver"] == ("delta", "9")
    assert kinds["broken@bronze"] == ("delta", "0")  # made before its read failed
    assert kinds["broken@silver"] == ("missing", "NULL")
    assert main(_args(lakehouse, "status", "--count", "--log-format", "json")) == 0
    counted = {r[0].strip(): (r[1].strip(), r[2].strip())
               for r in (line.split("|") for line in capsys.readouterr().out.splitlines()[2:-1])}
    assert counted[f"spark_catalog.{lakehouse.schemas['gold']}.a_sales_by_region"] == \
        ("view", "9")


# ---------------------------------------------------------------------- user errors
def test_user_errors_print_one_line_and_exit_2(
    lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec())
    cases = [
        (["sql", "SELEC 1"], "Spark cannot run the query: [PARSE_SYNTAX_ERROR]"),
        (["sql", "SELECT * FROM nowhere.nothing"], "[TABLE_OR_VIEW_NOT_FOUND]"),
        (["run", "bronze", "--table", "nope"], "expected one configured table named 'nope'"),
        (["optimize", "orders"], "to exist, found none"),
    ]
    # (a lake's first query that starts Spark says once how to answer faster: said here)
    assert main(_args(lakehouse, "sql", "SELECT 1", "--log-format", "console")) == 0
    assert "sql.starting_spark" in capsys.readouterr().err
    for args, message in cases:
        assert main(_args(lakehouse, *args, "--log-format", "console")) == 2, args
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
        assert "Traceback" not in captured.err and "at org.apache" not in captured.err
    # JSON logs: the one line is an event; --log-level debug adds the stack
    assert main(_args(lakehouse, "sql", "SELEC 1", "--log-format", "json")) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert json.loads(line)["event"] == "command.failed"
    assert main(_args(lakehouse, "sql", "SELEC 1", "--log-format", "console",
                      "--log-level", "debug")) == 2
    assert "Traceback" in capsys.readouterr().err


def test_a_missing_landing_folder_fails_the_run_until_init_makes_it(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(path="landing/ordres"))  # a typo
    assert main(_args(lakehouse, "validate", "--no-spark")) == 0
    out = capsys.readouterr().out
    assert "warning:" in out and "landing/ordres does not exist" in out
    assert main(_args(lakehouse, "run", "bronze", "--log-format", "json")) == 1
    out = capsys.readouterr().out
    assert "expected the landing folder" in out and "medallion init" in out
    assert not lakehouse.path("landing", "ordres").exists()  # not made by the run
    assert main(_args(lakehouse, "init")) == 0
    assert main(_args(lakehouse, "run", "bronze", "--log-format", "json")) == 0


def test_land_keep_times_keeps_each_files_own_time_on_a_local_disk(
    lakehouse: Lakehouse, tmp_path: Path
) -> None:
    # (ADLS sets times itself: there it is refused, see test_adls)
    lakehouse.add_table("bronze", "orders", bronze_spec())
    export = tmp_path / "a.json"
    export.write_text("{}\n")
    assert main(_args(lakehouse, "land", "orders", str(export), "--keep-times")) == 0
    assert lakehouse.path("landing", "orders", "a.json").stat().st_mtime_ns // 10**6 == \
        export.stat().st_mtime_ns // 10**6  # to the millisecond, as Spark reads it


def test_purge_archive_ages_files_from_when_they_were_archived(
    spark: SparkSession, lakehouse: Lakehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    # A backlog that landed 40 days ago and is ingested today must not be purged by a 30-day
    # retention tomorrow: its age is from its archive manifest, not its landing time.
    lakehouse.add_table("bronze", "orders", bronze_spec())
    landing = lakehouse.path("landing", "orders")
    write_order_files(landing, files=2, per_file=2)
    landed = time.time() - 40 * 86_400
    for p in landing.iterdir():
        os.utime(p, (landed, landed))
    assert main(_args(lakehouse, "run", "bronze", "--log-format", "json")) == 0
    archive = lakehouse.path("archive", "orders")
    archived = archived_files(archive)
    assert len(archived) == 2 and all(p.stat().st_mtime < landed + 1 for p in archived)
    assert main(_args(lakehouse, "purge-archive", "--older-than", "30d")) == 0
    assert archived_files(archive) == archived

    # 31 days later (the manifest says so): the files go, and their manifest
    (manifest,) = (archive / "_manifests").glob("*.json")
    listed = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**listed, "archived_at_ms": int(
        (time.time() - 31 * 86_400) * 1000)}))
    capsys.readouterr()
    assert main(_args(lakehouse, "purge-archive", "--older-than", "30d", "--dry-run")) == 0
    assert "| 2 " in capsys.readouterr().out and len(files_under(archive)) == 3
    assert main(_args(lakehouse, "purge-archive", "--older-than", "30d")) == 0
    assert files_under(archive) == []
