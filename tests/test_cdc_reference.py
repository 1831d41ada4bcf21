"""The SCD1 and SCD2 semantics of ``tests/cdc_reference.py``, in small cases with their exact
rows, and the generated change stream: its results depend only on the set of its events, never
on their order of arrival or on batch boundaries. Plain Python: no Spark session."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import pairwise, permutations
from pathlib import Path
from typing import Any

import pytest

from tests.cdc_reference import (
    DELETED,
    END_AT,
    IS_CURRENT,
    KEYS,
    START_AT,
    TRACKED,
    UNTRACKED,
    Event,
    Op,
    Row,
    batches,
    changes,
    scd1,
    scd2,
    snapshot_changes,
)


@pytest.fixture
def spark() -> None:
    """Takes the place of the suite's Spark session, which these tests do not need."""


def up(sequence: int, name: str, note: str = "-", key: str = "a") -> Event:
    return Event((key,), sequence, Op.UPSERT, {"name": name, "note": note})


def delete(sequence: int, key: str = "a") -> Event:
    return Event((key,), sequence, Op.DELETE)


def truncate(sequence: int) -> Event:
    return Event((), sequence, Op.TRUNCATE)


def row(name: str, note: str = "-", key: str = "a") -> Row:
    return {"id": key, "name": name, "note": note}


def version(start: int, end: int | None, name: str, note: str = "-", *,
            deleted: bool = False, key: str = "a") -> Row:
    return {**row(name, note, key), START_AT: start, END_AT: end, IS_CURRENT: end is None,
            DELETED: deleted}


def one(events: list[Event]) -> list[Row]:
    return scd1(events, keys=["id"])


def two(events: list[Event]) -> list[Row]:
    return scd2(events, keys=["id"], track_history_except=["note"])


def every_order(apply: Callable[[list[Event]], list[Row]], events: list[Event]) -> list[Row]:
    """The result, checked to be the same for every order of arrival of the events."""
    results = [apply(list(order)) for order in permutations(events)]
    assert all(r == results[0] for r in results)
    return results[0]


# ----------------------------------------------------------------------------------- SCD1
def test_scd1_latest_sequence_wins() -> None:
    assert every_order(one, [up(1, "A"), up(3, "C"), up(2, "B")]) == [row("C")]


def test_scd1_delete_older_than_the_row_is_ignored() -> None:
    assert every_order(one, [up(3, "A"), delete(2)]) == [row("A")]


def test_scd1_upsert_older_than_a_delete_does_not_bring_the_key_back() -> None:
    assert every_order(one, [up(1, "A"), delete(3), up(2, "B")]) == []
    assert every_order(one, [up(1, "A"), delete(2), up(3, "B")]) == [row("B")]


def test_scd1_truncate_removes_rows_up_to_its_sequence() -> None:
    events = [up(1, "A", key="a"), up(2, "C", key="c"), truncate(2), up(3, "B", key="b")]
    assert every_order(one, events) == [row("B", key="b")]


def test_scd1_duplicates_change_nothing_and_a_removal_wins_a_tie() -> None:
    assert every_order(one, [up(1, "A"), up(1, "A"), up(2, "B"), up(2, "B")]) == [row("B")]
    assert every_order(one, [up(1, "A"), up(2, "B"), delete(2)]) == []


def test_scd1_row_carries_its_sequence_when_asked() -> None:
    assert scd1([up(1, "A"), up(2, "B")], keys=["id"], sequence_by="seq") == \
        [{**row("B"), "seq": 2}]


def test_conflicting_upserts_at_one_sequence_are_refused() -> None:
    for apply in (one, two):
        with pytest.raises(ValueError, match="at sequence 1: two upserts with different"):
            apply([up(1, "A"), up(1, "B")])


# ----------------------------------------------------------------------------------- SCD2
def test_scd2_untracked_change_updates_in_place_and_tracked_change_opens_a_version() -> None:
    assert every_order(two, [up(1, "A", "x"), up(2, "A", "y")]) == [version(1, None, "A", "y")]
    assert every_order(two, [up(1, "A", "x"), up(2, "B", "x")]) == \
        [version(1, 2, "A", "x"), version(2, None, "B", "x")]


def test_scd2_delete_closes_the_version_and_a_reinsert_opens_one() -> None:
    assert every_order(two, [up(1, "A"), delete(2), up(3, "A")]) == \
        [version(1, 2, "A", deleted=True), version(3, None, "A")]


