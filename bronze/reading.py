"""Reading a feed's files: one reader per format, for Spark's file stream source (a micro-batch)
and for a batch read of named files (a micro-batch read again without a file that failed).

Every read is strict: Spark's ``ignoreCorruptFiles`` is never set, so a file Spark cannot read
to its end (a truncated gzip or bzip2 stream, a corrupt parquet row group, a file deleted or
made unreadable after it was listed) fails the read, with Spark naming the file, instead of
yielding the rows read before the fault. A JSON line or CSV field that is not valid UTF-8 fails
the read the same way (:data:`NOT_UTF8`): Spark's readers would otherwise keep the bytes or
replace them, and a file in another encoding would half-parse.

Columns: the schema's, the rescued column (keys outside the schema), ``_corrupt_record`` (the
raw text of a malformed record), ``_corrupt_reason`` (why, when it is not that the record does
not parse) and Spark's hidden ``_metadata`` (the source file).

A text record (a JSON line, a CSV row) larger than ``source.max_record_bytes`` is not parsed:
it goes to the quarantine with the reason and the first :data:`RAW_PREFIX` characters of its
text, cut before any other expression sees it. Spark's text reader holds such a line three
times before that (Hadoop's line buffer, the row, the row with the file's ``_metadata``), each
in an array twice the size at most: a JSON line of 200 MB needs a driver of 4 GB in local mode,
where a 2 GB one fails with OutOfMemoryError in the reader (``bench/fuzz.py --data``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from bronze.spec import BronzeTableSpec, SourceFormat

CORRUPT = "_corrupt_record"
CORRUPT_REASON = "_corrupt_reason"
# RFC 4180, with a header: a quoted field may hold a line break, and a quote inside one is
# doubled (Spark's defaults cut such a row in two and keep the doubled quotes).
CSV_DEFAULTS = {"header": "true", "multiLine": "true", "escape": '"'}
RAW_PREFIX = 4096  # characters of an oversized record's text kept in the quarantine
# The message a read fails with on text that is not UTF-8; the file's path follows it.
NOT_UTF8 = "[medallion] not UTF-8 text in file "
REPLACEMENT = "\ufffd"  # what a decoder puts for bytes that are not UTF-8
GLOB = re.compile(r"[\\*?\[\]{}]")  # what Hadoop's glob patterns give a meaning to

Reader = Any  # a DataStreamReader or a DataFrameReader: format, schema, option(s), load
Source = str | Sequence[str]  # the landing path (a stream) or the files to read (a batch)


def read_records(spec: BronzeTableSpec, reader: Reader, source: Source,
                 schema: StructType) -> DataFrame:
    """The records of ``source`` in the feed's format: the schema's columns, the rescued
    column, ``_corrupt_record`` and ``_metadata``."""
    if spec.source.path_glob_filter:
        reader = reader.option("pathGlobFilter", spec.source.path_glob_filter)
    reader = reader.option("recursiveFileLookup", spec.source.recursive_file_lookup)
    return READERS[spec.source.format](spec, reader, source, schema)


def _load(reader: Reader, source: Source) -> DataFrame:
    return reader.load(source if isinstance(source, str) else [literal(f) for f in source])


def literal(path: str) -> str:
    """A file's path as a pattern that matches only itself: Spark expands the paths it is
    given to load as globs, so a name holding ``[x]``, ``{a,b}``, ``*`` or ``?`` would match
    other files, or none."""
    return GLOB.sub(r"\\\g<0>", path)


def _text_json(spec: BronzeTableSpec, reader: Reader, source: Source,
               schema: StructType) -> DataFrame:
    """JSON Lines read as text and parsed with from_json, so the raw line is kept for the
    quarantine and keys outside the schema can be rescued (Spark's reader drops them)."""
    # (a line over 1 KB is not taken for blank: trim would copy it; one of spaces only is
    # malformed, and quarantined)
    raw = _load(reader.format("text"), source).where(
        (F.octet_length("value") > 1024) | (F.trim("value") != ""))
    raw = raw.where(_utf8_or_fail(F.is_valid_utf8("value")))
    return parse_json_lines(raw, schema, spec.source.options, spec.source.max_record_bytes,
                            spec.rescued_column, ["_metadata"])


def parse_json_lines(raw: DataFrame, schema: StructType, options: Mapping[str, str],
                     max_record_bytes: int, rescued_column: str | None,
                     carry: Sequence[str]) -> DataFrame:
    """The JSON text of ``raw``'s column ``value`` parsed against ``schema``: its columns,
    the rescued column (if named), ``_corrupt_record`` (the text of a record that does not
    parse, or the first characters of one over ``max_record_bytes``), ``_corrupt_reason``, and
    the columns ``carry`` as they are."""
    with_corrupt = StructType([*schema.fields, StructField(CORRUPT, StringType())])
    parse = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, **options}
    # An oversized line is cut to its prefix at once: no later row holds it whole.
    fits = F.octet_length("value") <= F.lit(max_record_bytes)
    sized = raw.select(F.when(fits, F.col("value")).alias("value"),
                       F.when(~fits, F.substring("value", 1, RAW_PREFIX)).alias("prefix"),
                       F.octet_length("value").alias("size"), *carry)
    parsed = sized.select(F.from_json("value", with_corrupt, parse).alias("r"), "value",
                          "prefix", "size", *carry)
    # A line that is not a JSON object parses to null: quarantine it too.
    corrupt = F.when(F.col("prefix").isNotNull(), F.col("prefix")).when(
        F.col("r").isNull(), F.col("value")).otherwise(F.col(f"r.{CORRUPT}"))
    columns: list[Column] = [F.col(f"r.{f.name}").alias(f.name) for f in schema.fields]
    if rescued_column:
        columns.append(F.when(F.col("value").isNotNull(), rescued_keys(schema))
                       .alias(rescued_column))
    oversized = F.col("prefix").isNotNull()
    return parsed.select(*columns, corrupt.alias(CORRUPT),
                         too_large(max_record_bytes, ~oversized, F.col("size")), *carry)


