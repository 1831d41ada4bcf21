"""The two ways the package runs on a cluster: the spark-submit script (run here with a local
master instead of YARN) and the Databricks asset bundle's job definition."""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession

from framework.cli import build_parser
from framework.config.loader import load_project
from framework.session import delta_package
from tests.support import BIN, REPO, Lakehouse, bronze_spec, write_order_files

SUBMIT = REPO / "deploy" / "yarn" / "submit.sh"


@pytest.mark.slow
def test_the_spark_submit_script_runs_the_layers_and_writes_the_tables(
    spark: SparkSession, lakehouse: Lakehouse, tmp_path: Path
) -> None:
    # spark-submit launches it: detected, nothing local; Delta sized for two cores
    lakehouse.write_env(runtime="auto", spark_conf={
        "spark.ui.enabled": "false", "spark.databricks.delta.snapshotPartitions": "2"})
    lakehouse.add_table("bronze", "orders", bronze_spec())
    ids = write_order_files(lakehouse.path("landing", "orders"), files=3, per_file=20)
    env = lakehouse.cli_env()
    env.pop("PYTHONPATH")  # the package comes from the wheel the script builds
    env.update(MASTER="local[2]", SPARK_SUBMIT=str(BIN / "spark-submit"),
               PYTHON=sys.executable, DIST=str(tmp_path / "dist"),
               SPARK_SUBMIT_ARGS="--driver-memory 1g")
    result = subprocess.run(
        ["bash", str(SUBMIT), "run", "all", "--env", lakehouse.env_name, "--log-format", "json"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert list((tmp_path / "dist").glob("medallion_lakehouse-*.whl"))

    bronze = spark.read.format("delta").load(str(lakehouse.path("tables", "bronze", "orders")))
    assert sorted(r.order_id for r in bronze.select("order_id").collect()) == sorted(ids)
    ledger = spark.read.format("delta").load(
        str(lakehouse.path("tables", "bronze", "orders_files")))
    assert {r.status for r in ledger.collect()} == {"archived"} and ledger.count() == 3
    assert "succeeded" in result.stdout and "records_read=60" in result.stdout


def test_the_script_asks_for_the_delta_package_the_pins_need() -> None:
    assert f"DELTA_PACKAGE:-{delta_package()}" in SUBMIT.read_text()


def test_the_bundle_runs_bronze_then_silver_then_gold_through_the_entry_point(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET"):
        monkeypatch.setenv(name, f"canary-{name.lower()}")  # the cluster's secret references
    bundle = yaml.safe_load((REPO / "databricks.yml").read_text())
    job = bundle["resources"]["jobs"]["medallion"]
    tasks = {t["task_key"]: t for t in job["tasks"]}
    assert list(tasks) == ["bronze", "silver", "gold"]
    assert [t.get("depends_on") for t in tasks.values()] == [
        None, [{"task_key": "bronze"}], [{"task_key": "silver"}]]

    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    scripts = dict(line.split(" = ") for line in
                   setup["options.entry_points"]["console_scripts"].strip().splitlines())
    env = bundle["variables"]["env"]["default"]
    parser = build_parser()
    for layer, task in tasks.items():
        wheel_task = task["python_wheel_task"]
        assert wheel_task["package_name"] == setup["metadata"]["name"]
        assert scripts[wheel_task["entry_point"]] == "framework.cli:main"
        assert task["libraries"] == [{"whl": "./dist/*.whl"}]
        args = parser.parse_args(wheel_task["parameters"])  # the command line must parse
        assert (args.command, args.layer, args.env) == ("run", layer, "${var.env}")
        assert args.conf == "${workspace.file_path}/conf"
    # the environments it names exist, and they keep their data off the local machine
    for name in {env, *(t.get("variables", {}).get("env", env)
                        for t in bundle["targets"].values())}:
        project = load_project(REPO / "conf", name)
        assert project.env.root.startswith("abfss://")
