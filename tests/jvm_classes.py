"""An archive of the classes a Spark driver with Delta loads, shared by the tests' JVMs.

Every JVM the tests start (each worker's session, each ``medallion`` command a test runs, the
Spark Connect server) loads and links thousands of classes from Spark's, Delta's and Hive's
jars before its first query: about 13 CPU seconds for a session and one Delta read here. The
JDK's class data sharing (JDK 13+: ``-XX:ArchiveClassesAtExit`` writes the classes a JVM
loaded into an archive when it exits, ``-XX:SharedArchiveFile`` maps them into the next ones)
cuts that to about 9, and ``medallion run all`` on a lake with nothing new from 31 to 27.

The archive is made once per virtualenv (``make setup``, or the first test run without it) by
a short Spark job that touches what the tests use (the framework's session, the Hive catalog,
Delta writes, MERGE and a file stream), run as this module under ``spark-submit``. A JVM whose
class path or JDK differs from the archive's (the YARN cluster's drivers, another JDK) does
not use it and runs as it would without; ``-Xlog:cds*=off`` keeps the JVM from saying so on
the command's output. Measured on 2 cores: tests/test_lifecycle.py, test_secrets.py and
test_lease.py (their commands are JVMs of their own) took 139 CPU seconds instead of 169.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUIET = "-Xlog:cds*=off"

# The tests' driver JVMs (each worker's session, every command a test runs, the Spark Connect
# server) are started by spark-submit, which puts SPARK_SUBMIT_OPTS on the java command line.
# The tests are bound by two cores' CPU (they keep both busy 95% of the time), and most of it
# goes into fixed costs that small data makes large, which these settings cut:
# - the client compiler only and the serial collector: less spent compiling and collecting
#   (with the tiered default of 240 MB for compiled code: the client compiler alone reserves
#   48 MB, which the demo's JVM fills, and then says so on stderr and stops compiling);
# - no bytecode verification of the jars' classes (Spark, Delta, Hive...), loaded anew by each
#   JVM (the JDK's own classes are not verified either);
# - projections evaluated by Spark's interpreted implementation instead of code generated in
#   each task (spark.sql.codegen.factoryMode, which Spark's own tests switch the same way; Spark
#   reads it from the JVM's system properties): in a profile of tests/test_silver.py, a fifth
#   of the driver's samples generated, and stripped of comments to look up, the code of a
#   projection over Delta's wide log schema, in every task of a log replay. Whole-stage code
#   generation is unchanged.
# With the last two, `make test` took 2,470 s instead of 2,563 s for the main suite and 378 s
# instead of 463 s for the oldest pair (two CI runs from fresh clones on a quiet machine).
# The drivers and executors of the YARN cluster's containers get the same settings
# (yarn_cluster below): tests/test_yarn.py then takes 346 CPU seconds instead of 424.
# And the JVMs started here map an archive of the classes a driver loads (tests/jvm_classes.py,
# made before the first test), instead of each loading and linking them from the jars.
JVM_FOR_TESTS = ("-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC "
                 "-XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote")
# - no web UI in the tests' JVMs (none of them is looked at): `medallion sql "SELECT 1"` took
#   5.9 s instead of 6.2 s.
SPARK_FOR_TESTS = {"spark.sql.codegen.factoryMode": "NO_CODEGEN", "spark.ui.enabled": "false"}
JAVA_FOR_TESTS = " ".join([JVM_FOR_TESTS, *(f"-D{k}={v}" for k, v in SPARK_FOR_TESTS.items())])


def archive_path() -> Path:
    """Where this virtualenv's archive is: one per pyspark (its jars) and interpreter."""
    import pyspark

    venv = zlib.crc32(sys.prefix.encode())
    return REPO / "build" / f"spark-classes-{pyspark.__version__}-{venv:08x}.jsa"


def sharing_options(jvm_options: str) -> str:
    """``jvm_options`` and the options that map this virtualenv's archive, made first if it
    is not there; ``jvm_options`` alone if it cannot be made (the tests run, slower)."""
    from framework.session import cached_jars

    path = archive_path()
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.part")
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(REPO),
               "SPARK_SUBMIT_OPTS": f"{jvm_options} -XX:ArchiveClassesAtExit={partial} {QUIET}"}
        env.pop("SPARK_REMOTE", None)
        # (Delta's jars on the command line: under spark-submit, a session's spark.jars reach
        # the executors only, not the driver already running)
        jars = ",".join(j.removeprefix("file://") for j in cached_jars())
        submit = [str(Path(sys.executable).parent / "spark-submit")]
        submit += ["--jars", jars] if jars else []
        done = subprocess.run([*submit, __file__, "--load"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            print(f"note: no class archive for the tests' JVMs (exit {done.returncode}): "
                  f"{done.stderr[-500:]}", file=sys.stderr)
            return jvm_options
        os.replace(partial, path)
    return f"{jvm_options} -XX:SharedArchiveFile={path} {QUIET}"


def _load_classes() -> None:
    """What the tests' JVMs do first: the framework's session, the catalog, Delta appends,
    MERGE and reads, a file stream into Delta through foreachBatch."""
    from pyspark.sql import functions as F

    from framework.config.model import Environment, Runtime
    from framework.session import get_spark

    root = Path(tempfile.mkdtemp(prefix="spark-classes-"))
    env = Environment(name="classes", runtime=Runtime.LOCAL, root=str(root), master="local[2]",
                      shuffle_partitions=2)
    spark = get_spark(env, "medallion-classes",
                      {"spark.ui.enabled": "false",
                       "spark.databricks.delta.snapshotPartitions": "2"})
    landing = root / "landing"
    landing.mkdir()
    for i in range(2):
        (landing / f"f{i}.json").write_text(
            "".join(f'{{"id": {i * 10 + k}, "v": "x{k}", "at": "2026-01-0{k % 9 + 1}T00:00:00Z"}}\n'
                    for k in range(10)))
    spark.sql("CREATE SCHEMA IF NOT EXISTS classes")
    spark.sql(f"CREATE TABLE classes.t (id BIGINT, v STRING, at TIMESTAMP) USING delta "
              f"LOCATION '{root / 't'}'")

    def batch(df, batch_id):  # type: ignore[no-untyped-def]
        df.write.format("delta").mode("append").save(str(root / "raw"))
        df.createOrReplaceTempView("updates")
        df.sparkSession.sql("MERGE INTO classes.t AS t USING updates AS u ON t.id = u.id "
                            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")

    stream = (spark.readStream.schema("id BIGINT, v STRING, at TIMESTAMP")
              .option("maxFilesPerTrigger", 1).json(str(landing))
              .writeStream.foreachBatch(batch).trigger(availableNow=True)
              .option("checkpointLocation", str(root / "checkpoint")).start())
    stream.awaitTermination()
    (spark.read.format("delta").load(str(root / "raw"))
     .groupBy(F.window("at", "1 day"), "v").agg(F.count("*"), F.max("id")).collect())
    spark.sql("SELECT v, count(*) FROM classes.t GROUP BY v").collect()
    spark.sql("DESCRIBE HISTORY classes.t").collect()
    spark.stop()


def main(argv: list[str]) -> int:
    """``python -m tests.jvm_classes``: make this virtualenv's archive unless it is there
    (``make setup`` does, for both virtualenvs); with ``--load``, the job it is made from."""
    if argv == ["--load"]:
        _load_classes()
        return 0
    made = sharing_options(JAVA_FOR_TESTS) != JAVA_FOR_TESTS
    print(f"class archive for the tests' JVMs: {archive_path() if made else 'none'}")
    return 0 if made else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