def too_large(limit: int, fits: Column, size: Column) -> Column:
    """The quarantine's reason for a record larger than the maximum (null for the others)."""
    reason = F.format_string(
        f"record too large: %d bytes, expected at most {limit} (source.max_record_bytes); "
        f"_raw holds its first {RAW_PREFIX} characters", size)
    return F.when(~fits, reason).cast("string").alias(CORRUPT_REASON)


def rescued_keys(schema: StructType) -> Column:
    """Top-level keys not in the schema, as a JSON object (as Auto Loader's rescued column).

    Computed next to the parsed record ``r``. A line with no more keys than it has non-null
    fields of the schema holds no other key (each such field takes a key of its own), so most
    lines skip the set difference of their keys with the schema's, a hash set built per line.
    """
    keys = F.json_object_keys("value")
    present = sum((F.col(f"r.{f.name}").isNotNull().cast("int") for f in schema.fields),
                  F.lit(0))
    known = F.array(*[F.lit(f.name) for f in schema.fields])
    extra = F.array_except(keys, known)
    as_map = F.from_json("value", "MAP<STRING, STRING>")
    kept = F.map_filter(as_map, lambda k, _v: ~F.array_contains(known, k))
    return F.when(F.size(keys) > present, F.when(F.size(extra) > 0, F.to_json(kept)))


def _csv(spec: BronzeTableSpec, reader: Reader, source: Source,
         schema: StructType) -> DataFrame:
    """CSV (RFC 4180 unless ``source.options`` say otherwise) with a corrupt-record column: a
    row with too many or too few fields, or a value that does not fit its type, is malformed
    and goes to the quarantine, not dropped. In UTF-8 (the default encoding) a field holding
    the replacement character came from bytes that are not UTF-8: the read fails."""
    with_corrupt = StructType([*schema.fields, StructField(CORRUPT, StringType())])
    options = {
        **CSV_DEFAULTS,
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": CORRUPT,
        **spec.source.options,
    }
    df = _load(reader.format("csv").schema(with_corrupt).options(**options), source)
    encoding = str(options.get("encoding", options.get("charset", "UTF-8")))
    texts = [F.col(f.name) for f in with_corrupt.fields if isinstance(f.dataType, StringType)]
    if encoding.replace("-", "").upper() == "UTF8" and texts:
        df = df.where(_utf8_or_fail(~F.contains(F.concat_ws("", *texts), F.lit(REPLACEMENT))))
    # The row's size: its text fields' bytes (a field of another type is short, or the row
    # does not parse and its text is in the corrupt-record column).
    size = sum((F.coalesce(F.octet_length(t), F.lit(0)) for t in texts), F.lit(0))
    fits = size <= F.lit(spec.source.max_record_bytes)
    row_text = F.coalesce(F.col(CORRUPT), F.concat_ws(",", *texts))
    corrupt = F.when(fits, F.col(CORRUPT)).otherwise(F.substring(row_text, 1, RAW_PREFIX))
    columns = [F.when(fits, F.col(f.name)).alias(f.name) for f in schema.fields]
    if spec.rescued_column:
        columns.append(F.lit(None).cast("string").alias(spec.rescued_column))
    return df.select(*columns, corrupt.alias(CORRUPT),
                     too_large(spec.source.max_record_bytes, fits, size), "_metadata")


def _parquet(spec: BronzeTableSpec, reader: Reader, source: Source,
             schema: StructType) -> DataFrame:
    loaded = _load(reader.format("parquet").schema(schema).options(**spec.source.options),
                   source)
    columns = [F.col(f.name) for f in schema.fields]
    if spec.rescued_column:
        columns.append(F.lit(None).cast("string").alias(spec.rescued_column))
    return loaded.select(*columns, F.lit(None).cast("string").alias(CORRUPT),
                         F.lit(None).cast("string").alias(CORRUPT_REASON), "_metadata")


def _utf8_or_fail(valid: Column) -> Column:
    """A filter that keeps every row and fails the read on one whose text is not UTF-8,
    naming its file (see :func:`bronze.checks.failing_file`)."""
    message = F.concat(F.lit(NOT_UTF8), F.col("_metadata.file_path"))
    return F.when(valid, F.lit(True)).otherwise(F.raise_error(message).cast("boolean"))


READERS: dict[SourceFormat, Callable[[BronzeTableSpec, Reader, Source, StructType],
                                     DataFrame]] = {
    SourceFormat.JSON: _text_json,
    SourceFormat.CSV: _csv,
    SourceFormat.PARQUET: _parquet,
}
