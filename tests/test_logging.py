"""Logging: one structured event per micro-batch, bound context, secrets never logged."""

from __future__ import annotations

import io
import json
import re
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from structlog.testing import capture_logs

from bronze.job import BronzeJob
from framework.config.model import Layer
from framework.job import RunContext, RunStatus
from framework.logging import LogFormat, configure_logging, get_logger, redact
from framework.redaction import PLAN_SECRET_LOOKAHEAD, SPARK_STRING_REDACTION_REGEX
from framework.session import _env_conf
from tests.support import (
    BIN,
    REPO,
    Lakehouse,
    QuickstartLake,
    bronze_spec,
    foreign_lines,
    user_env,
    write_order_files,
)

BATCH_FIELDS = {
    "batch_id", "input_rows", "input_rows_per_second", "processed_rows_per_second",
    "duration_ms", "watermark", "state_rows", "rows_dropped_by_watermark",
}


def test_one_event_per_micro_batch_with_bound_context(
    spark: SparkSession, lakehouse: Lakehouse
) -> None:
    lakehouse.add_table("bronze", "orders", bronze_spec(max_files_per_trigger=1))
    write_order_files(lakehouse.path("landing", "orders"), files=3, per_file=7)
    table = lakehouse.project().table("orders", Layer.BRONZE)
    ctx = RunContext()
    with capture_logs() as logs:
        summary = BronzeJob(spark, table, ctx).run()
    assert summary.status is RunStatus.SUCCEEDED
    batches = [e for e in logs if e["event"] == "stream.batch.progress"]
    assert [e["batch_id"] for e in batches] == [0, 1, 2]
    for event in batches:
        assert event.keys() >= BATCH_FIELDS
        assert event["input_rows"] == 7
        assert event["layer"] == "bronze"
        assert event["table"] == table.full_name
        assert event["run_id"] == ctx.run_id
    committed = [e for e in logs if e["event"] == "bronze.batch.committed"]
    assert [e["bronze_rows"] for e in committed] == [7, 7, 7]
    for event in committed:  # where each batch's time went
        assert event["seconds"].keys() == {"write", "ledger", "settle"}
        assert event["seconds"]["write"] > 0 and event["seconds"]["ledger"] > 0
    [reconciled] = [e for e in logs if e["event"] == "bronze.run.reconciled"]
    steps = reconciled["seconds"]
    # (the run history's step, when its append ran before this event: it runs beside it)
    assert {"write", "ledger", "settle", "reconcile"} <= steps.keys() \
        <= {"write", "ledger", "settle", "reconcile", "history"}
    assert steps["write"] == pytest.approx(sum(e["seconds"]["write"] for e in committed))
    assert summary.batches == 3 and summary.rows_in == 21


