"""``medallion contract init``: a new feed's bronze and silver specs from a producer's data
contract (ODCS v3), as ``medallion new`` writes them from sample files (:mod:`framework.scaffold`).

What the contract says becomes what the specs say: its columns the bronze schema and the silver
columns (a Spark type as written, ``varchar(n)`` as ``STRING``, else from the logical type), its
key the dedup keys (or a ``unique`` check without an event time), its required columns a not-null
rule, its quality rules expectations or checks where the standard's terms have a spec form
(``nullValues``, ``invalidValues``, ``duplicateValues``, a SQL count of the table's rows ``WHERE``
a condition, or the spec's own form kept by ``contract export``), and its latency SLA a
freshness check. A rule without such a form is left as a comment, to translate by hand.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from framework.columns import normal_type
from framework.config.model import Layer
from framework.config.types import IDENTIFIER
from framework.contracts import CHECK, LATENCY, RULE, contract_key, latency_seconds, spark_alias
from framework.errors import ContractError

# An ODCS logical type -> the Spark SQL type bronze reads it as (a physical type Spark knows
# is taken as it is).
FROM_LOGICAL = {"string": "STRING", "integer": "BIGINT", "number": "DOUBLE",
                "boolean": "BOOLEAN", "date": "DATE", "timestamp": "TIMESTAMP"}
SPARK_WORDS = frozenset({"string", "tinyint", "smallint", "int", "integer", "bigint", "long",
                         "short", "byte", "float", "double", "real", "decimal", "dec", "numeric",
                         "boolean", "date", "timestamp", "timestamp_ntz", "binary"})
FORMATS = ("json", "csv", "parquet")
# A producer's SQL rule that counts the rows breaking it, on its own table alone (no join, no
# subquery): its condition, negated, is a row rule.
_COUNT_WHERE = re.compile(r"^\s*SELECT\s+COUNT\(\s*\*\s*\)\s+FROM\s+[\w.`${}]+\s+WHERE\s+"
                          r"((?:(?!\b(?:SELECT|JOIN|EXISTS)\b).)+?)\s*;?\s*$",
                          re.IGNORECASE | re.DOTALL)
DEDUP_DELAY = "1 day"


@dataclass(frozen=True)
class ContractColumn:
    """A column of a contract, as a feed's specs take it."""

    name: str
    type: str  # Spark SQL, upper case (a DDL's)
    required: bool
    description: str


