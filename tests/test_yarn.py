"""spark-submit on a real YARN + HDFS cluster (deploy/yarn/minicluster.sh: Hadoop's own
NameNode, DataNode, ResourceManager and NodeManager), against the same feed run locally.

The demo's generator writes one small dirty feed. It runs once locally (this process's
session) and once on YARN with the lakehouse on HDFS, at the same time: ``run all`` in
cluster mode (the driver in a YARN container), then ``sql`` in client mode, each its own
``spark-submit``.
Silver and gold must be equal row for row, the landing files archived on HDFS, the unreadable
file quarantined there, and the gold tables found by name from a separate process (the Hive
catalog persists in the environment's metastore), whose session is in UTC even when its
driver's JVM is not. No command's output holds a line of Spark's log (YARN's client's
included), as under any runtime.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from examples.retail import demo
from framework.cli import main
from framework.config.loader import load_project
from framework.config.model import Layer
from framework.storage import land
from framework.storage.hadoop import HadoopStorage
from tests.openlineage_events import validate
from tests.support import BIN, REPO, foreign_lines

pytestmark = [pytest.mark.slow, pytest.mark.yarn]

SUBMIT = REPO / "deploy" / "yarn" / "submit.sh"
# Columns that record when and from where (landing times, paths) a row was ingested.
INGESTION = {"_ingested_at", "_source_file", "_file_modification_time", "_batch_id"}
NEW_AMOUNT = '"round(quantity * unit_price * 1.1, 2)"'


def _submit(args: list[str], conf: Path, yarn: dict[str, str], dist: Path,
            mode: str = "client", **more: str) -> subprocess.Popen[str]:
    env = {**os.environ, **yarn, **more, "DEPLOY_MODE": mode, "MEDALLION_CONF": str(conf),
           "PYTHON": sys.executable, "SPARK_SUBMIT": str(BIN / "spark-submit"),
           "DIST": str(dist), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)  # the package comes from the wheel the script ships
    return subprocess.Popen(["bash", str(SUBMIT), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _comparable(df: DataFrame) -> DataFrame:
    keep = [c for c in df.columns if c not in INGESTION]
    return df.select(*keep).orderBy(*keep)


def test_the_same_feed_on_yarn_and_hdfs_gives_the_same_silver_and_gold(
    spark: SparkSession, yarn_cluster: dict[str, str], tmp_path: Path
) -> None:
    yarn = yarn_cluster
    conf, local_root = tmp_path / "conf", tmp_path / "local"
    shutil.copytree(REPO / "conf" / "tables", conf / "tables")
    suffix = uuid.uuid4().hex[:8]
    schemas = {layer.value: f"{layer.value}_{suffix}" for layer in Layer}
    hdfs_root = f"{yarn['MEDALLION_HDFS_ROOT']}/parity_{suffix}"
    envs = {
        "local": {"runtime": "local", "root": str(local_root), "master": "local[2]",
                  "shuffle_partitions": 2, "schemas": schemas},
        # the YARN environment takes its root and metastore from env.sh's variables
        "yarn": {"runtime": "submit", "root": f"${{MEDALLION_HDFS_ROOT}}/parity_{suffix}",
                 "metastore": "${MEDALLION_METASTORE}", "shuffle_partitions": 2,
                 # (one executor: a JVM fewer per application, on a cluster of one node)
                 "spark_conf": {"spark.databricks.delta.snapshotPartitions": "2",
                                "spark.executor.instances": "1"},
                 # OpenLineage events, written by the driver in its container
                 "lineage": {"transport": {"type": "file", "append": True,
                                           "log_file_path": str(tmp_path / "events.jsonl")}}},
    }
    for name, body in envs.items():
        (conf / "environments").mkdir(parents=True, exist_ok=True)
        (conf / "environments" / f"{name}.yaml").write_text(yaml.safe_dump(body))

    # one feed, copied before the local run archives it
    size = ["--orders", "1500", "--files", "30"]
    assert main(["demo", "--generate-only", *size, "--conf", str(conf), "--env", "local"]) == 0
    feed, generated = demo.generate(load_project(conf, "local"), orders=1500, files=30)
    assert not generated  # the manifest of the feed written above
    pristine = tmp_path / "feed"
    shutil.copytree(local_root / "landing", pristine)

    # the feed lands on HDFS in delivery order, through Hadoop's FileSystem
    hdfs = HadoopStorage(spark)
    for table in ("orders", "customers", "stores"):
        by_time = sorted((pristine / table).iterdir(), key=lambda p: p.stat().st_mtime)
        land(hdfs, [str(p) for p in by_time], f"{hdfs_root}/landing/{table}")

    # bronze -> silver -> gold on YARN with the driver in a container, and meanwhile here
    dist = tmp_path / "dist"
    run = _submit(["run", "all", "--env", "yarn"], conf, yarn, dist, mode="cluster")
    try:
        assert main(["run", "all", "--conf", str(conf), "--env", "local"]) == 0
        out, err = run.communicate(timeout=900)
    finally:
        run.kill()
    assert run.returncode == 0, err[-5000:]  # the application's final status
    # (Spark's log, YARN's client's included, stays off the command's output)
    assert foreign_lines(out, err) == [], err[-3000:]
    # the later submits ship the wheel this one built
    built = sorted(dist.glob("medallion_lakehouse-*.whl"))
    assert len(built) == 1, built
    wheel = {"MEDALLION_WHEEL": str(built[0])}

    # each table's run sent START, then COMPLETE naming its output by its HDFS location,
    # every event valid against OpenLineage's schemas
    events = [json.loads(line) for line in
              (tmp_path / "events.jsonl").read_text(encoding="utf-8").splitlines() if line]
    for event in events:
        validate(event)
    runs = {(e["job"]["name"], e["run"]["runId"]) for e in events}
    assert sorted(e["eventType"] for e in events) == ["COMPLETE"] * len(runs) + \
        ["START"] * len(runs), events
    assert {name.rsplit(".", 1)[1] for name, _ in runs} >= {
        "orders", "customers", "stores", "store_sales", "segment_sales"}, runs
    written = {o["name"].rsplit("/tables/", 1)[1]: o["namespace"]
               for e in events if e["eventType"] == "COMPLETE" for o in e["outputs"]}
    assert written["silver/orders"] == written["gold/store_sales"] and \
        written["silver/orders"].startswith("hdfs://"), written

    # landing drained and archived on HDFS; the unreadable file quarantined there
    landing = list(hdfs.list_files(f"{hdfs_root}/landing/orders"))
    assert [f.path for f in landing] == []
    archived = [f.path.rsplit("/", 1)[-1] for f in hdfs.list_files(f"{hdfs_root}/archive")
                if not f.path.rsplit("/", 1)[-1].startswith((".", "_"))]
    assert len([a for a in archived if a.startswith("orders-")]) == feed.files - 2
    quarantined = [f.path for f in hdfs.list_files(f"{hdfs_root}/_quarantine")]
    assert [q for q in quarantined if q.endswith("/" + feed.unreadable_file)], quarantined

    # silver and gold row for row
    for layer, table in [("bronze", "orders"), ("silver", "orders"), ("silver", "customers"),
                         ("silver", "stores"), ("gold", "store_sales"),
                         ("gold", "segment_sales")]:
        on_yarn = spark.read.format("delta").load(f"{hdfs_root}/tables/{layer}/{table}")
        here = spark.read.format("delta").load(str(local_root / "tables" / layer / table))
        assert on_yarn.count() > 0, (layer, table)
        # (a mart's column comments name the catalog schemas, which differ here)
        assert_df_equality(_comparable(on_yarn), _comparable(here), ignore_nullable=True,
                           ignore_metadata=True)

    # A separate spark-submit finds the gold tables by name (the mart is a view over them).
    # Its driver's JVM runs in another time zone: the session is in UTC all the same.
    query = "SELECT *, current_timezone() AS session_zone FROM gold.regional_sales ORDER BY ALL"
    asked = _submit(["sql", query, "--json", "--limit", "100000", "--env", "yarn"], conf,
                    yarn, dist, SPARK_SUBMIT_ARGS="--driver-java-options "
                    "-Duser.timezone=America/New_York", **wheel)
    out, err = asked.communicate(timeout=600)
    assert asked.returncode == 0, err[-3000:]
    assert foreign_lines(out, err) == [], err[-3000:]  # the driver's: here, in client mode
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    expected = spark.sql(query.replace("gold.", f"{schemas['gold']}.")).collect()
    assert len(rows) == len(expected) > 0
    assert {r["session_zone"] for r in rows} == {"UTC"}
    assert rows == [json.loads(json.dumps(r.asDict(recursive=True), default=str))
                    for r in expected]

    # A changed silver expression, refreshed downstream on YARN over HDFS and here at once:
    # the tables equal again, with the new amounts, and the journal on HDFS closed
    spec = conf / "tables" / "silver" / "orders.yaml"
    spec.write_text(spec.read_text().replace('"quantity * unit_price"', NEW_AMOUNT))
    refresh = ["refresh", "silver.orders", "--downstream"]
    run = _submit([*refresh, "--env", "yarn"], conf, yarn, dist, **wheel)
    try:
        assert main([*refresh, "--conf", str(conf), "--env", "local"]) == 0
        out, err = run.communicate(timeout=900)
    finally:
        run.kill()
    assert run.returncode == 0, err[-5000:]
    assert "refresh done" in out
    assert foreign_lines(out, err) == [], err[-3000:]
    assert not hdfs.exists(f"{hdfs_root}/_refresh/journal")
    assert len(list(hdfs.list_files(f"{hdfs_root}/_refresh/closed"))) > 0
    silver = spark.read.format("delta").load(f"{hdfs_root}/tables/silver/orders")
    assert silver.where("amount <> round(quantity * unit_price * 1.1, 2)").count() == 0
    for layer, table in [("silver", "orders"), ("gold", "store_sales"),
                         ("gold", "segment_sales")]:
        on_yarn = spark.read.format("delta").load(f"{hdfs_root}/tables/{layer}/{table}")
        here = spark.read.format("delta").load(str(local_root / "tables" / layer / table))
        assert_df_equality(_comparable(on_yarn), _comparable(here), ignore_nullable=True,
                           ignore_metadata=True)
