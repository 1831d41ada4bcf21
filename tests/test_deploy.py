"""The two ways the package runs on a cluster: the spark-submit script (run here with a local
master instead of YARN) and the Databricks asset bundle's job definitions (a job cluster, and
serverless compute)."""

from __future__ import annotations

import configparser
import fnmatch
import importlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession

import framework
from bronze.streams import kafka_package
from framework.cli import build_parser
from framework.config.loader import load_project
from framework.session import delta_package, on_spark_connect
from framework.submit import dependency_args, spark_hadoop_version, submit_args
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


def test_the_submit_arguments_ship_delta_as_cached_jars_or_as_its_package(
    lakehouse: Lakehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = lakehouse.project().env
    cached = dependency_args(env)  # the setup resolved Delta's jars once
    assert cached[0] == "--jars" and "--packages" not in cached
    names = [Path(j).name for j in cached[1].split(",")]
    assert any("delta-spark_" in n for n in names) and any("spark-sql-kafka" in n for n in names)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    assert dependency_args(env) == ["--packages", f"{delta_package()},{kafka_package()}"]
    adls = env.model_copy(update={"root": "abfss://lake@acct.dfs.core.windows.net/x"})
    assert dependency_args(adls) == ["--packages", f"{delta_package()},{kafka_package()},"
                                     f"org.apache.hadoop:hadoop-azure:{spark_hadoop_version()}"]


def test_cluster_mode_ships_the_environment_as_resolved_here_with_secrets_as_references(
    lakehouse: Lakehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKE_ROOT", "hdfs://namenode:8020/lake")
    monkeypatch.setenv("LAKE_KEY", "canary-secret-value")
    lakehouse.write_env(runtime="submit", root="${LAKE_ROOT}", metastore="/var/lib/ms",
                        spark_conf={"fs.azure.account.key.acct.dfs.core.windows.net":
                                    "${LAKE_KEY}"})
    lakehouse.add_table("bronze", "orders", bronze_spec())
    args = submit_args(lakehouse.conf, "test", True, tmp_path, ["/envs/py.tgz#environment"])
    archive_spec = args[args.index("--archives") + 1]
    assert args.count("--archives") == 1  # spark-submit keeps only the last one
    assert archive_spec.split(",")[0] == "/envs/py.tgz#environment"
    shipped, name = archive_spec.split(",")[1].split("#")
    assert name == "medallion-conf"
    assert "spark.yarn.appMasterEnv.MEDALLION_CONF=medallion-conf" in args
    assert "spark.yarn.appMasterEnv.MEDALLION_ENV=test" in args
    with zipfile.ZipFile(shipped) as zf:
        assert sorted(zf.namelist()) == ["environments/test.yaml", "tables/bronze/orders.yaml"]
        text = zf.read("environments/test.yaml").decode()
    assert "canary-secret-value" not in text
    resolved = yaml.safe_load(text)
    assert resolved["root"] == "hdfs://namenode:8020/lake"
    assert resolved["metastore"] == "/var/lib/ms"
    assert resolved["spark_conf"] == {"fs.azure.account.key.acct.dfs.core.windows.net":
                                      "${LAKE_KEY}"}

    # on the cluster, with none of the variables: the same environment
    here = lakehouse.project().env
    monkeypatch.delenv("LAKE_ROOT")
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(shipped) as zf:
        zf.extractall(unpacked)
    assert load_project(unpacked, "test").env == here


def test_an_invalid_environment_stops_the_script_before_submitting(
    lakehouse: Lakehouse, tmp_path: Path
) -> None:
    lakehouse.write_env(runtime="submit", root="${UNSET_ROOT_VARIABLE}")
    env = lakehouse.cli_env()
    env.update(PYTHON=sys.executable, SPARK_SUBMIT="/bin/false-spark-submit-is-never-called")
    result = subprocess.run(["bash", str(SUBMIT), "run", "all", "--env", lakehouse.env_name],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "expected environment variable UNSET_ROOT_VARIABLE to be set" in result.stderr


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

    setup, scripts = _package()
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


def _package() -> tuple[configparser.ConfigParser, dict[str, str]]:
    """The package's metadata (setup.cfg) and its console scripts, name to ``module:function``."""
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    scripts = dict(line.split(" = ") for line in
                   setup["options.entry_points"]["console_scripts"].strip().splitlines())
    return setup, scripts


def test_the_serverless_job_runs_the_same_tasks_in_an_environment_holding_the_wheel(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = yaml.safe_load((REPO / "databricks.yml").read_text())
    classic = bundle["resources"]["jobs"]["medallion"]
    job = bundle["resources"]["jobs"]["medallion_serverless"]
    assert job["max_concurrent_runs"] == 1  # one writer per table checkpoint
    assert "job_clusters" not in job

    # one environment, whose dependencies are the wheel the bundle's artifact builds
    specs = {e["environment_key"]: e["spec"] for e in job["environments"]}
    assert list(specs) == ["medallion"]
    spec = specs["medallion"]
    assert spec["environment_version"] == "${var.serverless_environment}"
    assert bundle["variables"]["serverless_environment"]["default"] == "4"
    assert spec["dependencies"] == ["./dist/*.whl"]
    artifact = bundle["artifacts"]["medallion_wheel"]
    assert (artifact["type"], artifact["path"]) == ("whl", ".")
    assert artifact["build"] == "python3 -m pip wheel --no-deps --wheel-dir dist ."
    setup, scripts = _package()
    wheel = f"dist/{setup['metadata']['name'].replace('-', '_')}-{framework.__version__}" \
            "-py3-none-any.whl"
    assert fnmatch.fnmatch(wheel, spec["dependencies"][0].removeprefix("./"))

    # the classic job's tasks, in the same order, each in the environment and on no cluster
    tasks = {t["task_key"]: t for t in job["tasks"]}
    assert list(tasks) == ["bronze", "silver", "gold"]
    for task, same in zip(tasks.values(), classic["tasks"], strict=True):
        assert task["environment_key"] in specs
        assert not {"job_cluster_key", "new_cluster", "existing_cluster_id",
                    "libraries"} & set(task)  # serverless takes libraries from the environment
        assert task.get("depends_on") == same.get("depends_on")
        assert task["python_wheel_task"] == same["python_wheel_task"]
        wheel_task = task["python_wheel_task"]
        assert wheel_task["package_name"] == setup["metadata"]["name"]
        module, function = scripts[wheel_task["entry_point"]].split(":")
        assert callable(getattr(importlib.import_module(module), function))

    # on serverless the tasks' Python is a Spark Connect client: the environments the targets
    # run are detected as such, and their roots are stores it reaches without a JVM
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "client.4.9")
    for name in ("AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET"):
        # dev reads these from the classic cluster's variables, which serverless does not set
        # (docs/where-it-runs.md, "Serverless or a classic cluster"); set here, the roots are
        # what is checked
        monkeypatch.setenv(name, f"canary-{name.lower()}")
    env = bundle["variables"]["env"]["default"]
    for name in {env, *(t.get("variables", {}).get("env", env)
                        for t in bundle["targets"].values())}:
        project = load_project(REPO / "conf", name)
        assert on_spark_connect(project.env), name