def test_a_canary_secret_appears_in_no_log_line(
    spark: SparkSession,
    lakehouse: Lakehouse,
    monkeypatch: pytest.MonkeyPatch,
    restore_structlog: None,
) -> None:
    canary = "canary-5e1f0a7d93"
    monkeypatch.setenv("CANARY_SECRET", canary)
    monkeypatch.setenv("AZURE_CLIENT_SECRET", canary)
    lakehouse.write_env(
        spark_conf={
            "spark.ui.enabled": "false",
            "fs.azure.account.key.acct1.dfs.core.windows.net": "${CANARY_SECRET}",
        },
        storage={"account": "acct1", "auth": "service_principal", "tenant_id": "t",
                 "client_id": "c", "client_secret": "${AZURE_CLIENT_SECRET}"},
    )
    lakehouse.add_table("bronze", "orders", bronze_spec())
    write_order_files(lakehouse.path("landing", "orders"), files=1, per_file=3)

    out = io.StringIO()
    configure_logging(LogFormat.JSON, stream=out)
    project = lakehouse.project()
    resolved = _env_conf(project.env)  # resolving registers the value with the redactor
    log = get_logger(env=project.env.name)
    log.info("config.loaded", env=repr(project.env), spark_conf=resolved)
    log.info("storage.auth", client_secret=canary, note=f"using {canary} for acct1")
    log.error("storage.failed",
              error=f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={canary};")
    try:
        raise RuntimeError(f"request with Bearer {canary} refused")
    except RuntimeError:
        log.exception("storage.exception")
    summary = BronzeJob(spark, project.table("orders"), RunContext()).run()
    assert summary.status is RunStatus.SUCCEEDED

    text = out.getvalue()
    lines = text.splitlines()
    assert len(lines) > 8 and all(json.loads(line) for line in lines)
    assert canary not in text
    assert "***" in text
    assert any(json.loads(line)["event"] == "stream.batch.progress" for line in lines)


def test_redaction_keeps_ordinary_fields() -> None:
    event = {"keys": ["order_id"], "join_key": "store_id", "password": "p4ss", "rows": 3,
             "nested": {"sas_token": "sv=1&sig=abc", "url": "https://x/y?sv=1&sig=abcdef"}}
    assert redact(event) == {
        "keys": ["order_id"], "join_key": "store_id", "password": "***", "rows": 3,
        "nested": {"sas_token": "***", "url": "https://x/y?sv=1&sig=***"},
    }


def test_progress_reports_reach_the_listener_without_a_java_exception(
    spark: SparkSession, lakehouse: Lakehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyspark's own bridge reads a report field by field and ends each of its maps and lists
    on a Java exception, each converted through tens of class lookups; the framework's reads
    the report's JSON (framework.listener)."""
    import pyspark.errors.exceptions.captured as captured

    converted: list[str] = []
    convert = captured.convert_exception

    def counting(error: Any) -> Any:
        converted.append(str(error).splitlines()[0])
        return convert(error)

    monkeypatch.setattr(captured, "convert_exception", counting)
    lakehouse.add_table("bronze", "orders", bronze_spec(max_files_per_trigger=1))
    write_order_files(lakehouse.path("landing", "orders"), files=2, per_file=3)
    table = lakehouse.project().table("orders", Layer.BRONZE)
    with capture_logs() as logs:
        summary = BronzeJob(spark, table, RunContext()).run()
    assert summary.status is RunStatus.SUCCEEDED
    assert [e["batch_id"] for e in logs if e["event"] == "stream.batch.progress"] == [0, 1]
    assert [c for c in converted if "NoSuchElementException" in c] == []


def test_a_progress_report_read_from_its_json_is_the_one_read_field_by_field(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Everything the framework takes from a report (framework.listener.BatchProgress), from a
    query with a watermark, state, an observed metric and a file source."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    from framework.listener import BatchProgress

    write_order_files(tmp_path / "in", files=2, per_file=5)
    stream = (spark.readStream.schema("order_id STRING, quantity INT, event_time TIMESTAMP")
              .option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
              .withWatermark("event_time", "1 hour").dropDuplicates(["order_id"])
              .observe("written", F.count(F.lit(1)).alias("rows")))
    query = (stream.writeStream.format("delta").option("checkpointLocation",
                                                       str(tmp_path / "cp"))
             .trigger(availableNow=True).start(str(tmp_path / "out")))
    query.awaitTermination(300)
    reports = list(query._jsq.recentProgress())  # (the classic driver's report objects)
    by_field = [BatchProgress.from_progress(StreamingQueryProgress.fromJObject(r))
                for r in reports]
    from_json = [BatchProgress.from_progress(StreamingQueryProgress.fromJson(json.loads(
        r.json()))) for r in reports]
    # the same, but the rates, which the JSON gives to one decimal place (as the events do)
    rates = ("input_rows_per_second", "processed_rows_per_second")
    assert [replace(b, **dict.fromkeys(rates, 0.0)) for b in from_json] == \
        [replace(b, **dict.fromkeys(rates, 0.0)) for b in by_field]
    for exact, rounded in zip(by_field, from_json, strict=True):
        for rate in rates:
            assert getattr(rounded, rate) == pytest.approx(getattr(exact, rate), abs=0.051)
    assert sum(b.input_rows for b in by_field) == 10
    assert sum(b.observed["written"]["rows"] for b in by_field) == 10
    assert max(b.state_rows for b in by_field) == 10
    assert by_field[-1].watermark is not None


# Each secret format Spark masks in the text it produces (framework.redaction), in several
# cases: (text, the secret in it)
PLAN_SECRETS = [
    ("AccountKey=k3yA1;", "k3yA1"), ("accountkey=k3yA2 x", "k3yA2"),
    ("SharedAccessSignature=sv1k3yA3", "sv1k3yA3"), ("SHAREDACCESSKEY=k3yA4", "k3yA4"),
    ("Password=p4ssA5", "p4ssA5"), ("PWD=p4ssA6", "p4ssA6"),
    ("https://x/y?sv=1&sig=s1gA7&se=2", "s1gA7"), ("https://x/y?SIG=s1gA8", "s1gA8"),
    ("Bearer t0kenA9.x", "t0kenA9.x"), ("client_secret=s3cA10&x=1", "s3cA10"),
    ('password="p 4ssA11"', "p 4ssA11"),
]


def test_spark_masks_each_secret_format_in_a_query_plan_and_nothing_else(
    spark: SparkSession
) -> None:
    """The worker's session has the framework's settings (tests/conftest.py)."""
    for text, secret in PLAN_SECRETS:
        plan = "\n".join(r[0] for r in spark.sql(
            f"EXPLAIN EXTENDED SELECT '{text}' AS v, 'ordinary text' AS w").collect())
        assert secret not in plan and "*********(redacted)" in plan, (text, plan)
        assert "ordinary text" in plan


def test_the_plan_redaction_s_lookahead_changes_no_match() -> None:
    """The lookahead that makes Spark's scan cheap only refuses positions where no format
    begins: with or without it, the same text is masked, in plans and around every format."""
    guard = PLAN_SECRET_LOOKAHEAD
    assert guard in SPARK_STRING_REDACTION_REGEX
    guarded = re.compile(SPARK_STRING_REDACTION_REGEX)
    unguarded = re.compile(SPARK_STRING_REDACTION_REGEX.replace(guard, ""))
    plan = ("+- FileScan parquet [add#12,remove#13] Batched: true, Location: InMemoryFileIndex["
            "file:/lake/tables/bronze/orders/_delta_log/00000000000000000003.json], "
            "PushedFilters: [IsNotNull(password), EqualTo(pwd,1)], ReadSchema: struct<path:"
            "string,sas:string,client:string,bearer:string,account:string,shared:string>\n")
    texts = [plan, *(f"{plan}{before}{text}{after}{plan}" for text, _ in PLAN_SECRETS
                     for before, after in (("", ""), (" ", ";"), ("=", "&"), ("x", "\n")))]
    for text in texts:
        assert guarded.sub("*", text) == unguarded.sub("*", text), text
    assert sum(guarded.sub("*", t) != t for t in texts) == 4 * len(PLAN_SECRETS)


def test_a_run_whose_files_fail_prints_no_java_stack_at_the_default_level(
    lakehouse: Lakehouse
) -> None:
    """Unreadable files: one event per batch names each with its reason; Spark's log keeps no
    Java stack frame (they come with --log-level debug, see framework.session)."""
    import subprocess

    from tests.support import REPO, foreign_lines, medallion_cmd

    lakehouse.add_table("bronze", "events", {"source": {
        "path": "landing/events", "format": "parquet", "schema": "id STRING"}})
    landing = lakehouse.path("landing", "events")
    landing.mkdir(parents=True)
    for i in range(4):
        (landing / f"bad-{i}.parquet").write_bytes(b"PAR1" + b"not parquet" * 20 + b"PAR1")
    env = lakehouse.cli_env()
    env.pop("MEDALLION_JAVA_STACKS", None)  # set by a debug command run in this process
    run = subprocess.run([*medallion_cmd(), "run", "bronze", "--log-format", "json"],
                         env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = (run.stdout + run.stderr).splitlines()
    frames = [line for line in lines if line.lstrip().startswith(("at ", "... ", "Caused by"))]
    assert frames == []
    assert foreign_lines(run.stdout, run.stderr) == []  # nor any line of Spark's log
    failed = [json.loads(line) for line in lines
              if line.startswith("{") and '"bronze.files.failed"' in line]
    named = {path.rsplit("/", 1)[-1] for e in failed for path in e["files"]}
    assert named == {f"bad-{i}.parquet" for i in range(4)}
    assert len(lines) < 60, "\n".join(lines)


def test_spark_s_log_shows_with_log_level_debug_only(lakehouse: Lakehouse) -> None:
    import subprocess

    from tests.support import FOREIGN, REPO, foreign_lines, medallion_cmd

    env = lakehouse.cli_env()
    env.pop("MEDALLION_JAVA_STACKS", None)
    for level, quiet in (("info", True), ("debug", False)):
        run = subprocess.run([*medallion_cmd(), "sql", "SELECT 1 AS one", "--log-format",
                              "console", "--log-level", level], env=env, cwd=REPO,
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.stdout.splitlines()[0] == "one"
        assert (foreign_lines(run.stdout, run.stderr) == []) is quiet, run.stderr[-3000:]
    assert any(FOREIGN.match(line) for line in run.stderr.splitlines())


def test_a_driver_jvm_that_cannot_start_says_why_and_the_command_exits_1(
    lakehouse: Lakehouse
) -> None:
    """No Java where JAVA_HOME says: spark-submit's own words reach the output, then the
    command's one error line."""
    import subprocess

    from tests.support import REPO, medallion_cmd

    env = lakehouse.cli_env()
    env["JAVA_HOME"] = str(lakehouse.base / "no-java")
    run = subprocess.run([*medallion_cmd(), "sql", "SELECT 1", "--log-format", "console"],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert run.returncode == 1
    assert "no-java/bin/java: No such file or directory" in run.stderr
    assert run.stderr.splitlines()[-1].startswith(
        "error: expected Spark's driver JVM to start, found it ended at once (its reason is "
        "above; [JAVA_GATEWAY_EXITED]")
    assert "Traceback" not in run.stderr


# Other commands the documentation shows (docs/), cheap ones, on the quickstart's lake (none
# changes its tables; the quickstart's own: tests/test_readme.py, the report's:
# tests/test_connect.py):
# what a person at a terminal sees, events as the console renders them.
def _documented_commands() -> list[tuple[list[str], int]]:
    return [
        (["validate"], 0),
        (["init"], 0),
        (["sql", "--explain-pruning",
          "SELECT sum(revenue) FROM gold.regional_sales WHERE region = 'north'"], 0),
        (["purge-archive", "--older-than", "30d", "--dry-run"], 0),
        (["sql", "SELECT nope FROM gold.store_sales"], 2),  # a failure says why, in one line
    ]


@pytest.mark.slow
@pytest.mark.xdist_group("quickstart")  # (its lake: tests/conftest.py)
def test_the_documented_commands_print_their_own_lines_and_events_only(
        quickstart_lake: QuickstartLake) -> None:
    env = user_env(MEDALLION_ROOT=str(quickstart_lake.root))
    foreign, failed = {}, {}
    for args, code in _documented_commands():
        done = subprocess.run([str(BIN / "medallion"), *args, "--log-format", "console"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != code:
            failed[args[0]] = (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
        foreign[" ".join(args)] = foreign_lines(done.stdout, done.stderr)
    assert failed == {}
    assert {command: lines for command, lines in foreign.items() if lines} == {}
