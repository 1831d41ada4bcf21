"""``medallion contract export|check|init``: data contracts (ODCS) out of the specs, checked
against them, and into a new feed's specs (:mod:`framework.contracts`)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from framework.commands import EXIT_FAILED, EXIT_OK, Commands, project_of
from framework.config.model import Layer, ProjectConfig, Table
from framework.contracts import (
    DEFAULT_VERSION,
    ContractAction,
    check,
    contract_file,
    contract_table,
    declared_columns,
    dump,
    export,
    live_columns,
    read_contract,
    with_planned,
)
from framework.errors import ContractError, UsageError
from framework.logging import get_logger


def add_contract(commands: Commands) -> None:
    p = commands.add(
        "contract", cmd_contract,
        help="export, check or start from data contracts (ODCS v3)",
        description="export: write an ODCS v3 contract per table (columns with types, "
        "descriptions, key, quality rules, freshness as an SLA, the server), validated against "
        "the standard's JSON schema. check: compare contracts with the specs and, where the "
        "lake has them, the live tables (read without Spark): one line per difference; exit 1 "
        "when one is breaking (a column removed or renamed, a type narrowed, nullability "
        "tightened, the key changed, a promised quality rule or SLA missing). init: write the "
        "bronze and silver specs of a new feed from a producer's contract.")
    p.add_argument("action", choices=[a.value for a in ContractAction])
    p.add_argument("targets", nargs="+", metavar="TABLE|CONTRACT",
                   help="export: tables (orders, silver.orders); check: contract files; "
                   "init: one contract file")
    p.add_argument("--out", default="contracts", metavar="DIR",
                   help="export: the folder the contracts are written to (default: contracts)")
    p.add_argument("--version", dest="contract_version", default=DEFAULT_VERSION,
                   metavar="V", help=f"export: the contracts' version (default: "
                   f"{DEFAULT_VERSION})")
    p.add_argument("--table", metavar="NAME",
                   help="init: the feed's table name (default: the contract's first table's)")


def cmd_contract(args: argparse.Namespace) -> int:
    action = ContractAction(args.action)
    if action is ContractAction.EXPORT:
        return _export(args)
    if action is ContractAction.CHECK:
        return _check(args)
    return _init(args)


def _table(project: ProjectConfig, name: str) -> Table:
    """A configured table by ``layer.name``, full or short name."""
    table = contract_table(project, {"name": name})
    if table is None:
        hits = [f"{t.layer.value}.{t.name}" for t in project.tables if t.name == name]
        if len(hits) > 1:
            raise UsageError(f"expected one configured table named {name!r}, found "
                             f"{len(hits)}: {', '.join(hits)}; name its layer")
        known = ", ".join(f"{t.layer.value}.{t.name}" for t in project.tables) or "none"
        raise UsageError(f"expected a configured table, found {name!r}; known: {known}")
    return table


def _export(args: argparse.Namespace) -> int:
    project = project_of(args)
    tables = [_table(project, name) for name in args.targets]
    columns = with_planned(project, declared_columns(project), tables)
    log = get_logger(env=project.env.name)
    for table in tables:
        doc = export(project, table, args.contract_version, columns)
        path = contract_file(args.out, table)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump(doc), encoding="utf-8")
        obj = doc["schema"][0]
        origin = "the live table" if live_columns(table) is not None else "the specs"
        log.info("contract.exported", table=table.full_name, path=str(path),
                 columns=len(obj.get("properties", [])), rules=len(obj.get("quality", [])))
        print(f"written: {path} ({table.full_name}: {len(obj.get('properties', []))} columns "
              f"from {origin}, {len(obj.get('quality', []))} quality rules, "
              f"{len(doc.get('slaProperties', []))} SLA)")
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    contracts = {path: read_contract(path) for path in args.targets}
    project = project_of(args)
    log = get_logger(env=project.env.name)
    breaking = 0
    for path, doc in contracts.items():
        findings = check(project, doc)
        worse = sum(f.breaking for f in findings)
        breaking += worse
        for finding in sorted(findings, key=lambda f: not f.breaking):
            print(f"{path}: {finding.render()}")
        log.info("contract.checked", contract=str(path), breaking=worse,
                 compatible=len(findings) - worse)
        if not findings:
            print(f"{path}: the specs keep the contract")
    return EXIT_FAILED if breaking else EXIT_OK


def _init(args: argparse.Namespace) -> int:
    from framework.contract_init import ContractScaffold, table_name_of
    from framework.scaffold import options_of, targets, write_specs

    if len(args.targets) != 1:
        raise UsageError(f"expected one contract file with init, found {len(args.targets)}")
    path = args.targets[0]
    doc = read_contract(path)
    table = args.table or table_name_of(doc)
    project = project_of(args)
    if any(t.name == table for t in project.tables):
        raise ContractError(f"expected a new table name, found {table!r} configured already: "
                            "give another with --table")
    files: dict[Layer, Path] = dict(targets(project.conf_dir, table, None))
    origin = shlex.join(["medallion", "contract", "init", str(path),
                         *(["--table", args.table] if args.table else [])])
    written = write_specs(files, ContractScaffold(table, doc, origin).specs())
    get_logger(env=project.env.name).info("contract.scaffolded", contract=str(path),
                                          table=table, files=[str(f) for f in written])
    for file in written:
        print(f"written: {file}")
    options = options_of(args.conf, args.env)
    print("next:")
    for command in (["validate"], ["init"], ["land", table, "FILE", "..."], ["run", "all"]):
        print(f"  {shlex.join(['medallion', *command, *options])}")
    return EXIT_OK