@dataclass(frozen=True)
class ContractScaffold:
    """The bronze and silver specs of a new feed from a producer's contract."""

    table: str
    contract: Mapping[str, Any]
    origin: str  # the command that writes them, for the files' first line

    @property
    def obj(self) -> Mapping[str, Any]:
        schema: Mapping[str, Any] = (self.contract.get("schema") or [{}])[0]
        return schema

    def columns(self) -> list[ContractColumn]:
        out = []
        for p in self.obj.get("properties") or []:
            name = str(p.get("name") or "")
            if not IDENTIFIER.match(name):
                raise ContractError(f"expected column names of letters, digits and _ in the "
                                    f"contract, found {name!r}")
            out.append(ContractColumn(name, _ddl_type(p), bool(p.get("required")),
                                      str(p.get("description") or "")))
        if not out:
            raise ContractError("expected the contract's first table to have properties (its "
                                "columns), found none")
        return out

    @property
    def keys(self) -> list[str]:
        return contract_key(self.obj)

    @property
    def format(self) -> str:
        for server in self.contract.get("servers") or []:
            fmt = str(server.get("format") or "").lower()
            if fmt in FORMATS:
                return fmt
        return "json"

    def event_time(self) -> str | None:
        """The column a latency SLA names, else the first timestamp column (one named like
        an event time first)."""
        times = [c.name for c in self.columns() if c.type == "TIMESTAMP"]
        for sla in self.contract.get("slaProperties") or []:
            element = str(sla.get("element") or "").split(",")[0].split(".")[-1].strip()
            if element in times:
                return element
        named = [n for n in times if re.search(r"event|_at$|_time$|^ts$", n, re.IGNORECASE)]
        return next(iter(named or times), None)

    def _header(self) -> str:
        c = self.contract
        return (f"# Written by {self.origin}\n"
                f"# from the data contract {c.get('id')} version {c.get('version')}. Read it, "
                "change what the contract could not tell, then commit it.\n")

    def specs(self) -> dict[Layer, str]:
        return {Layer.BRONZE: self.bronze(), Layer.SILVER: self.silver()}

    def bronze(self) -> str:
        ddl = ", ".join(f"{c.name} {c.type}" for c in self.columns())
        about = self.obj.get("description") or (self.contract.get("description") or {}).get(
            "purpose") or f"{self.table} as the producer delivers it"
        return (self._header()
                + f"description: {json.dumps(str(about))}\n"
                "source:\n"
                f"  path: landing/{self.table}   # where files land, under the lake's root\n"
                f"  format: {self.format}\n"
                "  # The contract's columns; bronze reads with this schema. A value that does\n"
                "  # not fit its type is kept in _rescued_data, its row kept.\n"
                f"  schema: {json.dumps(ddl)}\n")

    def silver(self) -> str:
        columns, keys, time = self.columns(), self.keys, self.event_time()
        lines = [self._header().rstrip("\n"),
                 "description: " + json.dumps(
                     f"{self.table.replace('_', ' ').capitalize()}, typed and checked as "
                     f"contract {self.contract.get('id')} {self.contract.get('version')} says."),
                 f"source: {self.table}   # bronze.{self.table}",
                 "columns:"]
        lines += [f"  - {{name: {c.name}, type: {_flow(c.type.lower())}}}"
                  + (f"   # {_comment(c.description)}" if c.description else "")
                  for c in columns]
        if time:
            lines.append(f"event_time: {time}")
        expectations, checks, untranslated = self._rules(columns, keys)
        if expectations:
            lines.append("expectations:   # action: warn | drop | quarantine | fail")
            lines += [f"  - {{name: {n}, rule: {json.dumps(r)}, action: {a}}}"
                      for n, r, a in expectations]
        if keys and time:
            lines.append(f"dedup: {{keys: [{', '.join(keys)}], delay: "
                         f"{json.dumps(DEDUP_DELAY)}}}   # the contract's key")
        elif keys and not any(c.get("unique") == keys for c in checks):
            checks.insert(0, {"unique": keys, "action": "quarantine"})
        checks += self._freshness(time)
        if checks:
            lines.append("checks:")
            lines += ["  - " + yaml.safe_dump(c, default_flow_style=True, sort_keys=False,
                                              width=10_000).strip() for c in checks]
        lines += [f"# not translated (no spec form): {_comment(text)}" for text in untranslated]
        return "\n".join(lines) + "\n"

    def _rules(self, columns: Sequence[ContractColumn], keys: Sequence[str]
               ) -> tuple[list[tuple[str, str, str]], list[dict[str, Any]], list[str]]:
        """(name, rule, action) of each row rule, the table checks, and what has no form."""
        rules: list[tuple[str, str, str]] = []
        checks: list[dict[str, Any]] = []
        untranslated: list[str] = []
        required = [c.name for c in columns if c.required or c.name in keys]
        if required:
            rules.append(("has_" + "_and_".join(required)[:100],
                          " AND ".join(f"{n} IS NOT NULL" for n in required), "quarantine"))
        scoped = [(None, r) for r in self.obj.get("quality") or []] + [
            (p.get("name"), r) for p in self.obj.get("properties") or []
            for r in p.get("quality") or []]
        for column, rule in scoped:
            name = _rule_name(rule, column, len(rules) + len(checks))
            kept = {p.get("property"): p.get("value") for p in rule.get("customProperties")
                    or []}
            if isinstance(kept.get(RULE), dict):
                value = kept[RULE]
                rules.append((str(value.get("name", name)), str(value["rule"]),
                              str(value.get("action", "quarantine"))))
            elif isinstance(kept.get(CHECK), dict):
                if "freshness" not in kept[CHECK]:
                    checks.append(dict(kept[CHECK]))
            elif (rule.get("metric") or rule.get("rule")) in ("nullValues", "missingValues") \
                    and column and rule.get("mustBe") == 0:
                rules.append((name, f"{column} IS NOT NULL", "quarantine"))
            elif rule.get("metric") == "invalidValues" and column and rule.get("mustBe") == 0 \
                    and (rule.get("arguments") or {}).get("validValues"):
                values = ", ".join(_sql_literal(v) for v in rule["arguments"]["validValues"])
                rules.append((name, f"{column} IN ({values})", "quarantine"))
            elif rule.get("type") == "sql" and rule.get("mustBe") == 0 and \
                    (where := _COUNT_WHERE.match(str(rule.get("query") or ""))):
                rules.append((name, f"coalesce(NOT ({where.group(1)}), true)", "quarantine"))
            elif rule.get("metric") == "duplicateValues" and rule.get("mustBe") == 0:
                cols = (rule.get("arguments") or {}).get("properties") or ([column] if column
                                                                          else [])
                if cols:
                    checks.append({"unique": list(cols), "action": "quarantine", "name": name})
            else:
                said = rule.get("description") or rule.get("query") or json.dumps(rule,
                                                                                   default=str)
                untranslated.append(f"{name}: {said}")
        return rules, checks, untranslated

    def _freshness(self, time: str | None) -> list[dict[str, Any]]:
        checks = []
        for sla in self.contract.get("slaProperties") or []:
            if str(sla.get("property", "")).lower() not in (LATENCY, "freshness"):
                continue
            seconds = latency_seconds(sla)
            if seconds is None:
                continue
            check = {"freshness": _interval_text(seconds),
                     "by": "event_time" if time else "commit", "action": "warn"}
            for prop in sla.get("customProperties") or []:
                if prop.get("property") == CHECK and isinstance(prop.get("value"), dict):
                    check = dict(prop["value"])
            checks.append(check)
        return checks[:1]


