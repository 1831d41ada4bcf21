"""The session factory and the command line, outside the shared test session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from framework.cli import build_parser, main
from framework.config.model import Environment, Runtime
from framework.session import (
    CHECKPOINT_FILE_MANAGER,
    DELTA_CATALOG,
    DELTA_EXTENSION,
    TIME_ZONE,
    delta_package,
    get_spark,
    local_cores,
    local_settings,
    on_local_disk,
    on_spark_connect,
    set_aside_unfinished_metastore,
    submit_conf,
)
from tests.support import BIN, REPO, Lakehouse, bronze_spec


def test_importing_the_packages_has_no_side_effects() -> None:
    code = (
        "import structlog, framework, framework.cli, framework.job, framework.session, "
        "framework.listener, bronze.job, bronze.spec, silver, gold\n"
        "from pyspark.sql import SparkSession\n"
        "assert SparkSession.getActiveSession() is None, 'a session was created'\n"
        "from pyspark import SparkContext\n"
        "assert SparkContext._active_spark_context is None, 'a context was created'\n"
        "assert not structlog.is_configured(), 'logging was configured'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


@pytest.mark.parametrize("command", ["validate", "run", "status", "sql", "infer-schema"])
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    assert "--env" in capsys.readouterr().out


def test_top_level_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("validate", "run", "status", "sql"):
        assert command in out


@pytest.mark.parametrize(("master", "cores"), [
    ("local", 1), ("local[3]", 3), ("local[2, 4]", 2), ("local[*]", os.cpu_count()),
    ("yarn", None), ("spark://host:7077", None), ("local[x]", None),
])
def test_local_cores_reads_the_master(master: str, cores: int | None) -> None:
    # Delta rebuilds a table's state with no more tasks than the local master has cores.
    assert local_cores(master) == cores


@pytest.mark.parametrize(("spark", "delta", "package"), [
    ("4.2.0", "4.4.0", "io.delta:delta-spark_4.2_2.13:4.4.0"),
    ("4.0.1", "4.1.0", "io.delta:delta-spark_4.0_2.13:4.1.0"),
    ("4.0.0", "4.0.0", "io.delta:delta-spark_2.13:4.0.0"),  # before 4.1: a jar per release
])
def test_delta_package_matches_the_installed_pair(
        monkeypatch: pytest.MonkeyPatch, spark: str, delta: str, package: str) -> None:
    import importlib.metadata

    import pyspark

    monkeypatch.setattr(pyspark, "__version__", spark)
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: delta if name == "delta-spark" else "0")
    assert delta_package() == package


def test_spark_submit_without_delta_fails_with_the_packages_to_add(lakehouse: Lakehouse) -> None:
    lakehouse.write_env(runtime="submit")
    result = subprocess.run(
        [str(BIN / "spark-submit"), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
         str(REPO / "tests" / "scripts" / "submit_probe.py"), "sql", "SELECT 1"],
        capture_output=True, text=True, env=lakehouse.cli_env(), cwd=REPO, timeout=900,
    )
    # spark-submit merges the Python driver's stderr into its own stdout
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    assert f"--packages {delta_package()}" in output
    assert f"spark.sql.extensions={DELTA_EXTENSION}" in output
    assert f"spark.sql.catalog.spark_catalog={DELTA_CATALOG}" in output


def test_a_spark_submit_session_has_a_persistent_catalog_and_utc() -> None:
    env = Environment(name="yarn", runtime=Runtime.SUBMIT, root="hdfs://nn:8020/lake",
                      metastore="/var/lib/medallion/metastore_db")
    settings = submit_conf(env)
    assert settings["spark.sql.catalogImplementation"] == "hive"
    assert settings["spark.sql.warehouse.dir"] == "hdfs://nn:8020/lake/warehouse"
    assert settings["spark.hadoop.javax.jdo.option.ConnectionURL"] == (
        "jdbc:derby:;databaseName=/var/lib/medallion/metastore_db;create=true")
    assert settings[TIME_ZONE] == "UTC"

    service = submit_conf(env.model_copy(update={"metastore": "thrift://ms:9083"}))
    assert service["spark.hadoop.hive.metastore.uris"] == "thrift://ms:9083"
    assert "spark.hadoop.javax.jdo.option.ConnectionURL" not in service
    # no metastore named: the cluster's own (hive-site.xml) is left to apply
    cluster = submit_conf(env.model_copy(update={"metastore": None}))
    assert not {"spark.hadoop.hive.metastore.uris",
                "spark.hadoop.javax.jdo.option.ConnectionURL"} & set(cluster)
    # the environment's own zone wins (validate warns about it)
    paris = env.model_copy(update={"spark_conf": {TIME_ZONE: "Europe/Paris"}})
    assert submit_conf(paris)[TIME_ZONE] == "Europe/Paris"


def test_a_spark_submit_session_on_a_local_root_keeps_its_catalog_in_that_folder() -> None:
    # Every spelling of a local folder names the same folder; another scheme, in any spelling,
    # leaves the metastore to the cluster and the warehouse under the root.
    for root in ("/lake", "file:/lake", "file:///lake"):
        settings = submit_conf(Environment(name="s", runtime=Runtime.SUBMIT, root=root))
        assert settings["spark.sql.warehouse.dir"] == "/lake/warehouse", root
        assert settings["spark.hadoop.javax.jdo.option.ConnectionURL"] == (
            "jdbc:derby:;databaseName=/lake/metastore_db;create=true"), root
    for root in ("faulty:/lake", "hdfs://nn:8020/lake"):
        settings = submit_conf(Environment(name="s", runtime=Runtime.SUBMIT, root=root))
        assert settings["spark.sql.warehouse.dir"] == f"{root}/warehouse", root
        assert "spark.hadoop.javax.jdo.option.ConnectionURL" not in settings, root


def test_a_databricks_session_is_pinned_to_utc_unless_the_environment_says(
    spark: SparkSession
) -> None:
    try:
        spark.conf.set(TIME_ZONE, "America/New_York")  # a cluster configured elsewhere
        env = Environment(name="dbx", runtime=Runtime.DATABRICKS, root="/Volumes/lake")
        assert get_spark(env).conf.get(TIME_ZONE) == "UTC"
        paris = env.model_copy(update={"spark_conf": {TIME_ZONE: "Europe/Paris"}})
        assert get_spark(paris).conf.get(TIME_ZONE) == "Europe/Paris"
    finally:
        spark.conf.set(TIME_ZONE, "UTC")


SERVERLESS = {"DATABRICKS_RUNTIME_VERSION": "client.4.9"}  # a serverless environment's client


@pytest.mark.parametrize(("environ", "runtime", "connect"), [
    (SERVERLESS, Runtime.DATABRICKS, True),
    # standard access mode: a runtime's number, and pyspark's mark of a Connect process
    ({"DATABRICKS_RUNTIME_VERSION": "17.3", "SPARK_CONNECT_MODE_ENABLED": "1"},
     Runtime.DATABRICKS, True),
    ({"DATABRICKS_RUNTIME_VERSION": "17.3"}, Runtime.DATABRICKS, False),  # dedicated access
    # a Connect client elsewhere is runtime connect, not Databricks
    ({"SPARK_REMOTE": "sc://localhost:15002", "SPARK_CONNECT_MODE_ENABLED": "1"},
     Runtime.CONNECT, False),
    ({"PYSPARK_GATEWAY_PORT": "41234"}, Runtime.SUBMIT, False),
    ({}, Runtime.LOCAL, False),
])
def test_the_runtime_and_a_databricks_connect_session_are_detected_from_the_environment(
    environ: dict[str, str], runtime: Runtime, connect: bool
) -> None:
    assert Runtime.detect(environ) is runtime
    assert Runtime.databricks_connect(environ) is connect


def test_on_serverless_a_root_a_connect_client_cannot_reach_is_refused(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")  # a classic cluster: any root
    assert Environment(name="dbx", root="hdfs://nn:8020/lake").root == "hdfs://nn:8020/lake"
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", SERVERLESS["DATABRICKS_RUNTIME_VERSION"])
    with pytest.raises(ValueError, match="expected a lakehouse root a Spark Connect client "
                       r"reaches without a JVM .*found 'hdfs://nn:8020/lake'.*dedicated access"):
        Environment(name="dbx", root="hdfs://nn:8020/lake")
    for root in ("abfss://lake@acct.dfs.core.windows.net/x", "/Volumes/main/lake/files"):
        env = Environment(name="dbx", runtime=Runtime.DATABRICKS, root=root)
        assert on_spark_connect(env) and on_spark_connect(
            env.model_copy(update={"runtime": Runtime.AUTO}))
    assert not on_spark_connect(env.model_copy(update={"runtime": Runtime.LOCAL}))


def test_serve_is_refused_on_serverless_before_anything_starts(
    lakehouse: Lakehouse, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", SERVERLESS["DATABRICKS_RUNTIME_VERSION"])
    lakehouse.write_env(runtime="auto")
    lakehouse.add_table("bronze", "orders", bronze_spec())

    assert main(["serve", "--conf", str(lakehouse.conf), "--env", lakehouse.env_name]) == 2
    err = capsys.readouterr().err
    assert "expected a classic Spark session for medallion serve, found environment " \
           f"'{lakehouse.env_name}' on Databricks over Spark Connect" in err
    assert not lakehouse.path("_lease").exists()  # refused before the lake was taken


def _unfinished_metastore(folder: Path) -> None:
    """What a driver killed while Derby creates its database leaves (chaos seed 1, kill 1)."""
    for part in ("log", "seg0", "tmp"):
        (folder / part).mkdir(parents=True)
    for lock in ("db.lck", "dbex.lck"):
        (folder / lock).write_bytes(b"")


@pytest.mark.slow
def test_a_metastore_whose_creation_was_killed_is_created_again(lakehouse: Lakehouse) -> None:
    metastore = lakehouse.root / "metastore_db"
    _unfinished_metastore(metastore)
    result = subprocess.run(
        [str(BIN / "medallion"), "sql", "SHOW DATABASES", "--json"],
        capture_output=True, text=True, env=lakehouse.cli_env(), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert '{"namespace": "default"}' in result.stdout
    assert (metastore / "service.properties").is_file()
    assert [p.name.split("-")[0] for p in lakehouse.root.glob("metastore_db.unfinished-*")] == [
        "metastore_db.unfinished"]
    assert '"event": "session.metastore.unfinished"' in result.stderr


def test_a_metastore_being_created_by_a_live_process_is_left_alone(tmp_path: Path) -> None:
    folder = tmp_path / "metastore_db"
    _unfinished_metastore(folder)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time\n"
         f"fh = open({str(folder / 'dbex.lck')!r}, 'r+b')\n"
         "fcntl.lockf(fh, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        assert set_aside_unfinished_metastore(str(folder)) is None
        assert folder.is_dir()
    finally:
        holder.kill()
        holder.wait()
    assert set_aside_unfinished_metastore(str(folder)) is not None
    assert not folder.exists()


def test_a_local_runtime_on_another_file_system_needs_a_metastore() -> None:
    from framework.errors import SessionError
    from framework.session import get_spark

    env = Environment(name="x", runtime=Runtime.LOCAL, root="hdfs://nn:8020/lake")
    with pytest.raises(SessionError, match="no metastore"):
        get_spark(env, "x", {})


def test_checkpoints_on_a_local_disk_are_renamed_without_starting_a_process(
        spark: SparkSession, tmp_path: Path) -> None:
    """On a local disk the checkpoint and Delta checksum files go through Spark's FileSystem
    -based manager (bench/local_checkpoints.py), a class of this Spark (it moved in 4.1);
    another file system keeps Spark's default."""
    manager = spark.conf.get(CHECKPOINT_FILE_MANAGER)
    assert manager is not None and manager.endswith(".FileSystemBasedCheckpointFileManager")
    loaded = spark._jvm.java.lang.Class.forName(manager)  # type: ignore[union-attr]
    assert loaded.getName() == manager
    assert [r for r in ("/lake", "lake", "file:/lake", "file:///lake") if on_local_disk(r)] \
        == ["/lake", "lake", "file:/lake", "file:///lake"]
    assert [r for r in ("hdfs://nn:8020/lake", "abfss://c@a.dfs.core.windows.net/lake",
                        "faulty:/lake") if on_local_disk(r)] == []
    remote = Environment(name="x", runtime=Runtime.LOCAL, root="hdfs://nn:8020/lake",
                         metastore="thrift://metastore:9083")
    assert CHECKPOINT_FILE_MANAGER not in local_settings(remote)[0]
    # The session's local folder and the manager follow the same reading of the root: every
    # spelling of a local folder is that folder; another scheme, in any spelling, is none.
    lake = tmp_path / "lake"
    for root in (str(lake), f"file:{lake}", f"file://{lake}"):
        settings, folder = local_settings(Environment(name="x", runtime=Runtime.LOCAL, root=root))
        assert (folder, CHECKPOINT_FILE_MANAGER in settings) == (str(lake), True), root
    for root in (f"faulty:{lake}", f"faulty://{lake}"):
        settings, folder = local_settings(Environment(
            name="x", runtime=Runtime.LOCAL, root=root, metastore=str(tmp_path / "metastore")))
        assert (folder, CHECKPOINT_FILE_MANAGER in settings) == (None, False), root


