"""The shape of the product's code (``framework/``, ``bronze/``, ``silver/``, ``gold/``): its
lines, its longest functions, the modules that reach into Spark's JVM and the places it repeats
itself; for the working tree and, with ``--before REV``, for a revision, side by side.

    python bench/code_shape.py [--before REV] [--ignore FILE]

What is counted, each the same way in both trees (``--before`` exports the revision with
``git archive REV | tar -x`` into a temporary folder, removed at the end):

* **lines**: the newline characters of every ``*.py`` below each folder, as ``wc -l`` counts
  them, and their total against :data:`BASELINE` (the total before the redesign; its target
  is at least 20% fewer).
* **functions**: every ``def`` (methods and nested functions too, named
  ``module:Class.method`` or ``module:outer.inner``), its length ``end_lineno - lineno + 1``
  from :mod:`ast`: from the ``def`` line to its last line, **decorators excluded** (a nested
  function's lines count in the function around it as well). The longest, and every one
  over :data:`MAX_LINES` (target: none).
* **modules that reach the JVM** (target: one, ``framework.jvm``). A module reaches the JVM
  when its AST holds an attribute of :data:`JVM_ATTRIBUTES` (``x._jvm``,
  ``getattr(x, "_jdf")``) or an import of py4j: the rule of ``tests/test_architecture.py``
  (``JVM_ATTRIBUTES``, ``_jvm_uses``), mirrored here to the letter because that module
  imports pytest and the framework (``tests/test_code_shape.py`` checks that both agree);
  **or** when it imports from ``framework.jvm`` (by name, or the module and then its
  attribute) a function that hands out a raw JVM object, or a class with such a method. A
  Py4J object has no Python type, so in ``framework.jvm`` what hands one out is what its
  annotations cannot type: a public function (or a public class's public method) hands out a
  JVM object when its return annotation is missing or names ``Any`` or ``object`` anywhere in
  it (``Any``, ``list[Any]``, ``Any | None``); one typed ``str``, ``int``, ``bool`` or
  ``None`` returns a Python value, whatever it asked the JVM on the way. The rule reads the
  annotations, not a kept list; it trusts them, as ``mypy`` does. (What a function's value is
  built from would not do: ``configured_jars`` returns a string read through ``sparkContext``,
  and ``error_chain`` the throwables of a Py4J error without naming any of those attributes.)
* **repeated places**: the pairs the ``duplicates`` command lists over the four folders'
  ``*.py`` (copied into a temporary folder, so that both trees are read alike), with their
  locations. A pair is a place to look, not a verdict: the figure counts every pair,
  boilerplate included (how many it marks so is printed beside it). Pairs judged not to be
  the same logic can be listed in an ``--ignore`` file, one a line as the rows print them
  without their number and notes (``a.py:10-24 ~ b.py:40-54``; or ``a.py ~ b.py`` for every
  pair of two files; ``#`` comments), and are then left out of ``duplicate_pairs`` (the
  target: none that is real logic). Without ``duplicates`` on the PATH the figure is ``null``.

The last line is one JSON object: ``ratio`` (the working tree's total lines over the
revision's with ``--before``, else over :data:`BASELINE`), ``lines``, ``longest_function``,
``over_60``, ``jvm_modules``, ``duplicate_pairs`` and the rest, and the same under
``before``. Pure standard library: it runs with any ``python3``.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("framework", "bronze", "silver", "gold")
BASELINE = 17_164  # lines of the four folders before the redesign
TARGET_SHARE = 0.8  # at least 20% fewer
MAX_LINES = 60  # a function's lines at the most
JVM_MODULE = "framework.jvm"
UNTYPED = ("Any", "object")  # return annotations that can hold a Py4J object

# Mirrored from tests/test_architecture.py (JVM_ATTRIBUTES, _jvm_uses), to the letter.
JVM_ATTRIBUTES = ("_jvm", "_jsc", "_jdf", "_jsparkSession", "sparkContext", "_gateway")


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


def python_files(root: Path, folder: str) -> list[Path]:
    """Every ``*.py`` below ``root/folder``, as ``find folder -name '*.py'`` lists them."""
    top = root / folder
    return sorted(p for p in top.rglob("*.py") if p.is_file()) if top.is_dir() else []


def count_lines(root: Path) -> dict[str, int]:
    """Newline characters (``wc -l``) per folder, and their ``total``."""
    lines = {folder: sum(p.read_bytes().count(b"\n") for p in python_files(root, folder))
             for folder in FOLDERS}
    return {**lines, "total": sum(lines.values())}


def modules(root: Path) -> dict[str, Path]:
    """The four folders' modules by dotted name (a package's ``__init__`` by its folder's)."""
    found = {}
    for folder in FOLDERS:
        for path in python_files(root, folder):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def function_lines(name: str, tree: ast.Module) -> dict[str, int]:
    """Every function of the module, ``module:Class.method``, with its lines from its ``def``
    to its end (decorators excluded)."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                qualified = f"{name}:{prefix}{child.name}"
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                found[qualified] = max(found.get(qualified, 0), length)  # (a redefinition)
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _untyped(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the function's return annotation is missing or names ``Any`` or ``object``."""
    if function.returns is None:
        return True
    return any((isinstance(n, ast.Name) and n.id in UNTYPED)
               or (isinstance(n, ast.Attribute) and n.attr in UNTYPED)
               or (isinstance(n, ast.Constant) and isinstance(n.value, str)
                   and re.search(r"\b(Any|object)\b", n.value) is not None)
               for n in ast.walk(function.returns))


