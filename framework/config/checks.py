"""The table-level checks a spec lists under ``checks:`` (evaluated by :mod:`framework.quality`).

Each item is one check, named by its one kind key:

- ``unique: [columns]``: no two rows of the table share the key (judged per batch);
- ``references: {column, table, key}``: each row's column is a key of another table (a
  dimension), judged per batch against that table as the batch found it;
- ``freshness: "2 hours"``: at the end of a run, the table's newest event time (``by:
  event_time``) or last commit (``by: commit``) is no older than that;
- ``volume: {min: 100, max: 100000}``: the rows a run wrote are within bounds, absolute, or
  relative to the median of the table's recent runs (``recent_runs: 10, low: 0.5, high: 2``).

``action`` says what a breach does: ``warn`` (recorded, logged), ``quarantine`` (a unique
check's rows go to the quarantine) or ``fail`` (a unique check stops the batch before it commits;
a run-level check fails the table's run, which the exit code says).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    Discriminator,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Tag,
    field_validator,
    model_validator,
)

from framework.config.types import Identifier, Model
from framework.eventtime import check_interval

# The prefix of a batch's column that marks the rows breaking a check (dropped before writing).
CHECK_COLUMN = "_check_"
# A table whose rows can be held (action hold) keeps them in its companion ``<table>_held``:
# its columns, then the checks holding a row, since when, and the batch that held it.
HELD = "held"
HELD_BY = "_held_by"
HELD_AT = "_held_at"
HELD_IN = "_held_in"


class CheckKind(StrEnum):
    """What a table-level check looks at."""

    UNIQUE = "unique"
    REFERENCES = "references"
    FRESHNESS = "freshness"
    VOLUME = "volume"


class CheckAction(StrEnum):
    """What a breach of a table-level check does."""

    WARN = "warn"  # recorded and logged; rows written
    QUARANTINE = "quarantine"  # (unique) the rows go to <table>_quarantine with the check's name
    HOLD = "hold"  # (references) kept in <table>_held until the key arrives, then written
    FAIL = "fail"  # (unique) the batch stops before it commits; (others) the run fails


class FreshnessBy(StrEnum):
    """What a freshness check dates the table by."""

    EVENT_TIME = "event_time"  # the newest event time among its rows
    COMMIT = "commit"  # its last commit


class Unique(Model):
    """Rows of the table have distinct values of ``unique`` (a key of one or more columns);
    a row whose key has a NULL is not compared, as in SQL."""

    unique: list[Identifier] = Field(min_length=1)
    action: CheckAction = CheckAction.QUARANTINE
    name: Identifier | None = None

    kind: ClassVar[CheckKind] = CheckKind.UNIQUE

    @model_validator(mode="after")
    def _distinct_columns(self) -> Unique:
        if len(set(self.unique)) != len(self.unique):
            raise ValueError(f"expected distinct columns in unique, found {self.unique}")
        if self.action is CheckAction.HOLD:
            raise ValueError("expected warn, quarantine or fail for unique (a key the table "
                             "has already never stops being there), found 'hold'")
        return self

    @property
    def check_name(self) -> str:
        """The check's name in counts and quarantine rows: ``name``, or ``unique_<columns>``."""
        return self.name or "unique_" + "_".join(self.unique)

    @property
    def column(self) -> str:
        """The batch's column that is true on a row breaking the check."""
        return CHECK_COLUMN + self.check_name


class Reference(Model):
    """A column of the table whose values must be keys of another table (a dimension)."""

    column: Identifier
    table: Identifier
    layer: Literal["bronze", "silver", "gold"] = "silver"
    key: Identifier | None = None  # the other table's column; default: the same name

    @property
    def target_key(self) -> str:
        return self.key or self.column


