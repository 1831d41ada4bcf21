"""Infer a feed's schema once, from files in its landing zone, and write it into the spec.

Bronze never infers at run time: a schema that changes with the data would change the table
silently. A person runs ``medallion infer-schema <table>``, reads the DDL, and commits it.
"""

from __future__ import annotations

import re
from typing import cast

from pyspark.sql import DataFrame, SparkSession

from bronze.reading import literal
from bronze.spec import BronzeTableSpec
from framework.config.model import Table
from framework.errors import ConfigError, MedallionError
from framework.formats import INFERENCE
from framework.storage import from_uri

_SCHEMA_LINE = re.compile(r"^(?P<indent>\s+)schema\s*:")
_FORMAT_LINE = re.compile(r"^(?P<indent>\s+)format\s*:")


def infer_schema(spark: SparkSession, table: Table, sample_files: int = 50) -> str:
    """DDL for the records of up to ``sample_files`` landing files."""
    spec = cast(BronzeTableSpec, table.spec)
    landing = spec.landing(table)
    options = {"recursiveFileLookup": str(spec.source.recursive_file_lookup).lower(),
               **INFERENCE[spec.source.format], **spec.source.options}

    def reader(paths: str | list[str]) -> DataFrame:
        return spark.read.format(spec.source.format.value).options(**options).load(paths)

    try:
        files = reader(landing).inputFiles()[:sample_files]
        if not files:
            raise MedallionError(f"expected files to infer from in {landing}, found none")
        schema = reader([literal(from_uri(f)) for f in files]).schema
    except MedallionError:
        raise
    except Exception as exc:
        raise MedallionError(f"cannot infer a schema from {landing}: {exc}") from exc
    fields = [f for f in schema.fields if f.name != "_corrupt_record"]
    return ", ".join(f"`{f.name}` {f.dataType.simpleString().upper()}" for f in fields)


def write_schema(table: Table, ddl: str, force: bool = False) -> None:
    """Put ``schema: "<ddl>"`` under ``source:`` in the spec file, keeping its comments."""
    path = table.source_file
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines(keepends=True)
    quoted = '"' + ddl.replace("\\", "\\\\").replace('"', '\\"') + '"'
    for i, line in enumerate(lines):
        m = _SCHEMA_LINE.match(line)
        if m:
            if not force:
                raise ConfigError("expected no schema yet (use --force to replace it), found one",
                                  file=path, key="source.schema")
            lines[i] = f"{m.group('indent')}schema: {quoted}\n"
            break
    else:
        for i, line in enumerate(lines):
            m = _FORMAT_LINE.match(line)
            if m:
                lines.insert(i + 1, f"{m.group('indent')}schema: {quoted}\n")
                break
        else:
            raise ConfigError("expected a 'format:' key under 'source:', found none",
                              file=path, key="source")
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(lines)