def handing_out(tree: ast.Module) -> set[str]:
    """The public names of ``framework.jvm`` that hand out a raw JVM object: functions whose
    return annotation is untyped (:func:`_untyped`), and classes with such a public method."""
    def hands_out(node: ast.stmt) -> bool:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return not node.name.startswith("_") and _untyped(node)
        return isinstance(node, ast.ClassDef) and not node.name.startswith("_") and any(
            hands_out(m) for m in node.body)

    return {node.name for node in tree.body if isinstance(
        node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and hands_out(node)}


def _absolute(package: list[str], node: ast.ImportFrom) -> str:
    """The module an ``import from`` in ``package`` names, its leading dots resolved."""
    if not node.level:
        return node.module or ""
    base = package[:len(package) - node.level + 1]
    return ".".join([*base, *filter(None, [node.module or ""])])


def jvm_imports(name: str, path: Path, tree: ast.Module, handed: set[str]) -> list[str]:
    """The names of ``handed`` the module takes from ``framework.jvm``: imported by name, or
    read as attributes of the module imported whole (``from framework import jvm``,
    ``import framework.jvm``), at its top or inside a function."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    aliases: set[str] = set()  # what the module framework.jvm is called in this one
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = _absolute(package, node)
            for a in node.names:
                if base == JVM_MODULE:
                    found |= handed if a.name == "*" else {a.name} & handed
                elif f"{base}.{a.name}" == JVM_MODULE:
                    aliases.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name == JVM_MODULE}
    if aliases:
        found |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                  and node.attr in handed and ast.unparse(node.value) in aliases}
    return sorted(found)


def jvm_modules(paths: dict[str, Path]) -> dict[str, str]:
    """The modules that reach the JVM, each with how: its JVM attributes and py4j imports, and
    what it imports from ``framework.jvm`` that hands out a JVM object."""
    trees = {name: ast.parse(path.read_bytes(), filename=str(path))
             for name, path in paths.items()}
    handed = handing_out(trees[JVM_MODULE]) if JVM_MODULE in trees else set()
    found = {}
    for name, tree in trees.items():
        uses = sorted({attr for _, attr in _jvm_uses(tree)})
        taken = [] if name == JVM_MODULE else jvm_imports(name, paths[name], tree, handed)
        if uses or taken:
            found[name] = ", ".join([*uses, *(f"{JVM_MODULE}.{t}" for t in taken)])
    return found


ROW = re.compile(r"^D\d+ (\S+):(\d+)-(\d+) ~ (\S+):(\d+)-(\d+)(.*)$")


def _pair_key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def read_ignore(path: Path | None) -> set[tuple[str, str]]:
    """The ``--ignore`` file's pairs: ``a.py:10-24 ~ b.py:40-54`` or ``a.py ~ b.py``."""
    if path is None:
        return set()
    pairs = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            a, _, b = line.partition("~")
            pairs.add(_pair_key(a.strip(), b.strip()))
    return pairs


def duplicates(root: Path, ignore: set[tuple[str, str]]) -> dict[str, Any]:
    """The ``duplicates`` command's pairs over the four folders' ``*.py`` of ``root``."""
    command = shutil.which("duplicates")
    if command is None:
        return {"pairs": None, "counted": None, "boilerplate": None, "ignored": 0, "rows": [],
                "notes": ["not measured: the duplicates command is not on the PATH"]}
    with tempfile.TemporaryDirectory(prefix="code-shape-dup-") as folder:
        for name in FOLDERS:
            for path in python_files(root, name):
                copy = Path(folder) / path.relative_to(root)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, copy)
        out = subprocess.run([command, "--repo", folder, "--most", "200", "--seconds", "300"],
                             capture_output=True, text=True, check=False).stdout
    lines = out.splitlines()
    head = lines[0] if lines else ""
    total = re.match(r"(\d+) pairs? of places", head)
    pairs = int(total.group(1)) if total else 0 if head.startswith("no duplicates") else None
    marked = re.search(r"(\d+) of those marked boilerplate", head)
    rows, ignored = [], 0
    for line in lines[1:]:
        row = ROW.match(line)
        if row is None:
            continue
        a, b = f"{row[1]}:{row[2]}-{row[3]}", f"{row[4]}:{row[5]}-{row[6]}"
        if _pair_key(a, b) in ignore or _pair_key(row[1], row[4]) in ignore:
            ignored += 1
        rows.append(line)
    notes = [line for line in lines[1:] if ROW.match(line) is None]
    if pairs is None:
        notes.insert(0, f"unexpected answer from duplicates: {head!r}")
    return {"pairs": pairs, "counted": None if pairs is None else pairs - ignored,
            "boilerplate": int(marked.group(1)) if marked else 0, "ignored": ignored,
            "rows": rows, "notes": notes}


