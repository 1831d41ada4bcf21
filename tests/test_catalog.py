"""Tables persist by name in the local lakehouse: a new driver process finds them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import REPO, CliRun, Lakehouse

pytestmark = pytest.mark.slow

WRITER = """
import sys
from framework.config.loader import load_project
from framework.session import get_spark
project = load_project(sys.argv[1], "test")
spark = get_spark(project.env, "writer")
schema = project.env.schemas.bronze
spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
spark.createDataFrame([(1, "a"), (2, "b")], "id INT, v STRING") \\
    .write.format("delta").saveAsTable(f"{schema}.roundtrip")
spark.createDataFrame([(3, "c")], "id INT, v STRING") \\
    .write.format("delta").mode("append").saveAsTable(f"{schema}.roundtrip")
"""


def test_delta_table_round_trip_through_the_catalog(lakehouse: Lakehouse) -> None:
    subprocess.run([sys.executable, "-c", WRITER, str(lakehouse.conf)], check=True,
                   env=lakehouse.cli_env(), cwd=REPO, capture_output=True, timeout=900)
    name = f"{lakehouse.schemas['bronze']}.roundtrip"
    query = (f"SELECT (SELECT count(*) FROM {name}) AS now, "
             f"(SELECT count(*) FROM {name} VERSION AS OF 0) AS v0, "
             f"(SELECT max(id) FROM {name} VERSION AS OF 0) AS v0_max")
    reader = CliRun(["sql", query, "--json"], lakehouse.cli_env())
    code, out = reader.finish()
    assert code == 0, "".join(reader.lines[-20:])
    assert json.loads(out.strip().splitlines()[-1]) == {"now": 3, "v0": 2, "v0_max": 2}
