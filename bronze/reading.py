"""Reading a feed's files by column name: one reader per format, each giving the same columns,
whatever the order, the set or the types of the columns in a file.

Every read is strict: Spark's ``ignoreCorruptFiles`` is never set, so a file Spark cannot read
to its end (a truncated gzip or bzip2 stream, a corrupt parquet row group, a file deleted or
made unreadable after it was listed) fails the read, with Spark naming the file, instead of
yielding the rows read before the fault. A JSON line or CSV field that is not valid UTF-8 fails
the read the same way (:data:`NOT_UTF8`): Spark's readers would otherwise keep the bytes or
replace them, and a file in another encoding would half-parse.

Columns of every reader: the schema's, the rescued column, ``_corrupt_record`` (the raw text of
a malformed record), ``_corrupt_reason`` (why, when it is not that the record does not parse),
:data:`DROPPED` (the names of new columns a record held that ``schema_evolution: none``
ignores) and Spark's hidden ``_metadata`` (the source file). How a file's values are matched to
the schema, typed, and what does not fit rescued, is :mod:`bronze.conform`'s one mechanism:

- **JSON Lines**: each line must hold exactly one JSON object, strict RFC 8259 unless the
  feed's options turn a leniency on (:data:`LENIENCIES`); keys are matched by name.
- **CSV**: each file's header is read first (its first bytes, :func:`csv_header`) and its
  columns matched to the schema by name, case-insensitively; files are read in groups of one
  header, every field as text, then typed. Only ``header: false`` reads by position. RFC 4180
  by default: ``""`` is an empty string, an unquoted empty field is null, a line break inside
  quotes is kept byte for byte (the file's own line ending is detected).
- **Parquet**: the files' own schemas (merged; per file when they conflict), matched by name.

A text record (a JSON line, a CSV row) larger than ``source.max_record_bytes`` is not parsed:
it goes to the quarantine with the reason and the first :data:`RAW_PREFIX` characters of its
text, cut before any other expression sees it. Spark's text reader holds such a line three
times before that (Hadoop's line buffer, the row, the row with the file's ``_metadata``), each
in an array twice the size at most: a JSON line of 200 MB needs a driver of 4 GB in local mode,
where a 2 GB one fails with OutOfMemoryError in the reader (``bench/fuzz.py --data``).
"""

from __future__ import annotations

import bz2
import csv
import io
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StringType, StructField, StructType

from bronze.conform import (
    CORRUPT,
    CORRUPT_REASON,
    DROPPED,
    Conformer,
    column_ref,
    json_type,
    schema_change_error,
)
from bronze.malformed import file_reason, json_reason
from bronze.spec import BronzeTableSpec, SchemaEvolution, SourceFormat
from framework.errors import StorageError
from framework.formats import CSV_DEFAULTS, STRICT_JSON
from framework.storage import Storage, from_uri

__all__ = ["CORRUPT", "CORRUPT_REASON", "CSV_DEFAULTS", "DROPPED", "NOT_UTF8", "RAW_PREFIX",
           "FeedReader", "JsonLines", "Records", "lenient", "literal", "malformed_reason",
           "one_json_value", "parse_json_lines"]

# A feed's options may turn one of these on explicitly (strict JSON otherwise: STRICT_JSON).
LENIENCIES = ("allowComments", "allowSingleQuotes", "allowUnquotedFieldNames",
              "allowNumericLeadingZeros", "allowNonNumericNumbers",
              "allowBackslashEscapingAnyCharacter", "allowUnquotedControlChars")
RAW_PREFIX = 4096  # characters of an oversized record's text kept in the quarantine
# The message a read fails with on text that is not UTF-8; the file's path follows it.
NOT_UTF8 = "[medallion] not UTF-8 text in file "
REPLACEMENT = "\ufffd"  # what a decoder puts for bytes that are not UTF-8
GLOB = re.compile(r"[\\*?\[\]{}]")  # what Hadoop's glob patterns give a meaning to
HEADER_BYTES = 64 * 1024  # bytes read from a CSV file to find its header (more if need be)
MAX_HEADER_BYTES = 4 * 1024 * 1024
# Hadoop codecs Python does not decompress here: such a file's header is read through Spark.
SPARK_CODECS = (".deflate", ".lz4", ".snappy", ".zst", ".zstd")
# A JSON file none of whose lines parsed is read whole, up to this size, to say what it holds
# instead (one JSON array...): bronze.malformed.file_reason.
WHOLE_FILE_BYTES = 16 * 1024 * 1024


