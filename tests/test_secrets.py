"""Canary secrets: unique values in the environment's secret settings never appear in what the
product writes (console, JSON logs, run summaries, CLI errors, Spark's event log), raw,
base64- or URL-encoded."""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from pyspark.sql import SparkSession

from framework.cli import main
from framework.redaction import SPARK_REDACTION_REGEX
from tests.support import REPO, Lakehouse, bronze_spec, medallion_cmd, write_order_files

pytestmark = pytest.mark.slow


def forms(secret: str) -> list[str]:
    raw = secret.encode()
    return [secret, base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(),
            quote(secret, safe="")]


def leaks(texts: dict[str, str], secrets: list[str]) -> list[str]:
    return [f"{where}: {form!r}" for where, text in texts.items()
            for s in secrets for form in forms(s) if form in text]


def test_canary_secrets_appear_in_no_output(
        spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    canaries = {"CANARY_ACCOUNT_KEY": f"canary-key-{uuid.uuid4().hex}",
                "CANARY_SAS": f"sv=2025-01-05&sig=canary{uuid.uuid4().hex}"}
    for name, value in canaries.items():
        monkeypatch.setenv(name, value)
    events = tmp_path / "spark-events"
    events.mkdir()
    lakehouse.write_env(spark_conf={
        "spark.ui.enabled": "false",
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.hadoop.fs.azure.account.key.canary.dfs.core.windows.net":
            "${CANARY_ACCOUNT_KEY}",
        "spark.hadoop.fs.azure.sas.fixed.token.canary.dfs.core.windows.net": "${CANARY_SAS}",
    })
    lakehouse.add_table("bronze", "orders", bronze_spec())
    write_order_files(lakehouse.path("landing", "orders"), files=2, per_file=5)
    secret = canaries["CANARY_ACCOUNT_KEY"]
    outputs: dict[str, str] = {}

    # A real run in its own JVM, with Spark's event log on
    done = subprocess.run(
        [*medallion_cmd(), "run", "all", "--summary", str(tmp_path / "run.json"),
         "--log-format", "json"],
        env={**lakehouse.cli_env(), **canaries}, capture_output=True, text=True, timeout=600,
        cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    outputs["run stdout"], outputs["run stderr"] = done.stdout, done.stderr

    # In this process: validate, status, a query whose error quotes the secret (with its stack,
    # --log-level debug), a failing run (its landing folder gone)
    common = ["--conf", str(lakehouse.conf), "--env", lakehouse.env_name]
    assert main(["validate", *common]) == 0
    assert main(["status", *common]) == 0
    assert main(["sql", f"SELECT * FROM no_such_table_{secret}", *common,
                 "--log-level", "debug"]) == 2
    before = capsys.readouterr()
    outputs["validate, status, sql stdout"], outputs["sql stderr"] = before.out, before.err
    assert "no_such_table_***" in before.err  # masked, not dropped
    lakehouse.path("landing", "orders").rename(tmp_path / "moved")
    assert main(["run", "bronze", *common, "--summary", str(tmp_path / "failed.json")]) == 1
    captured = capsys.readouterr()
    outputs["in-process stdout"], outputs["in-process stderr"] = captured.out, captured.err

    for f in [tmp_path / "run.json", tmp_path / "failed.json", *events.rglob("*")]:
        if f.is_file():
            outputs[str(f)] = f.read_text(errors="replace")
    assert any("SparkListenerEnvironmentUpdate" in t for t in outputs.values()), \
        sorted(events.rglob("*"))  # the event log was read
    assert json.loads(outputs[str(tmp_path / "failed.json")])["status"] == "failed"
    assert leaks(outputs, list(canaries.values())) == []


def test_the_databricks_cluster_redacts_as_the_other_runtimes() -> None:
    import yaml

    bundle = yaml.safe_load((REPO / "databricks.yml").read_text())
    clusters = [c["new_cluster"] for job in bundle["resources"]["jobs"].values()
                for c in job.get("job_clusters", [])]
    assert clusters and all(c["spark_conf"]["spark.redaction.regex"] == SPARK_REDACTION_REGEX
                            for c in clusters)
