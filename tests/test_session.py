"""The session factory and the command line, outside the shared test session."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from framework.cli import build_parser, main
from framework.session import DELTA_CATALOG, DELTA_EXTENSION, delta_package, local_cores
from tests.support import BIN, REPO, Lakehouse


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


def test_delta_package_matches_the_installed_pair() -> None:
    import pyspark

    major_minor = ".".join(pyspark.__version__.split(".")[:2])
    assert delta_package().startswith(f"io.delta:delta-spark_{major_minor}_2.13:")


def test_spark_submit_without_delta_fails_with_the_packages_to_add(lakehouse: Lakehouse) -> None:
    lakehouse.write_env(runtime="submit")
    result = subprocess.run(
        [str(BIN / "spark-submit"), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
         str(REPO / "tests" / "scripts" / "submit_probe.py"), "sql", "SELECT 1"],
        capture_output=True, text=True, env=lakehouse.cli_env(), cwd=REPO, timeout=300,
    )
    # spark-submit merges the Python driver's stderr into its own stdout
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    assert f"--packages {delta_package()}" in output
    assert f"spark.sql.extensions={DELTA_EXTENSION}" in output
    assert f"spark.sql.catalog.spark_catalog={DELTA_CATALOG}" in output
