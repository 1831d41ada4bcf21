"""The package as users get it: a wheel that installs into a clean virtualenv."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support import REPO

pytestmark = pytest.mark.slow


def test_the_wheel_installs_into_a_clean_virtualenv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO)],
                   check=True, capture_output=True, timeout=600)
    (wheel,) = dist.glob("*.whl")
    packages = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {"framework", "bronze", "silver", "gold"} <= packages
    assert "tests" not in packages
    # Spark comes with the cluster (Databricks, YARN): only the `local` extra brings it
    metadata = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("METADATA"))
    requires = [line for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
                if line.startswith("Requires-Dist: pyspark")]
    assert requires and all("extra == \"local\"" in line for line in requires), requires

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", f"{wheel}[local]"],
                   check=True, capture_output=True, timeout=900)
    result = subprocess.run([str(venv / "bin" / "medallion"), "--help"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for command in ("validate", "run", "status", "sql", "demo"):
        assert command in result.stdout
    pins = subprocess.run([str(venv / "bin" / "pip"), "show", "pyspark", "delta-spark"],
                          capture_output=True, text=True, check=True).stdout
    assert "Version: 4.2.0" in pins and "Version: 4.4.0" in pins
