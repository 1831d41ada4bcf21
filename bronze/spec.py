"""The bronze table spec: where a feed lands, how to read it, and what happens to its files."""

from __future__ import annotations

import os
import re
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import ClassVar

from pydantic import Field, PositiveInt, model_validator

from bronze.cdc import CdcSpec, cdc_problems, declared_change_columns
from framework.columns import Column, Columns, ddl_columns
from framework.config.model import (
    Inputs,
    Layer,
    ProjectConfig,
    Rebuild,
    RebuildMethod,
    SqlKind,
    SqlText,
    Table,
    TableSpec,
)
from framework.config.types import Identifier, Model, Text
from framework.errors import ConfigError
from framework.formats import FileFormat
from framework.storage import from_uri, local_path


class FileStatus(StrEnum):
    """Where a landing file stands."""

    INGESTED = "ingested"  # its rows are committed; the file is still in landing
    ARCHIVED = "archived"
    DELETED = "deleted"
    FAILED = "failed"  # not ingested (unreadable, or no record in it parsed): see its error
    QUARANTINED = "quarantined"  # a failed file, moved whole to the quarantine folder


def ledger_path(source_file: str) -> str:
    """A ``_source_file`` value as the ledger names the file: as it is, or decoded for a row
    written before ``_source_file`` held the ledger's form: Spark's URI, ``file:/p`` or
    ``s:/p`` (the ledger's form is ``/p`` or ``s:///p``; a URI with an authority,
    ``hdfs://nn/p``, is taken as it is)."""
    return from_uri(source_file) if OLD_URI.match(source_file) else source_file


OLD_URI = re.compile(r"^(file:|[A-Za-z0-9]+:/(?!/))")


# The ingestion columns bronze adds to a feed's rows, as declared (those of
# bronze.batch.METADATA_FIELDS).
INGESTION_COLUMNS = (Column("_source_file", "string"),
                     Column("_file_modification_time", "timestamp"),
                     Column("_file_size", "bigint"), Column("_ingested_at", "timestamp"),
                     Column("_batch_id", "bigint"))


SourceFormat = FileFormat  # the file formats bronze reads (framework.formats: json, csv, parquet)


# Encodings whose line breaks are the byte of "\n", which Spark's line reader splits on.
JSON_ENCODINGS = ("UTF-8", "ISO-8859-1", "US-ASCII")


class SchemaEvolution(StrEnum):
    """What a change of a feed's shape does (Auto Loader's modes and meanings). In every mode
    but ``failOnNewColumns``, a value that does not fit its column's type is rescued: the column
    is null and the value, as written, is in the rescued column."""

    ADD_NEW_COLUMNS = "addNewColumns"  # a new column is added to the table, from its batch on
    RESCUE = "rescue"  # the schema never changes: new columns go to the rescued column
    FAIL_ON_NEW_COLUMNS = "failOnNewColumns"  # the batch fails before anything is written
    NONE = "none"  # new columns are ignored (counted)


class CleanSource(StrEnum):
    """What happens to a landing file once its batch is committed."""

    ARCHIVE = "archive"
    DELETE = "delete"
    OFF = "off"


class Redelivery(StrEnum):
    """What a file landed again under a name already ingested, with another size or
    modification time, does (see :mod:`bronze.deliveries`)."""

    INGEST = "ingest"  # a new delivery: ingested once, under a name of its own
    SKIP = "skip"  # moved whole to the quarantine folder, with a ledger row and a warning


class BronzeSource(Model):
    """The landing zone of a feed and how its files are read."""

    path: Text = Field(description="Landing folder (or glob); relative paths are under the root.")
    format: SourceFormat
    schema_: str | None = Field(
        default=None,
        alias="schema",
        description="DDL of the records, e.g. 'id BIGINT, name STRING'. Write it with "
        "'medallion infer-schema'; it is never inferred at run time.",
    )
    options: dict[str, Text] = Field(default_factory=dict)
    schema_evolution: SchemaEvolution = Field(
        default=SchemaEvolution.RESCUE,
        description="What a new column or a value of another type does: addNewColumns, "
        "rescue (the default), failOnNewColumns or none.")
    recursive_file_lookup: bool = True
    path_glob_filter: Text | None = None
    max_files_per_trigger: PositiveInt | None = None
    max_bytes_per_trigger: PositiveInt | None = None
    max_record_bytes: PositiveInt = Field(
        default=16 * 1024 * 1024,
        description="A JSON line or CSV row larger than this (bytes of text) is not parsed: it "
        "goes to the quarantine with the reason and the first 4,096 characters of its text.")
    clean_source: CleanSource = CleanSource.ARCHIVE
    redelivery: Redelivery = Field(
        default=Redelivery.INGEST,
        description="A file landed again under a name already ingested, with another size or "
        "time: ingest (the default: renamed to a name of its own and ingested once) or skip "
        "(moved to the quarantine folder, with a ledger row).")
    archive_dir: Text | None = None
    quarantine_dir: Text | None = None

    @model_validator(mode="after")
    def _json_encoding(self) -> BronzeSource:
        encoding = self.options.get("encoding") or self.options.get("charset")
        if self.format is SourceFormat.JSON and encoding and \
                encoding.replace("_", "-").upper() not in JSON_ENCODINGS:
            raise ValueError(f"expected options.encoding of a JSON Lines feed among "
                             f"{', '.join(JSON_ENCODINGS)}, found {encoding!r}")
        return self

    @model_validator(mode="after")
    def _one_trigger_limit(self) -> BronzeSource:
        if self.max_files_per_trigger and self.max_bytes_per_trigger:
            raise ValueError(
                "expected at most one of max_files_per_trigger and max_bytes_per_trigger "
                "(Spark refuses both), found both"
            )
        return self


