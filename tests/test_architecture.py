"""The package structure: ``framework/`` is the contract and imports no layer; no import cycles;
the layers plug in through the registry."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from pyspark.sql import SparkSession

from framework.commands import Commands, common_options
from framework.config.model import Layer
from framework.errors import WrongTypeError
from framework.layers import plugins, spec_model
from tests.support import REPO

PRODUCT = ("framework", "bronze", "silver", "gold", "examples")
LAYER_PACKAGES = ("bronze", "silver", "gold", "examples")


def _modules() -> dict[str, Path]:
    found = {}
    for top in PRODUCT:
        for path in sorted((REPO / top).rglob("*.py")) if (REPO / top).is_dir() else []:
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path) -> set[str]:
    """Every module ``name`` imports, at its top or inside a function (a dependency either
    way), resolved to module names."""
    found: set[str] = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[:len(package) - node.level + 1], *filter(None, [base])])
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {m for m in _imports(name, path) if m in modules and m != name}
            for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of modules that import each other, directly or not (strongly connected)."""
    order: list[str] = []
    seen: set[str] = set()

    def forward(v: str) -> None:
        seen.add(v)
        for w in graph[v]:
            if w not in seen:
                forward(w)
        order.append(v)

    for v in graph:
        if v not in seen:
            forward(v)
    reverse: dict[str, set[str]] = {v: set() for v in graph}
    for v, ws in graph.items():
        for w in ws:
            reverse[w].add(v)
    assigned: set[str] = set()
    groups = []
    for v in reversed(order):
        if v in assigned:
            continue
        group, todo = [], [v]
        assigned.add(v)
        while todo:
            u = todo.pop()
            group.append(u)
            for w in reverse[u] - assigned:
                assigned.add(w)
                todo.append(w)
        if len(group) > 1:
            groups.append(sorted(group))
    return groups


def test_the_framework_imports_no_layer_package() -> None:
    modules = _modules()
    upward = {name: sorted(m for m in _imports(name, path)
                           if m.split(".")[0] in LAYER_PACKAGES)
              for name, path in modules.items() if name.split(".")[0] == "framework"}
    assert len(upward) > 20  # the framework's modules were found
    assert {name: up for name, up in upward.items() if up} == {}


def test_no_modules_import_each_other_in_a_cycle() -> None:
    graph = _graph()
    assert _cycles(graph) == []
    # the check finds a cycle where there is one
    assert _cycles({**graph, "framework.errors": {"framework.job"}}) != []


def test_every_layer_plugs_in_through_the_registry() -> None:
    installed = plugins()
    assert list(installed) == list(Layer)
    commands = Commands(argparse.ArgumentParser().add_subparsers(),
                        common_options())
    for plugin in installed.values():
        assert all(model.layer is plugin.layer for model in plugin.models)
        assert plugin.planner is not None and callable(plugin.planner())
        if plugin.commands is not None:
            plugin.commands(commands)


def test_gold_kinds_are_separate_models_each_with_its_job() -> None:
    from gold.job import AggregateJob
    from gold.mart import MartJob
    from gold.spec import AggregateSpec, MartSpec

    gold = plugins()[Layer.GOLD]
    aggregate = {"source": "orders", "event_time": "t", "watermark": "1 hour",
                 "window": {"type": "tumbling", "duration": "1 hour"},
                 "aggregates": [{"name": "n", "expr": "count(*)"}]}
    mart = {"kind": "mart", "fact": "sales", "dimensions": [{"table": "stores", "on": "id"}]}
    assert spec_model(Layer.GOLD, aggregate) is AggregateSpec  # the default kind
    assert spec_model(Layer.GOLD, mart) is MartSpec
    specs = [AggregateSpec.model_validate({"name": "a", **aggregate}),
             MartSpec.model_validate({"name": "m", **mart})]
    assert [gold.job(s) for s in specs] == [AggregateJob, MartJob]
    with pytest.raises(WrongTypeError, match="expected one of aggregate, mart, found 'cube'"):
        spec_model(Layer.GOLD, {"kind": "cube"})
    # one kind's keys are unknown keys of the other
    with pytest.raises(ValidationError, match="extra_forbidden"):
        MartSpec.model_validate({"name": "m", **mart, "watermark": "1 hour"})
    with pytest.raises(ValidationError, match="extra_forbidden"):
        AggregateSpec.model_validate({"name": "a", **aggregate, "materialize": True})


JVM_ATTRIBUTES = ("_jvm", "_jsc", "_jdf", "_jsparkSession", "sparkContext", "_gateway")
# The one capability that reaches into Spark's JVM (Py4J), classic sessions only
# (framework.jvm says how Spark Connect does without).
JVM_MODULES = ("framework.jvm",)


