"""A Hadoop file system that refuses a seeded fraction of renames and deletes
(``FaultyFileSystem.java``, scheme ``faulty://`` over the local disk), to show that what a
refused move leaves behind is repaired by the next run.

:func:`jar` compiles it once (``javac`` against PySpark's Hadoop client) into the user's cache;
:func:`spark_conf` gives the settings that put a session's ``faulty://`` paths on it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("FaultyFileSystem.java")
CLASS = "medallion.faults.FaultyFileSystem"


def jar() -> Path:
    """The compiled file system, built on first use."""
    import pyspark

    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "medallion"
    target = cache / "faultfs" / f"faultfs-{digest}.jar"
    if target.exists():
        return target
    jars = Path(pyspark.__file__).parent / "jars"
    classpath = os.pathsep.join(str(p) for p in sorted(jars.glob("hadoop-client-api-*.jar")))
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as build:
        subprocess.run(["javac", "-nowarn", "-cp", classpath, "-d", build, str(SOURCE)],
                       check=True, capture_output=True)
        staged = target.with_suffix(f".{os.getpid()}.tmp")  # test workers may build at once
        subprocess.run(["jar", "cf", str(staged), "-C", build, "."], check=True)
        staged.replace(target)
    return target


def spark_conf(rate: str = "0", seed: str = "0", paths: str = ".*/landing/.*") -> dict[str, str]:
    """Spark settings for ``faulty://`` (rate: the fraction of renames and deletes of paths
    matching ``paths`` that fail)."""
    return {
        "spark.driver.extraClassPath": str(jar()),
        "spark.hadoop.fs.faulty.impl": CLASS,
        "spark.hadoop.fs.AbstractFileSystem.faulty.impl": f"{CLASS}$Fs",
        "spark.hadoop.fs.faulty.impl.disable.cache": "false",
        "spark.hadoop.fs.faulty.rate": rate,
        "spark.hadoop.fs.faulty.seed": seed,
        "spark.hadoop.fs.faulty.paths": paths,
    }
