"""How silver applies change data, written in plain Python: SCD type 1 (:func:`scd1`, ``mode:
upsert`` with ``deletes:`` and ``truncates:``) and SCD type 2 (:func:`scd2`, ``mode: scd2``),
with a generated change stream (:func:`changes`, :func:`batches`) to hold the tables against.

A silver table fed these events must equal the function of the same events row for row,
whatever order they arrived in and however they were cut into batches. Both functions depend
only on the *set* of events: they group them by key, sort each key's events by sequence and fold
them, so arrival order cannot matter.

Rules common to both:

- An event belongs to one key (the ``keys`` columns) and has a ``sequence`` (the
  ``sequence_by`` column): the order of the changes at the source. Arrival order means nothing.
- An upsert carries the whole row (every non-key column); its values replace the previous ones.
- A delete removes its key at its sequence; its values are ignored.
- A truncate is a delete of every key at the truncate's sequence; its key is ignored. It removes
  every row whose sequence is at most the truncate's, and nothing newer.
- Events of one key at one sequence: identical ones count once, so a duplicate changes nothing;
  a delete or truncate supersedes the upserts at its sequence (a removal wins a tie); two
  upserts with different values are a contradiction in the source and raise ``ValueError``
  (no winner is defined for an implementation to reproduce).
- Tombstones: a delete counts at its sequence even when it removed nothing when it arrived. An
  upsert older than a delete never brings the key back, even if it arrives after the delete,
  and a delete that arrives before the insert it is newer than still removes it. A table applied
  batch by batch must therefore keep every delete and truncate it has seen (a tombstone with its
  sequence), not only the rows they removed.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import groupby
from operator import itemgetter
from typing import Any

Row = dict[str, Any]
Key = tuple[Any, ...]

START_AT, END_AT, IS_CURRENT, DELETED = "__start_at", "__end_at", "__is_current", "__deleted"

# The generated stream's columns: "id" is the key; "name" and "segment" are tracked by SCD2,
# "note" is not (scd2(..., track_history_except=UNTRACKED)).
KEYS = ("id",)
TRACKED = ("name", "segment")
UNTRACKED = ("note",)
NAMES = ("Ada", "Bo", "Cy", "Di", "Ed")
SEGMENTS = ("retail", "smb", "enterprise")
MAX_DELAY = 30  # a late event arrives up to this many events after its place


class Op(Enum):
    """What an event does to its key."""

    UPSERT = "upsert"
    DELETE = "delete"
    TRUNCATE = "truncate"


@dataclass(frozen=True)
class Event:
    """One change at the source: ``values`` are the non-key columns (empty for a removal)."""

    key: Key
    sequence: Any
    op: Op = Op.UPSERT
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Step:
    """A key's state from ``sequence`` on: its row's values, or None once removed."""

    sequence: Any
    values: Mapping[str, Any] | None


def _timelines(events: Iterable[Event], keys: Sequence[str]) -> list[tuple[Key, list[_Step]]]:
    """Each key's steps in sequence order, truncates included, keys sorted."""
    by_key: dict[Key, list[Event]] = defaultdict(list)
    truncates: list[Event] = []
    for event in events:
        if event.op is Op.TRUNCATE:
            truncates.append(event)
        elif len(event.key) != len(keys):
            raise ValueError(f"event key {event.key!r}: expected one value per key column "
                             f"{list(keys)}")
        else:
            by_key[event.key].append(event)
    return sorted(((key, _steps(key, group + truncates)) for key, group in by_key.items()),
                  key=itemgetter(0))


def _steps(key: Key, events: list[Event]) -> list[_Step]:
    """One step per sequence: a removal wins the tie; upserts must agree."""
    steps = []
    for sequence, same in groupby(sorted(events, key=lambda e: e.sequence),
                                  key=lambda e: e.sequence):
        group = list(same)
        if any(e.op is not Op.UPSERT for e in group):
            steps.append(_Step(sequence, None))
            continue
        values = group[0].values
        if any(e.values != values for e in group):
            raise ValueError(f"key {key!r} at sequence {sequence!r}: two upserts with different "
                             f"values: {[dict(e.values) for e in group]}")
        steps.append(_Step(sequence, values))
    return steps


def scd1(events: Iterable[Event], *, keys: Sequence[str],
         sequence_by: str | None = None) -> list[Row]:
    """The SCD1 table: for each key, the event with the greatest sequence decides; an upsert
    leaves its row, a delete or truncate leaves no row.

    Rows are the key columns then the values (then ``sequence_by``: the row's sequence, when
    given), sorted by key.
    """
    rows = []
    for key, steps in _timelines(events, keys):
        last = steps[-1]
        if last.values is not None:
            row = {**dict(zip(keys, key, strict=True)), **last.values}
            if sequence_by is not None:
                row[sequence_by] = last.sequence
            rows.append(row)
    return rows