def _jvm_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """Attributes and names that reach into the JVM (``x._jvm``, ``getattr(x, "_jdf")``) and
    imports of py4j."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in JVM_ATTRIBUTES:
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Constant) and node.value in JVM_ATTRIBUTES:
            found.append((node.lineno, str(node.value)))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if any(n == "py4j" or n.startswith("py4j.") for n in names):
                found.append((node.lineno, "py4j"))
    return found


def test_only_the_jvm_capability_reaches_into_the_jvm() -> None:
    """``framework.jvm`` holds every use of Py4J, each with its Spark Connect alternative: a
    new ``_jvm``, ``_jsc``, ``_jdf``, ``_jsparkSession`` or ``sparkContext`` anywhere else in
    the product fails here."""
    outside = {f"{name}:{line} {attr}"
               for name, path in _modules().items() if name not in JVM_MODULES
               for line, attr in _jvm_uses(ast.parse(path.read_text(encoding="utf-8")))}
    assert outside == set(), "JVM access outside framework.jvm: " + ", ".join(sorted(outside))
    inside = _jvm_uses(ast.parse((REPO / "framework" / "jvm.py").read_text(encoding="utf-8")))
    assert inside, "expected framework.jvm to hold the JVM's uses, found none (check the scan)"


# What an annotation may not name: a Py4J object's type, or a type that lets one through.
NOT_PYTHON_VALUES = ("Any", "object", "JavaObject", "JavaMember", "JavaClass", "JavaGateway",
                     "JVMView", "JavaMap", "JavaList")


def _jvm_interface() -> dict[str, str]:
    """What ``framework.jvm`` gives out: each public function and public method of a public
    class, with its return annotation, and each field of a public class, with its type.
    (``JsonProgressListener._jlistener`` is pyspark's to read when it adds the listener.)"""
    found = {}
    for node in ast.parse((REPO / "framework" / "jvm.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            found[node.name] = ast.unparse(node.returns) if node.returns else ""
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
                    found[f"{node.name}.{item.name}"] = \
                        ast.unparse(item.returns) if item.returns else ""
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    found[f"{node.name}.{item.target.id}"] = ast.unparse(item.annotation)
    return found


def test_the_jvm_capability_gives_out_python_values_only() -> None:
    """No other module can call Java: what ``framework.jvm`` returns is typed, and its types
    are Python's (no ``Any`` a Py4J object could hide behind)."""
    interface = _jvm_interface()
    assert len(interface) > 10, "expected framework.jvm's functions, found few (check the scan)"
    loose = {name: annotation or "(none)" for name, annotation in interface.items()
             if not annotation or set(re.findall(r"\w+", annotation)) & set(NOT_PYTHON_VALUES)}
    assert loose == {}, "expected Python types from framework.jvm, found these annotations"


def _py4j_objects(value: Any) -> list[str]:
    """The types of the Py4J objects in ``value``, through containers and dataclasses."""
    if type(value).__module__.startswith("py4j"):
        return [type(value).__name__]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, dict):
        value = [*value, *value.values()]
    elif not isinstance(value, list | tuple | set):
        return []
    return [found for item in value for found in _py4j_objects(item)]


def test_the_jvm_capability_returns_no_py4j_object_on_a_classic_session(
    spark: SparkSession, tmp_path: Path
) -> None:
    from framework import jvm

    table, folder = f"file://{tmp_path}/table", f"file://{tmp_path}/files"
    spark.range(5).selectExpr("id", "id % 2 AS part").write.partitionBy("part").parquet(table)
    spark.read.parquet(table).createOrReplaceTempView("architecture_scan")
    with pytest.raises(Exception, match="found") as error:
        spark.sql("SELECT raise_error('found')").collect()
    files = jvm.HadoopFileSystem(spark)
    (tmp_path / "local.txt").write_bytes(b"local")
    got: dict[str, Any] = {
        "is_connect": jvm.is_connect(spark),
        "session_key": jvm.session_key(spark),
        "configured_jars": jvm.configured_jars(spark),
        "has_class": jvm.has_class(spark, "java.lang.String"),
        "hadoop_version": jvm.hadoop_version(spark),
        "size_estimate": jvm.size_estimate(spark, "architecture_scan"),
        "executed_scans": jvm.executed_scans(spark.table("architecture_scan"), True),
        "error_chain": jvm.error_chain(error.value),
        "HadoopFileSystem.mkdirs": files.mkdirs(folder),
        "HadoopFileSystem.write": files.write(f"{folder}/a", b"a", overwrite=False),
        "HadoopFileSystem.copy_from_local": files.copy_from_local(str(tmp_path / "local.txt"),
                                                                  f"{folder}/b"),
        "HadoopFileSystem.set_time": files.set_time(f"{folder}/b", 1000),
        "HadoopFileSystem.rename": files.rename(f"{folder}/b", f"{folder}/c"),
        "HadoopFileSystem.exists": files.exists(f"{folder}/a"),
        "HadoopFileSystem.is_folder": files.is_folder(folder),
        "HadoopFileSystem.stat": files.stat(f"{folder}/c"),
        "HadoopFileSystem.read": files.read(f"{folder}/c"),
        "HadoopFileSystem.list_files": list(files.list_files(table)),
        "HadoopFileSystem.delete": files.delete(folder, recursive=True),
    }
    assert got["error_chain"][0].parameters == {"errorMessage": "found"}  # (the chain is read)
    assert len(got["executed_scans"][1]) == 1 and got["HadoopFileSystem.list_files"]
    assert {name: found for name, value in got.items() if (found := _py4j_objects(value))} == {}
    # every function is called here but those that return nothing, start the driver or the
    # Thrift server, or reach a Maven repository (the annotations' check covers them)
    kept = {"require_classic", "set_log_level", "launch_driver", "thrift_server",
            "resolve_alone"}
    assert {n for n in _jvm_interface() if "." not in n or n.startswith("HadoopFileSystem.")} \
        == set(got) | kept


def test_the_stores_without_a_jvm_are_those_of_connect() -> None:
    from framework.storage import IMPLEMENTATIONS, JVM_FREE_SCHEMES

    assert set(IMPLEMENTATIONS) == set(JVM_FREE_SCHEMES)