class BronzeTableSpec(TableSpec):
    """A feed's bronze table: files from ``source`` appended exactly once, nothing lost."""

    layer: ClassVar[Layer] = Layer.BRONZE

    source: BronzeSource
    rescued_column: Identifier | None = "_rescued_data"
    cdc: CdcSpec | None = Field(
        default=None, description="The records are change events: 'debezium', or "
        "{format: debezium, sequence: [source.lsn]} (see bronze.cdc).")

    def backlog_path(self, table: Table) -> str | None:
        return self.landing(table)

    def rebuild(self, table: Table) -> Rebuild:
        """Its table and quarantine emptied, its checkpoint and ledger kept: the batches of
        the ledger read again from their files (:mod:`bronze.replay`)."""
        return Rebuild(RebuildMethod.REREAD, (table.location,
                                              table.companion_location("quarantine")))

    def landing(self, table: Table) -> str:
        return table.env.resolve(self.source.path)

    def landing_folder(self, table: Table) -> str:
        """The folder the landing path lies in: the path itself, or for a glob the part
        before its first component with a wildcard."""
        parts = self.landing(table).split("/")
        wild = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[{")),
                    len(parts))
        return "/".join(parts[:wild])

    def advise(self, table: Table, project: ProjectConfig) -> list[str]:
        folder = self.landing_folder(table)
        if "://" in folder or os.path.isdir(folder):  # remote stores are checked at run time
            return []
        return [f"{table.full_name}: the landing folder {folder} does not exist yet; "
                "'medallion run' fails until it does ('medallion init' creates it)"]

    def folders(self, table: Table) -> list[str]:
        """Landing, quarantine and (when files are archived) archive."""
        archive = [self.archive_dir(table)] if self.source.clean_source is CleanSource.ARCHIVE \
            else []
        return [self.landing_folder(table), self.quarantine_dir(table), *archive]

    def archive_dir(self, table: Table) -> str:
        return table.env.resolve(self.source.archive_dir or f"archive/{self.name}")

    def quarantine_dir(self, table: Table) -> str:
        return table.env.resolve(self.source.quarantine_dir or f"_quarantine/files/{self.name}")

    def sql_texts(self) -> list[SqlText]:
        schema = self.source.schema_
        return [*([SqlText("source.schema", SqlKind.SCHEMA, schema)] if schema else []),
                *(self.cdc.sql_texts() if self.cdc else [])]

    def declared_columns(self, table: Table, inputs: Inputs) -> Columns | None:
        """The DDL's columns, then the change columns (``cdc``), the rescued column and the
        ingestion columns, as :func:`bronze.batch.bronze_schema` makes them; None without a
        DDL this reading understands."""
        records = ddl_columns(self.source.schema_) if self.source.schema_ else None
        if records is None:
            return None
        rescued = [Column(self.rescued_column, "string")] if self.rescued_column else []
        return Columns(table.full_name, (*records, *declared_change_columns(self.cdc),
                                         *rescued, *INGESTION_COLUMNS))

    def check(self, table: Table) -> list[ConfigError]:
        problems = cdc_problems(self.cdc, json_feed=self.source.format is SourceFormat.JSON,
                                found_format=self.source.format.value,
                                schema=self.source.schema_, rescued_column=self.rescued_column)
        landing = self.landing(table)
        folders = {"source.quarantine_dir": self.quarantine_dir(table)}
        if self.source.clean_source is CleanSource.ARCHIVE:
            folders["source.archive_dir"] = self.archive_dir(table)
        for key, folder in folders.items():
            reason = overlap_reason(landing, folder)
            if reason:
                problems.append(ConfigError(reason, key=key))
        return problems


def overlap_reason(source_pattern: str, folder: str) -> str | None:
    """Why files moved to ``folder`` could be read again from ``source_pattern``, if so. A
    moved file keeps its full path below ``folder`` (Spark's archive layout): inside the source
    pattern, the file stream source would list it as new, so Spark refuses such an archive
    folder when the query starts; this says so at validation time. Spark also requires the
    folder to be at least two levels deep."""
    src = [p for p in local_path(source_pattern).split("/") if p]
    dst = [p for p in local_path(folder).split("/") if p]
    src_scheme = source_pattern.split("://")[0] if "://" in source_pattern else ""
    dst_scheme = folder.split("://")[0] if "://" in folder else ""
    if src_scheme != dst_scheme:
        return (
            f"expected {folder!r} on the same file system as the source {source_pattern!r} "
            "(files are moved by rename), found another"
        )
    if len(dst) < 2:
        return f"expected a folder at least two levels below the root, found {folder!r}"
    if len(dst) >= len(src) and all(fnmatchcase(d, s) for d, s in zip(dst, src, strict=False)):
        return (
            f"expected a folder outside the source pattern {source_pattern!r}, found "
            f"{folder!r} inside it: moved files would be picked up again as new input"
        )
    if len(src) > len(dst) and all(fnmatchcase(s, d) for s, d in zip(src, dst, strict=False)):
        return (
            f"expected a folder that does not contain the source {source_pattern!r}, found "
            f"{folder!r} around it"
        )
    return None
