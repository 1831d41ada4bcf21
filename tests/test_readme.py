"""The README's quickstart, command by command, as a new user runs it from the repository (its
own conf/, the local default), on a small demo feed: every command must exit 0 (the demo's
second run, its last, is tests/test_demo.py's)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO

pytestmark = pytest.mark.slow


def quickstart() -> list[list[str]]:
    """The commands of the README's quickstart block, comments dropped."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quickstart", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block, "no bash block in the README's quickstart"
    commands = [shlex.split(line, comments=True) for line in block.group(1).splitlines()]
    return [c for c in commands if c]


def test_every_quickstart_command_exits_0(tmp_path: Path) -> None:
    commands = quickstart()
    assert commands[0] == ["make", "demo"] and ["make", "demo"] not in commands[1:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDALLION_")}
    env.update(MEDALLION_ROOT=str(tmp_path / "lakehouse"), MEDALLION_DEMO_ORDERS="300",
               MEDALLION_DEMO_FILES="30")
    outputs = {}
    # The last command runs the demo again, as `make demo` did: what a second run must do
    # (change nothing) is asserted by tests/test_demo.py.
    assert commands[-1] == [".venv/bin/medallion", "demo"]
    for command in commands[:-1]:
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, f"{shlex.join(command)} exited {done.returncode}:\n" \
                                     f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        outputs[shlex.join(command)] = done.stdout
    status = outputs[".venv/bin/medallion status"]
    assert "spark_catalog.gold.regional_sales | view" in status  # a mart is a view
    assert "spark_catalog.silver.orders" in status and "(8 rows)" in status
