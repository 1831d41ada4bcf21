"""``bench/code_shape.py`` counts what it says: lines as ``wc -l`` does, functions from their
``def``, and the modules that reach the JVM by the rule of ``tests/test_architecture.py``."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from bench import code_shape
from tests import test_architecture
from tests.support import REPO


def test_lines_are_those_wc_counts() -> None:
    counted = code_shape.count_lines(REPO)
    files = [str(p) for folder in code_shape.FOLDERS
             for p in code_shape.python_files(REPO, folder)]
    total = subprocess.run(["wc", "-l", *files], capture_output=True, text=True,
                           check=True).stdout.splitlines()[-1].split()[0]
    assert counted["total"] == int(total) == sum(counted[f] for f in code_shape.FOLDERS)


def test_the_jvm_scan_is_the_architecture_tests() -> None:
    assert code_shape.JVM_ATTRIBUTES == test_architecture.JVM_ATTRIBUTES
    for path in code_shape.modules(REPO).values():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert code_shape._jvm_uses(tree) == test_architecture._jvm_uses(tree), path


SAMPLE_JVM = """
from typing import Any

def gateway(spark) -> Any: ...
def hadoop_configuration(spark): ...
def query_execution(df) -> list[Any]: ...
def is_connect(spark: Any) -> bool: ...
def size_estimate(df) -> int: ...
"""


def test_the_modules_that_take_a_jvm_object_from_framework_jvm(tmp_path: Path) -> None:
    handed = code_shape.handing_out(ast.parse(SAMPLE_JVM))
    assert handed == {"gateway", "hadoop_configuration", "query_execution"}
    reach = code_shape.jvm_modules(code_shape.modules(REPO))
    assert reach == {"framework.jvm"} or sorted(reach) == ["framework.jvm"]
    # the module whole, relative imports, and a name that hands out nothing
    (tmp_path / "framework").mkdir()
    (tmp_path / "framework" / "jvm.py").write_text(SAMPLE_JVM + "x = spark._jvm\n")
    (tmp_path / "framework" / "a.py").write_text("from . import jvm\njvm.gateway(s)\n")
    (tmp_path / "framework" / "b.py").write_text("import framework.jvm as j\nj.is_connect(s)\n")
    (tmp_path / "framework" / "c.py").write_text("from .jvm import query_execution\n")
    (tmp_path / "framework" / "d.py").write_text("import framework.jvm\nframework.jvm.gateway\n")
    (tmp_path / "framework" / "e.py").write_text("from .jvm import size_estimate\n")
    found = code_shape.jvm_modules(code_shape.modules(tmp_path))
    assert sorted(found) == ["framework.a", "framework.c", "framework.d", "framework.jvm"]


def test_a_function_counts_from_its_def() -> None:
    source = "class K:\n    @property\n    @staticmethod\n    def f():\n\n        return 1\n"
    assert code_shape.function_lines("m", ast.parse(source)) == {"m:K.f": 3}
