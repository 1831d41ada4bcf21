"""The file formats a feed lands in, and the reader options its files are read with.

Bronze reads a feed's files with these options (:mod:`bronze.reading`), and ``medallion new``
infers a sample's schema with the same ones (:mod:`framework.scaffold`), so that the types it
writes into a spec are those bronze will read.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import PurePath


class FileFormat(StrEnum):
    """File formats bronze reads."""

    JSON = "json"  # JSON Lines, one record per line
    CSV = "csv"
    PARQUET = "parquet"

    @classmethod
    def of_name(cls, name: str) -> FileFormat | None:
        """The format a file's name says (``orders.jsonl.gz``: JSON), None when it says none."""
        suffixes = [s.lower() for s in PurePath(name).suffixes]
        if suffixes and suffixes[-1] in COMPRESSIONS:
            suffixes.pop()
        return EXTENSIONS.get(suffixes[-1]) if suffixes else None


EXTENSIONS = {".json": FileFormat.JSON, ".jsonl": FileFormat.JSON, ".ndjson": FileFormat.JSON,
              ".csv": FileFormat.CSV, ".parquet": FileFormat.PARQUET, ".pq": FileFormat.PARQUET}
COMPRESSIONS = (".gz", ".bz2", ".deflate", ".zst", ".lz4", ".snappy")

# RFC 4180, with a header: a quoted field may hold a line break, a quote inside one is doubled
# (Spark's defaults cut such a row in two and keep the doubled quotes), a quoted empty field is
# an empty string and an unquoted one null (Spark's defaults read both as null: its null text is
# the empty string, so a text no field holds stands in for it).
NULL_TEXT = "\u0000null\u0000"
CSV_DEFAULTS = {"header": "true", "multiLine": "true", "escape": '"', "emptyValue": "",
                "nullValue": NULL_TEXT}
# Strict JSON (RFC 8259); a feed's options may turn one of these on explicitly.
STRICT_JSON = {"allowSingleQuotes": "false", "allowNonNumericNumbers": "false"}
# How a schema is inferred from a feed's files, with bronze's reader options: JSON timestamps as
# Spark finds them, CSV fields typed; what ``medallion new`` and ``medallion infer-schema``
# write into a spec.
INFERENCE = {
    FileFormat.JSON: {**STRICT_JSON, "inferTimestamp": "true"},
    FileFormat.CSV: {**CSV_DEFAULTS, "inferSchema": "true"},
    FileFormat.PARQUET: {},
}