def _ddl_type(prop: Mapping[str, Any]) -> str:
    physical = normal_type(str(prop.get("physicalType") or ""))
    word = re.match(r"[a-z_]+", physical)
    if word and word.group(0) in SPARK_WORDS:
        return spark_alias(physical).upper().replace("TIMESTAMP_LTZ", "TIMESTAMP")
    if word and word.group(0) in ("varchar", "char", "text"):
        return "STRING"
    logical = str(prop.get("logicalType") or "string").lower()
    options = prop.get("logicalTypeOptions") or {}
    if logical == "number" and options.get("precision"):
        return f"DECIMAL({int(options['precision'])},{int(options.get('scale') or 0)})"
    return FROM_LOGICAL.get(logical, "STRING")


def _rule_name(rule: Mapping[str, Any], column: Any, i: int) -> str:
    text = re.sub(r"[^A-Za-z0-9_]+", "_", str(rule.get("name") or rule.get("id") or "")).strip(
        "_")
    if text and IDENTIFIER.match(text):
        return text
    return f"{column}_rule_{i}" if column else f"rule_{i}"


def _sql_literal(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).upper()
    if isinstance(value, int | float):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def _flow(text: str) -> str:
    """``text`` as a scalar inside a YAML ``{...}``: plain, or quoted when it holds a comma
    or another character YAML would read otherwise."""
    return json.dumps(text) if re.search(r"[,:{}\[\]#&*!|>'\"%@`]", text) else text


def _comment(text: str) -> str:
    return " ".join(text.split())


def _interval_text(seconds: int) -> str:
    for unit, size in (("day", 86_400), ("hour", 3600), ("minute", 60), ("second", 1)):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} seconds"


def table_name_of(contract: Mapping[str, Any]) -> str:
    """A feed's table name from its contract's first table (its last dotted part)."""
    obj = (contract.get("schema") or [{}])[0]
    raw = str(obj.get("physicalName") or obj.get("name") or "").split(".")[-1]
    name = re.sub(r"[^A-Za-z0-9_]+", "_", raw).strip("_").lower()
    if not IDENTIFIER.match(name):
        raise ContractError(f"expected a table name in the contract's schema[0].name, found "
                            f"{raw!r}: give one with --table")
    return name