def test_scd2_removing_an_absent_key_changes_nothing() -> None:
    assert every_order(two, [delete(1), up(2, "A"), delete(3), delete(4)]) == \
        [version(2, 3, "A", deleted=True)]


def test_scd2_late_tracked_change_splits_the_version_it_falls_in() -> None:
    assert two([up(1, "A"), up(4, "C"), up(2, "B")]) == \
        [version(1, 2, "A"), version(2, 4, "B"), version(4, None, "C")]


def test_scd2_late_untracked_change_lands_in_the_version_valid_at_its_sequence() -> None:
    assert every_order(two, [up(1, "A", "x"), up(3, "B", "x"), up(2, "A", "y")]) == \
        [version(1, 3, "A", "y"), version(3, None, "B", "x")]


def test_scd2_late_split_of_an_updated_version_keeps_the_earlier_untracked_values() -> None:
    # The version [1, -) holds note "y" (from 3); split at 2, its part [1, 2) has note "x"
    # (from 1), which the table alone no longer holds.
    assert every_order(two, [up(1, "A", "x"), up(3, "A", "y"), up(2, "B", "x")]) == \
        [version(1, 2, "A", "x"), version(2, 3, "B", "x"), version(3, None, "A", "y")]


def test_scd2_upsert_older_than_a_delete_goes_before_it_in_history() -> None:
    assert every_order(two, [up(1, "A"), delete(5), up(3, "B")]) == \
        [version(1, 3, "A"), version(3, 5, "B", deleted=True)]


def test_scd2_duplicates_change_nothing_and_a_removal_wins_a_tie() -> None:
    assert every_order(two, [up(1, "A"), up(1, "A"), up(2, "B"), up(2, "B")]) == \
        [version(1, 2, "A"), version(2, None, "B")]
    assert every_order(two, [up(1, "A"), up(2, "B"), delete(2)]) == \
        [version(1, 2, "A", deleted=True)]


def test_scd2_truncate_closes_every_open_version() -> None:
    events = [up(1, "A", key="a"), up(2, "B", key="b"), truncate(3), up(4, "C", key="b")]
    assert every_order(two, events) == [
        version(1, 3, "A", deleted=True, key="a"),
        version(2, 3, "B", deleted=True, key="b"), version(4, None, "C", key="b")]


def test_scd2_tracked_columns() -> None:
    events = [up(1, "A", "x"), up(2, "A", "y")]
    assert scd2(events, keys=["id"]) == [version(1, 2, "A", "x"), version(2, None, "A", "y")]
    assert scd2(events, keys=["id"], track_history=["name"]) == two(events)
    with pytest.raises(ValueError, match="expected at most one, found both"):
        scd2(events, keys=["id"], track_history=["name"], track_history_except=["note"])


# ------------------------------------------------------------------ the generated stream
SEEDS = range(5)


def reference(events: Sequence[Event]) -> tuple[list[Row], list[Row]]:
    return (scd1(events, keys=KEYS),
            scd2(events, keys=KEYS, track_history_except=UNTRACKED))


def kinds(events: list[Event]) -> Counter[str]:
    """What the events of a stream are, each judged against its key's previous event."""
    counts: Counter[str] = Counter()
    newest: dict[Any, int] = {}
    arrived: set[tuple[Any, int]] = set()
    for event in events:  # in arrival order: a first copy after a newer event of its key
        if (event.key, event.sequence) not in arrived:
            counts["late"] += event.sequence < newest.get(event.key, 0)
        arrived.add((event.key, event.sequence))
        newest[event.key] = max(event.sequence, newest.get(event.key, 0))
    seen: dict[tuple[Any, int], Event] = {}
    previous: dict[Any, Event] = {}
    for event in sorted(events, key=lambda e: e.sequence):
        if (event.key, event.sequence) in seen:
            assert seen[event.key, event.sequence] == event  # unique but for exact duplicates
            counts["duplicate"] += 1
            continue
        seen[event.key, event.sequence] = event
        before = previous.get(event.key)
        if event.op is not Op.UPSERT:
            counts[event.op.value] += 1
        elif before is None:
            counts["insert"] += 1
        elif before.op is Op.DELETE:
            counts["reinsert"] += 1
        elif any(event.values[c] != before.values[c] for c in TRACKED):
            counts["tracked"] += 1
        else:
            counts["untracked" if event.values != before.values else "same"] += 1
        previous[event.key] = event
    return counts


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_stream_has_every_kind_of_change(seed: int) -> None:
    events = changes(seed, truncates=2)
    assert events == changes(seed, truncates=2) != changes(seed + 1, truncates=2)
    counts = kinds(events)
    assert len(events) == 200 and counts["truncate"] == 2
    assert all(counts[k] >= 3 for k in ("insert", "reinsert", "tracked", "untracked", "same",
                                         "delete", "duplicate")), counts
    # 40 events were delayed; about half of them overtook an event of their own key
    assert 15 <= counts["late"] <= 40, counts


