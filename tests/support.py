"""Helpers for tests: per-test lakehouses and landing-file writers."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

from framework.config.loader import load_project
from framework.config.model import ProjectConfig

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


class Lakehouse:
    """A conf/ folder and a lakehouse root for one test, with unique catalog schemas."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.conf = base / "conf"
        self.root = base / "lakehouse"
        suffix = uuid.uuid4().hex[:8]
        self.schemas = {layer: f"{layer}_{suffix}" for layer in ("bronze", "silver", "gold")}
        self.env_name = "test"
        self.write_env()

    def write_env(self, **extra: Any) -> None:
        env = {
            "runtime": "local",
            "root": str(self.root),
            "master": "local[2]",
            "shuffle_partitions": 2,
            "schemas": self.schemas,
            "spark_conf": {"spark.ui.enabled": "false"},
            **extra,
        }
        self._write(self.conf / "environments" / f"{self.env_name}.yaml", env)

    def add_table(self, layer: str, name: str, spec: dict[str, Any]) -> Path:
        path = self.conf / "tables" / layer / f"{name}.yaml"
        self._write(path, spec)
        return path

    def project(self) -> ProjectConfig:
        return load_project(self.conf, self.env_name)

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    @staticmethod
    def _write(path: Path, data: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")

    def cli_env(self) -> dict[str, str]:
        """Environment for a `medallion` subprocess using this lakehouse."""
        env = dict(os.environ)
        env.update(MEDALLION_CONF=str(self.conf), MEDALLION_ENV=self.env_name,
                   PYTHONUNBUFFERED="1")
        return env


def medallion_cmd() -> list[str]:
    return [str(BIN / "medallion")]