def measure(root: Path, ignore: set[tuple[str, str]]) -> dict[str, Any]:
    """Every figure of one tree."""
    paths = modules(root)
    lines = count_lines(root)
    functions = {q: n for name, path in paths.items() for q, n in
                 function_lines(name, ast.parse(path.read_bytes(), filename=str(path))).items()}
    ranked = sorted(functions.items(), key=lambda item: (-item[1], item[0]))
    over = {q: n for q, n in ranked if n > MAX_LINES}
    jvm = jvm_modules(paths)
    repeated = duplicates(root, ignore)
    return {"lines": lines,
            "change_percent": round((lines["total"] / BASELINE - 1) * 100, 2),
            "longest_function": ({"name": ranked[0][0], "lines": ranked[0][1]} if ranked
                                 else {"name": None, "lines": 0}),
            "over_60": len(over), "over_60_functions": over,
            "jvm_modules": {"count": len(jvm), "modules": sorted(jvm)}, "jvm_reach": jvm,
            "duplicate_pairs": repeated["counted"], "duplicates": repeated}


def export(rev: str, folder: Path) -> str:
    """``git archive REV | tar -x -C folder`` from this repository; the commit's id."""
    found = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet",
                            f"{rev}^{{commit}}"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise SystemExit(f"expected a revision of {REPO} for --before, found {rev!r}")
    commit = found.stdout.strip()
    archive = subprocess.Popen(["git", "-C", str(REPO), "archive", commit],
                               stdout=subprocess.PIPE)
    assert archive.stdout is not None
    subprocess.run(["tar", "-x", "-C", str(folder)], stdin=archive.stdout, check=True)
    archive.stdout.close()
    if archive.wait() != 0:
        raise SystemExit(f"expected git archive {rev} to succeed, found exit {archive.returncode}")
    return commit


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:,}" if isinstance(value, int) else str(value)