@pytest.mark.parametrize("seed", SEEDS)
def test_result_depends_on_the_set_of_events_only(seed: int) -> None:
    events = changes(seed, truncates=seed % 3)
    expected = reference(events)
    shuffled = [random.Random(i).sample(events, len(events)) for i in range(3)]
    for order in [sorted(events, key=lambda e: e.sequence), events[::-1], *shuffled]:
        assert reference(order) == expected
    results = [reference([e for batch in batches(events, size) for e in batch])
               for size in (1, 7, None)]
    assert results == [expected] * 3


@pytest.mark.parametrize("seed", SEEDS)
def test_scd2_versions_are_a_consistent_history(seed: int) -> None:
    """Per key: versions in sequence, each non-empty, only the last one current, each ending
    where the next one starts unless deleted, and consecutive ones differing in a tracked
    column; the current versions are the SCD1 table."""
    current, history = reference(changes(seed, truncates=1))
    assert history, "the stream leaves versions"
    for key in {tuple(r[k] for k in KEYS) for r in history}:
        versions = [r for r in history if tuple(r[k] for k in KEYS) == key]
        assert [v[IS_CURRENT] for v in versions[:-1]] == [False] * (len(versions) - 1)
        assert versions[-1][IS_CURRENT] == (versions[-1][END_AT] is None)
        for v in versions:
            assert v[END_AT] is None or v[START_AT] < v[END_AT]
            assert not (v[IS_CURRENT] and v[DELETED])
        for v, w in pairwise(versions):
            if v[DELETED]:
                assert v[END_AT] < w[START_AT]
            else:
                assert v[END_AT] == w[START_AT]
                assert any(v[c] != w[c] for c in TRACKED)
    assert current == [{k: v for k, v in r.items() if not k.startswith("__")}
                       for r in history if r[IS_CURRENT]]


def test_batches_keep_arrival_order() -> None:
    events = changes(0, events=30)
    for size, lengths in ((1, [1] * 30), (7, [7, 7, 7, 7, 2]), (None, [30])):
        cut = batches(events, size)
        assert [len(b) for b in cut] == lengths
        assert [e for b in cut for e in b] == events
    with pytest.raises(ValueError, match="size: expected a positive number"):
        batches(events, 0)


def test_snapshots_give_the_events_between_consecutive_ones() -> None:
    # a: renamed in 2, gone in 3, back in 4; b: unchanged from 1 on; c: new in 2 (given out of
    # order: snapshots are taken by id).
    snapshots = {3: [row("B", key="b"), row("C", key="c")],
                 1: [row("A", key="a"), row("B", key="b")],
                 2: [row("A2", key="a"), row("B", key="b"), row("C", key="c"),
                     row("C", key="c")],
                 4: [row("A2", key="a"), row("B", key="b"), row("C", key="c")]}
    events = snapshot_changes(snapshots, keys=["id"])
    assert events == [up(1, "A"), up(1, "B", key="b"), up(2, "A2"), up(2, "C", key="c"),
                      delete(3), up(4, "A2")]
    assert scd2(events, keys=["id"]) == [
        version(1, 2, "A"), version(2, 3, "A2", deleted=True), version(4, None, "A2"),
        version(1, None, "B", key="b"), version(2, None, "C", key="c")]
    assert scd1(events, keys=["id"], sequence_by="seq") == [
        {**row("A2"), "seq": 4}, {**row("B", key="b"), "seq": 1}, {**row("C", key="c"), "seq": 2}]
    with pytest.raises(ValueError, match="key \\('a',\\) in snapshot 1: two rows with "
                       "different values"):
        snapshot_changes({1: [row("A"), row("Z")]}, keys=["id"])


def test_reference_imports_no_spark() -> None:
    root = Path(__file__).resolve().parent.parent
    code = "import sys, tests.cdc_reference; sys.exit('pyspark' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=root, check=False).returncode == 0