def literal(path: str) -> str:
    """A file's path as a pattern that matches only itself: Spark expands the paths it is
    given to load as globs, so a name holding ``[x]``, ``{a,b}``, ``*`` or ``?`` would match
    other files, or none."""
    return GLOB.sub(r"\\\g<0>", path)


def _load(reader: Any, files: Sequence[str]) -> DataFrame:
    return reader.load([literal(f) for f in files])


@dataclass
class Records:
    """A batch's records, read by name (:meth:`FeedReader.read`)."""

    frame: DataFrame | None  # None when no file could be read
    failed: dict[str, str] = field(default_factory=dict)  # files not read, with the reason
    notes: dict[str, str] = field(default_factory=dict)  # per file: columns missing or new


class FeedReader:
    """Reads a feed's files as its schema's columns, matched by name; ``storage`` reads CSV
    headers."""

    def __init__(self, spark: SparkSession, spec: BronzeTableSpec, storage: Storage) -> None:
        self.spark, self.spec, self.storage = spark, spec, storage
        self.format = spec.source.format
        self.evolution = spec.source.schema_evolution
        # Per schema read: its conformer, and its JSON lines' expressions (built once).
        self._conformers: dict[tuple[str, tuple[str, ...] | None], Conformer] = {}
        self._json_lines: dict[Conformer, JsonLines] = {}

    def _reader(self) -> Any:
        reader = self.spark.read
        if self.spec.source.path_glob_filter:
            reader = reader.option("pathGlobFilter", self.spec.source.path_glob_filter)
        return reader.option("recursiveFileLookup", self.spec.source.recursive_file_lookup)

    # ------------------------------------------------------------------ new columns
    def new_columns(self, files: Sequence[str], schema: StructType
                    ) -> dict[str, tuple[DataType, str]]:
        """The columns of ``files`` that ``schema`` lacks (matched case-insensitively), with
        their type and the first file holding one."""
        known = {f.name.lower() for f in schema.fields}
        found: dict[str, tuple[DataType, str]] = {}
        if self.format is SourceFormat.CSV:
            for path, (names, _sep) in self._headers(files)[0].items():
                for name in names:
                    if name.lower() not in known and name.lower() not in \
                            {n.lower() for n in found}:
                        found[name] = (StringType(), path)
        elif self.format is SourceFormat.PARQUET:
            for group, paths in self._parquet_groups(files).items():
                for f in group.fields:
                    if f.name.lower() not in known and f.name.lower() not in \
                            {n.lower() for n in found}:
                        found[f.name] = (f.dataType, paths[0])
        else:
            found = self._json_new_keys(files, known)
        return found

    def _json_new_keys(self, files: Sequence[str], known: set[str]
                       ) -> dict[str, tuple[DataType, str]]:
        """A pass over the lines: every key outside the schema, its type the JSON values' own
        (integers BIGINT, other numbers DOUBLE, objects and arrays as JSON text)."""
        lines = _load(self._reader().format("text"), files)
        encoding = self.spec.source.options.get("encoding") or \
            self.spec.source.options.get("charset")
        if not encoding or encoding.replace("-", "").upper() == "UTF8":
            lines = lines.where(_utf8_or_fail(F.is_valid_utf8("value")))
        obj = self.json_object(F.col("value"))
        names = F.array(*[F.lit(n) for n in sorted(known)]) if known else \
            F.array().cast("array<string>")
        pairs = lines.select(F.explode(F.map_filter(
            obj, lambda k, _v: ~F.array_contains(names, F.lower(k)))).alias("key", "value"),
            F.col("_metadata.file_path").alias("file"))
        rows = pairs.groupBy("key").agg(F.expr("schema_of_variant_agg(value)").alias("type"),
                                        F.min("file").alias("file")).collect()
        found: dict[str, tuple[DataType, str]] = {}
        for r in sorted(rows, key=lambda r: r["key"]):
            if r["key"].lower() not in {n.lower() for n in found}:
                found[r["key"]] = (json_type(r["type"]), from_uri(r["file"]))
        return found

    def json_object(self, line: Column) -> Column:
        """The object of a JSON line whose keys are the feed's columns, as a map of variants
        (null for a line that is not an object)."""
        return F.try_variant_get(F.try_parse_json(F.concat(F.lit("["), line, F.lit("]"))),
                                 "$[0]", "map<string,variant>")

    # ------------------------------------------------------------------ malformed records
    def malformed_reason(self) -> Callable[[Column], Column] | None:
        """How the quarantine says why a malformed record is (:func:`malformed_reason`): for
        JSON lines only."""
        if self.format is not SourceFormat.JSON:
            return None
        return malformed_reason(self.spec.source.options)

    def unparsed_file(self, path: str) -> str | None:
        """What a file none of whose records parsed holds, when its whole text is one JSON
        document (one JSON array: not JSON Lines), or None. Only JSON files, of at most
        :data:`WHOLE_FILE_BYTES`, plain, gzip or bzip2, are read (on the driver: such a file
        is rare, and its ledger row says what to fix)."""
        if self.format is not SourceFormat.JSON or path.lower().endswith(SPARK_CODECS):
            return None
        options = self.spec.source.options
        encoding = str(options.get("encoding", options.get("charset", "UTF-8")))
        try:
            data = self.storage.head(path, WHOLE_FILE_BYTES + 1)
            if len(data) <= WHOLE_FILE_BYTES:
                data = _decompress(path, data, WHOLE_FILE_BYTES + 1)
            if len(data) > WHOLE_FILE_BYTES:
                return None
            text = data.decode(encoding, errors="replace")
        except (HeaderError, LookupError, OSError, StorageError):
            return None
        return file_reason(text.removeprefix("\ufeff"))

    # ------------------------------------------------------------------ records
    def read(self, files: Sequence[str], schema: StructType,
             required: Sequence[str] | None = None) -> Records:
        """``files`` as ``schema``'s columns (see the module's text); a file lacking one of
        ``required`` (by default all) is noted."""
        key = (schema.json(), None if required is None else tuple(required))
        conformer = self._conformers.get(key)
        if conformer is None:
            conformer = self._conformers[key] = Conformer(
                schema, self.spec.rescued_column, self.evolution, self.spec.source.options,
                required)
        if self.format is SourceFormat.CSV:
            return self._csv(files, conformer)
        if self.format is SourceFormat.PARQUET:
            return self._parquet(files, conformer)
        raw = _load(self._reader().format("text"), files)
        # Blank lines (JSON's whitespace: space, tab, carriage return) are dropped; one over 1 KB
        # is kept (trim would copy it), so one of whitespace only is malformed and quarantined.
        raw = raw.where((F.octet_length("value") > 1024)
                        | (F.btrim("value", F.lit(" \t\r")) != ""))
        # A byte order mark opens a file (or each of files joined): not part of the record.
        raw = raw.withColumn("value", F.when(
            F.startswith("value", F.lit("\ufeff")) & (F.length("value") > 1),
            F.expr("substr(value, 2)")).otherwise(F.col("value")))
        options = dict(self.spec.source.options)
        encoding = options.pop("encoding", None) or options.pop("charset", None)
        if encoding and encoding.replace("-", "").upper() != "UTF8":
            # Spark's text reader keeps a line's bytes as they are: decoded here
            raw = raw.withColumn("value", F.decode(F.col("value").cast("binary"), encoding))
        else:
            raw = raw.where(_utf8_or_fail(F.is_valid_utf8("value")))
        return Records(self.parse_lines(raw, conformer, options))

    def parse_lines(self, lines: DataFrame, conformer: Conformer, options: Mapping[str, str]
                    ) -> DataFrame:
        """A batch's JSON lines (``value``, ``_metadata``) as the reader's columns."""
        parser = self._json_lines.get(conformer)
        if parser is None:
            parser = self._json_lines[conformer] = JsonLines(
                conformer, options, self.spec.source.max_record_bytes, ["_metadata"])
        return parser(lines)

    def _csv(self, files: Sequence[str], conformer: Conformer) -> Records:
        options = {**CSV_DEFAULTS, **self.spec.source.options}
        header = str(options["header"]).lower() == "true"
        records = Records(None)
        groups: dict[tuple[tuple[str, ...], str], list[str]] = {}
        if header:
            headers, records.failed = self._headers(files)
            for path, (names, sep) in headers.items():
                problem = conformer.header_problem(names)
                if problem:
                    records.failed[path] = problem
                    continue
                groups.setdefault((names, sep), []).append(path)
                note = conformer.note(names)
                if note:
                    records.notes[path] = note
        elif files:  # by position, in the schema's order
            groups[(tuple(conformer.schema.names), "")] = list(files)
        frames = []
        for (names, sep), paths in groups.items():
            text = StructType([StructField(n, StringType()) for n in names]
                              + [StructField(CORRUPT, StringType())])
            read = {**options, "mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
            if sep and "lineSep" not in self.spec.source.options:
                read["lineSep"] = sep
            df = _load(self._reader().format("csv").schema(text).options(**read), paths)
            frames.append(self._csv_rows(df, names, conformer, options))
        records.frame = _union(frames)
        return records

    def _csv_rows(self, df: DataFrame, names: Sequence[str], conformer: Conformer,
                  options: Mapping[str, str]) -> DataFrame:
        encoding = str(options.get("encoding", options.get("charset", "UTF-8")))
        texts = [F.col(column_ref(n)) for n in [*names, CORRUPT]]
        if encoding.replace("-", "").upper() == "UTF8":
            df = df.where(_utf8_or_fail(~F.contains(F.concat_ws("", *texts), F.lit(REPLACEMENT))))
        # The row's size: its fields' bytes (or, for a row that does not parse, its text's).
        limit = self.spec.source.max_record_bytes
        size = sum((F.coalesce(F.octet_length(t), F.lit(0)) for t in texts), F.lit(0))
        fits = size <= F.lit(limit)
        row_text = F.coalesce(F.col(CORRUPT), F.concat_ws(",", *texts[:-1]))
        sized = df.select(*[F.when(fits, F.col(column_ref(n))).alias(n) for n in names],
                          F.when(fits, F.col(CORRUPT)).otherwise(
                              F.substring(row_text, 1, RAW_PREFIX)).alias(CORRUPT),
                          too_large(limit, fits, size), "_metadata")
        return conformer.from_columns(sized, {n: StringType() for n in names}, text=True)

    def _headers(self, files: Sequence[str]
                 ) -> tuple[dict[str, tuple[tuple[str, ...], str]], dict[str, str]]:
        """Each file's header names and line ending; the files whose header cannot be read."""
        options = {**CSV_DEFAULTS, **self.spec.source.options}
        headers: dict[str, tuple[tuple[str, ...], str]] = {}
        failed: dict[str, str] = {}
        for path in files:
            try:
                if path.lower().endswith(SPARK_CODECS):  # decompressed by Spark's codecs
                    headers[path] = self._first_line(path, options)
                else:
                    headers[path] = csv_header(self.storage, path, options)
            except HeaderError as exc:
                failed[path] = str(exc)
        return headers, failed

    def _first_line(self, path: str, options: Mapping[str, str]
                    ) -> tuple[tuple[str, ...], str]:
        """A compressed file's header, as Spark's text reader gives its first line (its line
        ending is not seen: Spark's own is used)."""
        row = _load(self.spark.read.format("text"), [path]).limit(1).collect()
        if not row or not str(row[0]["value"]).strip():
            raise HeaderError("expected a header line (options.header is true), found an "
                              "empty file or an empty first line")
        return header_names(str(row[0]["value"]).removeprefix("\ufeff"), options), ""

    def _parquet_groups(self, files: Sequence[str]) -> dict[StructType, list[str]]:
        """The files by their schema: one group of the files' merged schema, or, when their
        types conflict, one group per schema."""
        if not files:
            return {}
        reader = self._reader().format("parquet").options(**self.spec.source.options)
        try:
            merged = _load(reader.option("mergeSchema", "true"), files).schema
            return {merged: list(files)}
        except Exception:  # columns of one name and two types: read per schema
            groups: dict[StructType, list[str]] = {}
            for f in files:
                groups.setdefault(_load(reader, [f]).schema, []).append(f)
            return groups

    def _parquet(self, files: Sequence[str], conformer: Conformer) -> Records:
        records = Records(None)
        frames = []
        reader = self._reader().format("parquet").options(**self.spec.source.options)
        for group, paths in self._parquet_groups(files).items():
            df = _load(reader.schema(group), paths)
            names = [f.name for f in group.fields]
            note = conformer.note(names)
            for p in paths:
                if note:
                    records.notes[p] = note
            df = df.select(*[F.col(column_ref(n)) for n in names],
                           F.lit(None).cast("string").alias(CORRUPT),
                           F.lit(None).cast("string").alias(CORRUPT_REASON), "_metadata")
            frames.append(conformer.from_columns(df, {f.name: f.dataType for f in group.fields},
                                                 text=False))
        records.frame = _union(frames)
        return records


def _union(frames: Sequence[DataFrame]) -> DataFrame | None:
    if not frames:
        return None
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


class HeaderError(Exception):
    """Raised when a CSV file's header cannot be read (the file is quarantined whole)."""


def csv_header(storage: Storage, path: str, options: Mapping[str, str]
               ) -> tuple[tuple[str, ...], str]:
    """A CSV file's header names (as Python's csv module reads its first record with the
    feed's separator and quote) and its line ending (``\\r\\n`` or ``\\n``), from its first
    bytes; gzip and bzip2 files are decompressed as far as needed."""
    encoding = str(options.get("encoding", options.get("charset", "UTF-8")))
    quote = str(options.get("quote", '"')) or '"'
    size = HEADER_BYTES
    while True:
        data = storage.head(path, size)
        text = _decompress(path, data)
        try:
            decoded = text.decode(encoding, errors="strict")
        except UnicodeDecodeError:
            decoded = text.decode(encoding, errors="ignore")  # cut inside a character
        decoded = decoded.removeprefix("\ufeff")
        end = _record_end(decoded, quote)
        if end is not None or len(data) < size or size >= MAX_HEADER_BYTES:
            break
        size *= 4
    if not decoded.strip():
        raise HeaderError("expected a header line (options.header is true), found an empty "
                          "file or an empty first line")
    line = decoded if end is None else decoded[:end]
    newline = "\r\n" if line.endswith("\r\n") else "\n"
    return header_names(line.rstrip("\r\n"), options), newline


def header_names(line: str, options: Mapping[str, str]) -> tuple[str, ...]:
    """The column names of a CSV header line, read with the feed's separator and quote (an
    empty name is ``_c<position>``, as Spark names it)."""
    sep = str(options.get("sep", options.get("delimiter", ",")))
    quote = str(options.get("quote", '"')) or '"'
    names = next(csv.reader(io.StringIO(line), delimiter=sep[0], quotechar=quote[0]), [])
    return tuple(n if n else f"_c{i}" for i, n in enumerate(names))


def _record_end(text: str, quote: str) -> int | None:
    """Where the first record of ``text`` ends (after its line break), quotes respected."""
    inside = False
    for i, ch in enumerate(text):
        if ch == quote[0]:
            inside = not inside
        elif ch == "\n" and not inside:
            return i + 1
    return None


def _decompress(path: str, data: bytes, limit: int = -1) -> bytes:
    """``data`` decompressed (gzip, bzip2) as far as it goes, at most ``limit`` bytes."""
    name = path.lower()
    try:
        if name.endswith(".gz"):
            return zlib.decompressobj(wbits=47).decompress(data, max(limit, 0))
        if name.endswith(".bz2"):
            return bz2.BZ2Decompressor().decompress(data, limit)
    except (zlib.error, OSError, EOFError) as exc:
        raise HeaderError(f"expected a {name.rsplit('.', 1)[-1]} file, found bytes that do not "
                          f"decompress: {exc}") from exc
    return data


def parse_json_lines(raw: DataFrame, conformer: Conformer, options: Mapping[str, str],
                     max_record_bytes: int, carry: Sequence[str], *,
                     origin: Column | None = None) -> DataFrame:
    """The JSON text of ``raw``'s column ``value`` as the schema's columns (by key), the
    rescued column, ``_corrupt_record`` (the text of a line that is not one JSON object of
    strict JSON, or the first characters of one over ``max_record_bytes``),
    ``_corrupt_reason``, :data:`DROPPED`, and the columns ``carry`` as they are. ``origin``
    names a record in an error (by default its file)."""
    return JsonLines(conformer, options, max_record_bytes, carry, origin=origin)(raw)


class JsonLines:
    """:func:`parse_json_lines` for one schema, its expressions built once, not per batch (each
    build is hundreds of calls into the session)."""

    def __init__(self, conformer: Conformer, options: Mapping[str, str],
                 max_record_bytes: int, carry: Sequence[str], *,
                 origin: Column | None = None) -> None:
        loose = lenient(options)
        parse = {**({} if loose else STRICT_JSON), **options, "mode": "PERMISSIVE",
                 "columnNameOfCorruptRecord": CORRUPT}
        with_corrupt = StructType([*conformer.schema.fields,
                                   StructField(CORRUPT, StringType())])
        # An oversized line is cut to its prefix at once: no later row holds it whole.
        fits = F.octet_length("value") <= F.lit(max_record_bytes)
        self.sized: list[Column | str] = [
            F.when(fits, F.col("value")).alias("value"),
            F.when(~fits, F.substring("value", 1, RAW_PREFIX)).alias("prefix"),
            F.octet_length("value").alias("size"), *carry]
        if loose:  # the options' own dialect; the object as one value per key
            obj = F.from_json("value", "MAP<STRING, VARIANT>", parse)
        else:
            obj = F.try_variant_get(one_json_value(F.col("value")), "$", "map<string,variant>")
        if origin is None:
            origin = F.col("_metadata.file_path")
        self.parsed: list[Column | str] = [
            F.from_json("value", with_corrupt, parse).alias("r"), obj.alias("obj"),
            "value", "prefix", "size", origin.alias("_origin"), *carry]
        corrupt = F.when(F.col("prefix").isNotNull(), F.col("prefix")).when(
            F.col("obj").isNull() | F.col("r").isNull(), F.col("value"))
        oversized = F.col("prefix").isNotNull()
        columns = conformer.from_json_object("r", "obj", corrupt, F.col("value"),
                                             F.col("_origin"))
        self.columns: list[Column | str] = [
            *columns, too_large(max_record_bytes, ~oversized, F.col("size")), *carry]

    def __call__(self, raw: DataFrame) -> DataFrame:
        return raw.select(*self.sized).select(*self.parsed).select(*self.columns)


def lenient(options: Mapping[str, str]) -> bool:
    """Whether a feed's options turn one of JSON's leniencies on (:data:`LENIENCIES`)."""
    return any(str(options.get(k, "")).lower() == "true" for k in LENIENCIES)


def malformed_reason(options: Mapping[str, str]) -> Callable[[Column], Column] | None:
    """How the quarantine says why a JSON record is malformed, from its text: a column of
    :func:`bronze.malformed.json_reason` (a Python UDF), null where the generic reason fits.
    It is applied to the quarantined rows only (:meth:`bronze.batch.BatchSplit.quarantine_rows`,
    after the filter), so a batch without a malformed record never runs it and Spark's parse
    of the good ones is unchanged. None for a feed whose options turn a leniency on: its
    dialect is not strict JSON (``NaN`` may be a number there), which the reasons assume."""
    return None if lenient(options) else _json_reason


def _json_reason(text: Column) -> Column:
    # A plain (pickled) UDF, not Arrow's: the executors' Python needs only the standard library
    # and pyspark (it may lack pyarrow, which Spark 4.2 would otherwise pick when the driver's
    # Python has it).
    return F.udf(json_reason, StringType(), useArrow=False)(text)


def one_json_value(text: Column) -> Column:
    """``text`` parsed as exactly one value of strict JSON (RFC 8259), a variant; null for
    text that is not."""
    # "[" + text + "]" parses as an array of one element. The parser stops at the end of the
    # first value, so text after it is seen only when it does not close the array: text
    # holding "]" is also read as the value of an object ('{"k":' + text + "}"), which a "]"
    # after the value does not close.
    whole = F.try_parse_json(F.concat(F.lit("["), text, F.lit("]")))
    closed = F.try_parse_json(F.concat(F.lit('{"k":'), text, F.lit("}")))
    one = F.try_variant_get(whole, "$[1]", "variant").isNull() & (
        ~F.contains(text, F.lit("]")) | closed.isNotNull())
    return F.when(one, F.try_variant_get(whole, "$[0]", "variant"))


def too_large(limit: int, fits: Column, size: Column) -> Column:
    """The quarantine's reason for a record larger than the maximum (null for the others)."""
    reason = F.format_string(
        f"record too large: %d bytes, expected at most {limit} (source.max_record_bytes); "
        f"_raw holds its first {RAW_PREFIX} characters", size)
    return F.when(~fits, reason).cast("string").alias(CORRUPT_REASON)


def _utf8_or_fail(valid: Column) -> Column:
    """A filter that keeps every row and fails the read on one whose text is not UTF-8,
    naming its file (see :func:`bronze.checks.failing_file`)."""
    message = F.concat(F.lit(NOT_UTF8), F.col("_metadata.file_path"))
    return F.when(valid, F.lit(True)).otherwise(F.raise_error(message).cast("boolean"))


__all__ += ["HeaderError", "SchemaEvolution", "csv_header", "schema_change_error",
            "too_large"]