def report(now: dict[str, Any], before: dict[str, Any] | None) -> None:
    """The figures as lines: a column a tree, ``before`` first."""
    trees = [("before", before), ("now", now)] if before is not None else [("now", now)]
    over = sorted({q for _, t in trees for q in t["over_60_functions"]},
                  key=lambda q: (-max(t["over_60_functions"].get(q, 0) for _, t in trees), q))
    reach = sorted({m for _, t in trees for m in t["jvm_reach"]})
    tables: list[tuple[str, list[tuple[str, list[Any], str]]]] = [
        ("lines (wc -l of *.py)",
         [*((f, [t["lines"][f] for _, t in trees], "") for f in (*FOLDERS, "total")),
          (f"against {BASELINE:,}", [f"{t['change_percent']:+.1f}%" for _, t in trees],
           f"(target: -20% or more, {int(BASELINE * TARGET_SHARE):,} lines at the most)")]),
        (f"functions over {MAX_LINES} lines",
         [("count", [t["over_60"] for _, t in trees], "(target: 0)"),
          *((q, [t["over_60_functions"].get(q) for _, t in trees], "") for q in over)]),
        ("modules that reach the JVM",
         [("count", [t["jvm_modules"]["count"] for _, t in trees], "(target: 1)"),
          *((m, ["yes" if m in t["jvm_reach"] else "-" for _, t in trees],
             next(t["jvm_reach"][m] for _, t in reversed(trees) if m in t["jvm_reach"]))
            for m in reach)]),
        ("pairs of the duplicates command",
         [("pairs", [t["duplicates"]["pairs"] for _, t in trees], ""),
          ("marked boilerplate", [t["duplicates"]["boilerplate"] for _, t in trees], ""),
          ("ignored (--ignore)", [t["duplicates"]["ignored"] for _, t in trees], ""),
          ("counted", [t["duplicate_pairs"] for _, t in trees], "(target: 0 real logic)")]),
    ]
    width = max(len(text) for title, rows in tables
                for text in (title, *(f"  {label}" for label, _, _ in rows)))
    for title, rows in tables:
        print(f"{title:<{width}}" + "".join(f"{name:>9}" for name, _ in trees))
        for label, cells, note in rows:
            print(f"  {label:<{width - 2}}" + "".join(f"{_cell(c):>9}" for c in cells)
                  + (f"  {note}" if note else ""))
        if title.startswith("lines") and before is not None:
            print(f"  {'ratio (now / before)':<{width - 2}}{'':>9}"
                  f"{now['lines']['total'] / before['lines']['total']:>9.4f}")
        if title.startswith("functions"):
            for name, t in trees:
                longest = t["longest_function"]
                print(f"  longest, {name}: {longest['name']} ({longest['lines']} lines from "
                      "its def, decorators excluded)")
    for name, t in trees:
        for line in [*t["duplicates"]["rows"], *t["duplicates"]["notes"]]:
            print(f"  {name:<7}{line}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", metavar="REV", default=None,
                        help="a git revision of this repository to measure beside the tree")
    parser.add_argument("--ignore", metavar="FILE", type=Path, default=None,
                        help="pairs of the duplicates command judged not to be the same logic")
    args = parser.parse_args(argv)
    ignore = read_ignore(args.ignore)
    before = None
    if args.before is not None:
        with tempfile.TemporaryDirectory(prefix="code-shape-") as folder:
            commit = export(args.before, Path(folder))
            before = {"rev": args.before, "commit": commit, **measure(Path(folder), ignore)}
    now = measure(REPO, ignore)
    print(f"code shape of {REPO} (now)"
          + (f" against {args.before} ({before['commit'][:7]}, before)" if before else ""))
    report(now, before)
    base = before["lines"]["total"] if before else BASELINE
    result = {"ratio": round(now["lines"]["total"] / base, 4), "baseline": BASELINE, **now}
    if before is not None:
        result["before"] = before
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
