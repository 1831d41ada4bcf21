"""What the benchmarks share: a throw-away lakehouse with its own conf/ and one Spark session."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml
from pyspark.sql import SparkSession

from framework.config.loader import load_project
from framework.config.model import ProjectConfig
from framework.logging import LogFormat, configure_logging
from framework.session import get_spark


class BenchLakehouse:
    """A temporary conf/ folder (environment ``bench``) and lakehouse root."""

    def __init__(self, name: str, shuffle_partitions: int = 4, **spark_conf: str) -> None:
        configure_logging(LogFormat.JSON, "warning")  # events to stderr; stdout is the report
        self.work = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
        self.conf = self.work / "conf"
        self.root = self.work / "lakehouse"
        env = {"runtime": "local", "root": str(self.root), "master": "local[*]",
               "shuffle_partitions": shuffle_partitions,
               "spark_conf": {"spark.ui.enabled": "false", "spark.driver.memory": "6g",
                              **spark_conf}}
        self.write("environments/bench.yaml", env)
        self.spark: SparkSession = get_spark(self.project().env, f"bench-{name}")
        self.spark.sparkContext.setLogLevel("ERROR")

    def write(self, relative: str, data: dict[str, Any]) -> Path:
        path = self.conf / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def project(self) -> ProjectConfig:
        return load_project(self.conf, "bench")
