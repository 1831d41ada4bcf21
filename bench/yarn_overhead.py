"""What YARN costs on one machine: the same small feed, bronze -> silver -> gold, under
``--master yarn`` (the single-node cluster of deploy/yarn/minicluster.sh, lakehouse on HDFS)
and under ``--master local[2]`` (lakehouse on the local disk), each through
deploy/yarn/submit.sh in client mode, one after the other in one run.

    python bench/yarn_overhead.py [--orders 3000] [--files 30]

For each side it prints the wall time of the ``run all`` submission, the run's own time as its
summary reports it (from the first table's start to the last table's end, in the driver), and
their difference: the start-up (spark-submit, the driver's session, and on YARN the
application master's and the executor's containers). The last line is one JSON object with
``"ratio"`` = local seconds / YARN seconds for the whole flow. For information: no target.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from tests.minicluster import ClusterStartError, minicluster

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SUBMIT = REPO / "deploy" / "yarn" / "submit.sh"
SUMMARY = re.compile(r"^run \w+ \((?P<env>\w+)\): succeeded in (?P<s>[\d.]+)s$", re.M)


def submit(args: list[str], conf: Path, extra: dict[str, str]) -> tuple[float, float]:
    """Wall seconds of one submission and the seconds its run summary reports."""
    env = {**os.environ, **extra, "MEDALLION_CONF": str(conf), "PYTHON": sys.executable,
           "SPARK_SUBMIT": str(BIN / "spark-submit"), "PYTHONUNBUFFERED": "1",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    started = time.perf_counter()
    done = subprocess.run(["bash", str(SUBMIT), *args], env=env, capture_output=True,
                          text=True, timeout=1800)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    found = SUMMARY.search(done.stdout)
    if found is None:
        sys.exit(f"expected a run summary line in the output, found:\n{done.stdout[-2000:]}")
    return wall, float(found.group("s"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=3000)
    parser.add_argument("--files", type=int, default=30)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-yarn-"))
    conf = work / "conf"
    shutil.copytree(REPO / "conf" / "tables", conf / "tables")
    (conf / "environments").mkdir(parents=True)
    common = {"runtime": "submit", "shuffle_partitions": 2,
              "spark_conf": {"spark.databricks.delta.snapshotPartitions": "2"}}
    (conf / "environments" / "local.yaml").write_text(yaml.safe_dump(
        {**common, "root": str(work / "local")}))
    (conf / "environments" / "yarn.yaml").write_text(yaml.safe_dump(
        {**common, "root": "${MEDALLION_HDFS_ROOT}/bench",
         "metastore": "${MEDALLION_METASTORE}"}))
    feed_env = work / "feed-conf"
    shutil.copytree(REPO / "conf" / "tables", feed_env / "tables")
    (feed_env / "environments").mkdir(parents=True)
    (feed_env / "environments" / "feed.yaml").write_text(yaml.safe_dump(
        {"runtime": "local", "root": str(work / "feed")}))

    from framework.cli import main as medallion

    sizes = ["--orders", str(args.orders), "--files", str(args.files)]
    if medallion(["demo", "--generate-only", *sizes, "--conf", str(feed_env), "--env", "feed",
                  "--log-level", "error"]) != 0:
        sys.exit("the feed could not be generated")
    shutil.copytree(work / "feed" / "landing", work / "local" / "landing")

    try:
        with minicluster(work / "cluster") as yarn:
            # the feed lands on HDFS in delivery order (a local session's Hadoop client)
            from pyspark.sql import SparkSession

            from framework.storage import land
            from framework.storage.hadoop import HadoopStorage

            spark = (SparkSession.builder.master("local[1]").appName("bench-land")
                     .config("spark.ui.enabled", "false").getOrCreate())
            hdfs = HadoopStorage(spark)
            for table in ("orders", "customers", "stores"):
                files = sorted((work / "feed" / "landing" / table).iterdir(),
                               key=lambda p: p.stat().st_mtime)
                land(hdfs, [str(p) for p in files],
                     f"{yarn['MEDALLION_HDFS_ROOT']}/bench/landing/{table}")
            spark.stop()

            dist = {"DIST": str(work / "dist")}
            local_wall, local_run = submit(["run", "all", "--env", "local"], conf,
                                           {**dist, "MASTER": "local[2]"})
            print(f"local[2]: {local_wall:6.1f} s in all, run {local_run:6.1f} s, "
                  f"start-up {local_wall - local_run:5.1f} s", flush=True)
            yarn_wall, yarn_run = submit(["run", "all", "--env", "yarn"], conf,
                                         {**dist, **yarn, "MASTER": "yarn"})
            print(f"yarn:     {yarn_wall:6.1f} s in all, run {yarn_run:6.1f} s, "
                  f"start-up {yarn_wall - yarn_run:5.1f} s", flush=True)
    except ClusterStartError as exc:
        sys.exit(f"the mini cluster did not start:\n{exc}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({
        "orders": args.orders, "files": args.files,
        "local_seconds": round(local_wall, 1), "yarn_seconds": round(yarn_wall, 1),
        "local_run_seconds": round(local_run, 1), "yarn_run_seconds": round(yarn_run, 1),
        "local_startup_seconds": round(local_wall - local_run, 1),
        "yarn_startup_seconds": round(yarn_wall - yarn_run, 1),
        "ratio": round(local_wall / yarn_wall, 3),
    }))


if __name__ == "__main__":
    main()