def test_a_jvm_error_names_the_jvm_exception(spark: SparkSession) -> None:
    from py4j.protocol import Py4JJavaError

    from framework.errors import first_line

    with pytest.raises(Py4JJavaError) as caught:  # an exception PySpark does not convert
        spark._jvm.java.net.URI("a b")  # type: ignore[union-attr]
    assert first_line(caught.value).endswith(
        "java.net.URISyntaxException: Illegal character in path at index 1: a b")


def test_a_python_error_in_a_batch_names_the_python_exception(spark: SparkSession,
                                                              tmp_path: Path) -> None:
    """A foreachBatch function's error reaches the JVM as a Python traceback; the line a run
    keeps is the traceback's last exception (of a chain, the one raised last), not its first
    line, which only says a traceback follows."""
    from pyspark.errors import StreamingQueryException

    from framework.errors import first_line

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text('{"a": 1}\n')

    def fail(df: object, batch_id: int) -> None:
        try:
            {}["missing"]
        except KeyError as exc:
            raise ValueError("the batch's own words") from exc

    query = (spark.readStream.schema("a int").json(str(tmp_path / "in")).writeStream
             .foreachBatch(fail).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException) as caught:
        query.awaitTermination()
    line = first_line(caught.value)
    assert line.startswith("[STREAM_FAILED]")
    assert line.endswith("Return Message: ValueError: the batch's own words"), line