class References(Model):
    """Each row's ``references.column`` is a key of ``references.table`` (NULL is not
    compared, as in SQL); a row whose key the table lacks breaks it."""

    references: Reference
    action: CheckAction = CheckAction.QUARANTINE
    name: Identifier | None = None
    max_hold: str = "7 days"  # with action hold: a row held longer goes to the quarantine

    kind: ClassVar[CheckKind] = CheckKind.REFERENCES

    @field_validator("max_hold")
    @classmethod
    def _interval(cls, value: str) -> str:
        return check_interval(value)

    @property
    def check_name(self) -> str:
        """``name``, or ``<column>_in_<table>``."""
        return self.name or f"{self.references.column}_in_{self.references.table}"

    @property
    def column(self) -> str:
        """The batch's column that is true on a row breaking the check."""
        return CHECK_COLUMN + self.check_name


BatchCheck = Unique | References


class _RunCheck(Model):
    """A check of the table as a run leaves it: warned or failing the run."""

    action: CheckAction = CheckAction.WARN
    name: Identifier | None = None

    @field_validator("action")
    @classmethod
    def _no_rows(cls, value: CheckAction) -> CheckAction:
        if value in (CheckAction.QUARANTINE, CheckAction.HOLD):
            raise ValueError(f"expected warn or fail (a check of the whole table has no row to "
                             f"{value.value}), found '{value.value}'")
        return value


class Freshness(_RunCheck):
    """At the end of a run, the table's newest event time (or last commit) is no older than
    ``freshness``."""

    freshness: str
    by: FreshnessBy = FreshnessBy.EVENT_TIME

    kind: ClassVar[CheckKind] = CheckKind.FRESHNESS

    @field_validator("freshness")
    @classmethod
    def _interval(cls, value: str) -> str:
        return check_interval(value)

    @property
    def check_name(self) -> str:
        return self.name or "freshness"


class VolumeBounds(Model):
    """Bounds of the rows a run writes: absolute (``min``, ``max``), or relative to the median
    of the table's ``recent_runs`` earlier runs that wrote rows (``low`` and ``high`` times
    it)."""

    min: NonNegativeInt | None = None
    max: NonNegativeInt | None = None
    recent_runs: PositiveInt | None = None
    low: PositiveFloat | None = None
    high: PositiveFloat | None = None

    @model_validator(mode="after")
    def _some_bound(self) -> VolumeBounds:
        if self.min is None and self.max is None and self.recent_runs is None:
            raise ValueError("expected min, max or recent_runs (with low and/or high), "
                             "found none")
        if self.recent_runs is not None and self.low is None and self.high is None:
            raise ValueError("expected low and/or high (times the recent runs' median) with "
                             "recent_runs, found neither")
        if (self.low is not None or self.high is not None) and self.recent_runs is None:
            raise ValueError("expected recent_runs with low or high (they multiply the recent "
                             "runs' median), found none")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"expected min <= max, found min {self.min} and max {self.max}")
        return self


class Volume(_RunCheck):
    """The rows a run wrote are within ``volume``'s bounds."""

    volume: VolumeBounds

    kind: ClassVar[CheckKind] = CheckKind.VOLUME

    @property
    def check_name(self) -> str:
        return self.name or "volume"


RunCheck = Freshness | Volume


def _kind_of(value: Any) -> str | None:
    """The kind key an item of ``checks:`` holds (None: none; the error names the kinds)."""
    if isinstance(value, Unique | References | Freshness | Volume):
        return value.kind.value
    if isinstance(value, dict):
        return next((k.value for k in CheckKind if k.value in value), None)
    return None


TableCheck = Annotated[
    Annotated[Unique, Tag(CheckKind.UNIQUE.value)]
    | Annotated[References, Tag(CheckKind.REFERENCES.value)]
    | Annotated[Freshness, Tag(CheckKind.FRESHNESS.value)]
    | Annotated[Volume, Tag(CheckKind.VOLUME.value)],
    Discriminator(_kind_of, custom_error_type="check_kind",
                  custom_error_message="expected one of the keys unique, references, "
                                       "freshness or volume"),
]