@dataclass
class _Version:
    start: Any
    values: Mapping[str, Any]
    end: Any = None
    deleted: bool = False


def scd2(events: Iterable[Event], *, keys: Sequence[str],
         track_history: Sequence[str] | None = None,
         track_history_except: Sequence[str] | None = None) -> list[Row]:
    """The SCD2 table: one row per version of a key, sorted by key then ``__start_at``.

    A row is the key columns, the values, and ``__start_at`` (the sequence that opened the
    version), ``__end_at`` (the sequence that closed it; None while current), ``__is_current``
    (``__end_at`` is None) and ``__deleted`` (a delete or truncate closed it).

    The tracked columns are ``track_history``, or every non-key column but
    ``track_history_except``, or (neither given) every non-key column. Each key's steps are
    folded in sequence order:

    - an upsert when the key has no open version (never seen, or removed) opens one;
    - an upsert whose tracked values differ from the open version's closes it at the upsert's
      sequence and opens a new one there;
    - an upsert whose tracked values equal the open version's updates that version in place (no
      new version). So a version's untracked values are those of its latest event, and a late
      change to untracked columns only lands in the version valid at its sequence;
    - a delete or truncate closes the open version at its sequence and marks it ``__deleted``.
      No tombstone row is added: from the delete on, the key has no version, and a later upsert
      opens a new one. Removing a key with no open version changes nothing.

    A late event thus takes its place in the history: the version it falls in is split at its
    sequence and ``__end_at`` values are corrected. The table alone is not enough to place one:
    a version keeps only its latest untracked values, so when a late tracked change splits it,
    the part before the change has the values of the events before it (see the tests), which
    the table no longer holds. A table applied batch by batch must keep the events of a key (or
    recompute the key from them), as well as its tombstones.
    """
    if track_history is not None and track_history_except is not None:
        raise ValueError("track_history and track_history_except: expected at most one, "
                         "found both")
    excluded = set(track_history_except or ())

    def tracked(values: Mapping[str, Any]) -> dict[str, Any]:
        if track_history is not None:
            return {c: values.get(c) for c in track_history}
        return {c: v for c, v in values.items() if c not in excluded}

    rows = []
    for key, steps in _timelines(events, keys):
        versions: list[_Version] = []
        current: _Version | None = None
        for step in steps:
            if step.values is None:
                if current is not None:
                    current.end, current.deleted, current = step.sequence, True, None
            elif current is not None and tracked(step.values) == tracked(current.values):
                current.values = step.values
            else:
                if current is not None:
                    current.end = step.sequence
                current = _Version(step.sequence, step.values)
                versions.append(current)
        key_columns = dict(zip(keys, key, strict=True))
        rows += [{**key_columns, **v.values, START_AT: v.start, END_AT: v.end,
                  IS_CURRENT: v.end is None, DELETED: v.deleted} for v in versions]
    return rows


def snapshot_changes(snapshots: Mapping[Any, Iterable[Row]], *,
                     keys: Sequence[str]) -> list[Event]:
    """The events between consecutive full snapshots (``snapshot_by`` in silver): each
    snapshot, taken in order of its id (the mapping's key), is compared with the one before it
    (nothing, for the first). A key that is new or whose values changed is an upsert at the
    snapshot's id, with the snapshot's values (every column but ``keys``); a key present before
    and absent now is a delete at the snapshot's id. A snapshot equal to the one before it
    gives no event. The same row twice in one snapshot counts once; two rows of a key with
    different values are a contradiction in the extract and raise ``ValueError``.

    The SCD tables of a snapshot source are :func:`scd1` and :func:`scd2` of these events.
    """
    events: list[Event] = []
    before: dict[Key, dict[str, Any]] = {}
    for sequence in sorted(snapshots):
        now: dict[Key, dict[str, Any]] = {}
        for row in snapshots[sequence]:
            key = tuple(row[k] for k in keys)
            values = {c: v for c, v in row.items() if c not in keys}
            if now.setdefault(key, values) != values:
                raise ValueError(f"key {key!r} in snapshot {sequence!r}: two rows with "
                                 f"different values: {now[key]}, {values}")
        events += [Event(key, sequence, Op.UPSERT, values) for key, values in sorted(now.items())
                   if before.get(key) != values]
        events += [Event(key, sequence, Op.DELETE) for key in sorted(before) if key not in now]
        before = now
    return events


