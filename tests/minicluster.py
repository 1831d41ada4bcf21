"""The single-node YARN + HDFS cluster of ``deploy/yarn/minicluster.sh``, for the tests and the
benchmarks: started in a folder, its ``env.sh`` read, stopped on the way out."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "deploy" / "yarn" / "minicluster.sh"


class ClusterStartError(RuntimeError):
    """The cluster did not start; its script's error output is the message."""


@contextmanager
def minicluster(folder: Path) -> Iterator[dict[str, str]]:
    """A running cluster whose files are under ``folder``; the variables of its ``env.sh``
    (``HADOOP_CONF_DIR``, ``SPARK_CONF_DIR``, ``MEDALLION_HDFS_ROOT``...)."""
    started = subprocess.run(["bash", str(SCRIPT), "start", str(folder)],
                             env={**os.environ, "PYTHON": sys.executable},
                             capture_output=True, text=True, timeout=300)
    if started.returncode != 0:
        raise ClusterStartError(started.stderr[-3000:])
    try:
        variables = {}
        for line in (folder / "env.sh").read_text().splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            variables[name] = value.strip('"')
        yield variables
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(folder)], timeout=120)