def changes(seed: int, keys: int = 10, events: int = 200, late_fraction: float = 0.2,
            truncates: int = 0) -> list[Event]:
    """A change stream over ``keys`` customers (columns :data:`KEYS`, :data:`TRACKED`,
    :data:`UNTRACKED`), the same for the same arguments, in order of ARRIVAL.

    ``events`` events, made in sequence order (sequences 1, 2, ...; unique except for exact
    duplicates): inserts, updates of tracked columns (with or without the note), updates of the
    note alone, the same row again at a new sequence, deletes (some of absent keys), re-inserts
    after a delete, exact duplicates of an earlier event of the key (same sequence and values),
    and ``truncates`` truncates. Then ``late_fraction`` of them, chosen at random, are delivered
    1 to :data:`MAX_DELAY` places late.
    """
    rng = random.Random(seed)
    live: dict[Key, dict[str, Any]] = {}
    sent: dict[Key, list[Event]] = defaultdict(list)
    truncate_at = set(rng.sample(range(events), truncates))
    made: list[Event] = []
    sequence = 0
    while len(made) < events:
        if len(made) in truncate_at:
            sequence += 1
            made.append(Event((), sequence, Op.TRUNCATE))
            live.clear()
            continue
        key = (rng.randrange(keys),)
        row, roll = live.get(key), rng.random()
        if sent[key] and roll < 0.1:
            made.append(rng.choice(sent[key]))  # an exact duplicate
            continue
        sequence += 1
        if (row is None and roll < 0.15) or (row is not None and roll < 0.3):
            event = Event(key, sequence, Op.DELETE)
            live.pop(key, None)
        else:
            if row is None:  # an insert, or a re-insert after a delete
                row = {"name": rng.choice(NAMES), "segment": rng.choice(SEGMENTS),
                       "note": f"n{sequence}"}
            elif roll < 0.6:  # a tracked column changes, the note too half the time
                column = rng.choice(TRACKED)
                choices = NAMES if column == "name" else SEGMENTS
                row = {**row, column: rng.choice([c for c in choices if c != row[column]])}
                if roll < 0.45:
                    row["note"] = f"n{sequence}"
            elif roll < 0.95:  # the note alone changes
                row = {**row, "note": f"n{sequence}"}
            # else: the same row again, at a new sequence
            live[key] = row
            event = Event(key, sequence, Op.UPSERT, row)
        sent[key].append(event)
        made.append(event)
    late = set(rng.sample(range(events), round(late_fraction * events)))
    place = {i: i + rng.randint(1, MAX_DELAY) + 0.5 if i in late else i for i in range(events)}
    return [made[i] for i in sorted(range(events), key=lambda i: (place[i], i))]


def batches(events: Sequence[Event], size: int | None) -> list[list[Event]]:
    """The events cut in arrival order into batches of ``size`` (the last may be shorter);
    ``size`` None: one batch of them all."""
    if size is None:
        return [list(events)]
    if size < 1:
        raise ValueError(f"size: expected a positive number of events or None, found {size}")
    return [list(events[i:i + size]) for i in range(0, len(events), size)]


def kinds(events: Sequence[Event]) -> Counter[str]:
    """What a stream (in order of arrival) holds, to check a test's stream covers each case:
    ``inserts``, ``reinserts`` (after a delete or truncate), ``tracked`` (a tracked column
    changed), ``untracked`` (only the note changed), ``same`` (the same row at a new
    sequence), ``deletes``, ``truncates``, ``duplicates`` (an event received again) and
    ``late`` (an event received after one of a greater sequence)."""
    counts: Counter[str] = Counter()
    received: list[Event] = []
    newest = 0
    for event in events:
        counts["duplicates"] += event in received
        counts["late"] += event.sequence < newest
        received += [] if event in received else [event]
        newest = max(newest, event.sequence)
    rows: dict[Key, Mapping[str, Any] | None] = {}
    for event in sorted(received, key=lambda e: e.sequence):
        if event.op is Op.TRUNCATE:
            counts["truncates"] += 1
            rows = dict.fromkeys(rows)
            continue
        if event.op is Op.DELETE:
            counts["deletes"] += 1
            rows[event.key] = None
            continue
        before = rows.get(event.key)
        if event.key not in rows:
            counts["inserts"] += 1
        elif before is None:
            counts["reinserts"] += 1
        elif any(before[c] != event.values[c] for c in TRACKED):
            counts["tracked"] += 1
        elif any(before[c] != event.values[c] for c in UNTRACKED):
            counts["untracked"] += 1
        else:
            counts["same"] += 1
        rows[event.key] = event.values
    return counts
