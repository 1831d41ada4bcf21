"""One contract for every store the framework moves files with: a local disk through ``os``,
any Hadoop file system through the Spark session (here the local one, ``file:``, and HDFS of
the YARN test cluster), and ADLS Gen2 through the Azure SDK against the loopback DFS
endpoint."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from framework.errors import StorageError
from framework.storage import LocalStorage, Storage, from_uri, local_path
from framework.storage.hadoop import HadoopStorage
from tests.dfs_server import serve

ACCOUNT = "medallionstest"


@pytest.fixture(params=["local", "hadoop", pytest.param("hdfs", marks=pytest.mark.yarn), "adls"])
def store(request: pytest.FixtureRequest, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Storage, str]]:
    """A store and a folder on it, empty."""
    if request.param == "local":
        yield LocalStorage(), str(tmp_path / "lake")
    elif request.param == "hadoop":
        spark: SparkSession = request.getfixturevalue("spark")
        yield HadoopStorage(spark), f"file://{tmp_path}/lake"
    elif request.param == "hdfs":
        spark = request.getfixturevalue("spark")
        cluster: dict[str, str] = request.getfixturevalue("yarn_cluster")
        yield HadoopStorage(spark), f"{cluster['MEDALLION_HDFS_ROOT']}/{tmp_path.name}/lake"
    else:
        from framework.config.model import AzureStorage
        from framework.storage.adls import AdlsStorage

        monkeypatch.setenv("TEST_ACCOUNT_KEY", "a2V5a2V5a2V5a2V5")
        with serve(ACCOUNT) as (lake, url):
            lake.filesystems["lake"] = {}
            settings = AzureStorage.model_validate({
                "account": ACCOUNT, "auth": "account_key", "account_key": "${TEST_ACCOUNT_KEY}",
                "endpoint": url, "retries": 0, "retry_backoff_seconds": 0})
            yield AdlsStorage(settings), f"abfss://lake@{ACCOUNT}.dfs.core.windows.net/lake"


def test_every_store_keeps_the_same_contract(store: tuple[Storage, str], tmp_path: Path) -> None:
    s, root = store
    local = tmp_path / "export.json"
    local.write_bytes(b'{"a": 1}\n')

    # folders: made with their parents, idempotently; a missing one lists nothing
    assert not s.exists(f"{root}/in")
    assert list(s.list_files(f"{root}/in")) == []
    s.makedirs(f"{root}/in/deep")
    s.makedirs(f"{root}/in/deep")
    assert s.exists(f"{root}/in/deep")

    # upload: appears whole, never overwrites; the local file may be named relatively
    s.upload(os.path.relpath(local), f"{root}/in/a.json")
    assert s.open(f"{root}/in/a.json").read() == b'{"a": 1}\n'
    assert s.head(f"{root}/in/a.json", 4) == b'{"a"'
    assert s.head(f"{root}/in/a.json", 100) == b'{"a": 1}\n'
    with pytest.raises(StorageError, match="expected no file"):
        s.upload(str(local), f"{root}/in/a.json")
    info = s.stat(f"{root}/in/a.json")
    assert info.size == 9 and abs(info.modified_ms / 1000 - time.time()) < 60
    with pytest.raises(StorageError):
        s.stat(f"{root}/in/missing.json")

    # small files written whole, replaced
    s.write_bytes(f"{root}/in/deep/m.json", b"one")
    s.write_bytes(f"{root}/in/deep/m.json", b"two")
    assert s.open(f"{root}/in/deep/m.json").read() == b"two"

    # create: only where no file is, and says whether it wrote
    assert s.create(f"{root}/lease/1.json", b"first")
    assert not s.create(f"{root}/lease/1.json", b"second")
    assert s.open(f"{root}/lease/1.json").read() == b"first"
    s.delete(f"{root}/lease/1.json")

    # listing: every file below, recursively, named as the caller spells the folder
    listed = sorted((f.path, f.size) for f in s.list_files(f"{root}/in"))
    assert listed == [(f"{root}/in/a.json", 9), (f"{root}/in/deep/m.json", 3)]

    # move: makes the target's parents, refuses an existing target, leaves no source
    s.move(f"{root}/in/a.json", f"{root}/archive/x/a.json")
    assert not s.exists(f"{root}/in/a.json")
    assert s.open(f"{root}/archive/x/a.json").read() == b'{"a": 1}\n'
    s.upload(str(local), f"{root}/in/b.json")
    with pytest.raises(StorageError, match="expected no file at move target"):
        s.move(f"{root}/in/b.json", f"{root}/archive/x/a.json")
    assert s.exists(f"{root}/in/b.json")

    # try_move: moves only a file that is there onto a target that is not
    assert s.try_move(f"{root}/in/b.json", f"{root}/archive/y/b.json")
    assert not s.try_move(f"{root}/in/b.json", f"{root}/archive/y/b2.json")  # gone already
    s.upload(str(local), f"{root}/in/b.json")
    assert not s.try_move(f"{root}/in/b.json", f"{root}/archive/y/b.json")  # target taken
    assert s.exists(f"{root}/in/b.json") and s.exists(f"{root}/archive/y/b.json")

    # delete: gone; a missing file is no error
    s.delete(f"{root}/in/b.json")
    s.delete(f"{root}/in/b.json")
    assert not s.exists(f"{root}/in/b.json")

    # folders: moved whole in one rename (parents made, no source left, an existing target
    # or a missing source refused), deleted with all they hold, a missing one no error
    s.write_bytes(f"{root}/ckpt/offsets/0", b"v1")
    s.write_bytes(f"{root}/ckpt/commits/0", b"v1")
    s.move_folder(f"{root}/ckpt", f"{root}/aside/op/ckpt")
    assert not s.exists(f"{root}/ckpt")
    assert sorted(f.path for f in s.list_files(f"{root}/aside/op/ckpt")) == [
        f"{root}/aside/op/ckpt/commits/0", f"{root}/aside/op/ckpt/offsets/0"]
    assert s.open(f"{root}/aside/op/ckpt/offsets/0").read() == b"v1"
    s.makedirs(f"{root}/ckpt")
    with pytest.raises(StorageError, match=r"expected no (file|folder) at move target"):
        s.move_folder(f"{root}/ckpt", f"{root}/aside/op/ckpt")
    with pytest.raises(StorageError, match="expected a folder to move"):
        s.move_folder(f"{root}/nothing", f"{root}/aside/op/nothing")
    assert s.exists(f"{root}/aside/op/ckpt/offsets/0")
    s.delete_folder(f"{root}/aside")
    s.delete_folder(f"{root}/aside")
    assert not s.exists(f"{root}/aside") and list(s.list_files(f"{root}/aside")) == []

    # times: set where the store lets a writer set them; touch brings one to now
    if s.resolution_ms(root) == 1:
        s.upload(str(local), f"{root}/in/old.json", modified_ms=1_700_000_000_123)
        assert s.stat(f"{root}/in/old.json").modified_ms == 1_700_000_000_123
        s.touch(f"{root}/in/old.json")
        assert abs(s.stat(f"{root}/in/old.json").modified_ms / 1000 - time.time()) < 60
    else:
        assert s.resolution_ms(root) == 1000
        before = s.stat(f"{root}/archive/x/a.json").modified_ms
        time.sleep(1.1)
        s.touch(f"{root}/archive/x/a.json")
        assert s.stat(f"{root}/archive/x/a.json").modified_ms > before


@pytest.mark.parametrize("a, b", [
    ("faulty:/tmp/lake/landing/a.json", "faulty:///tmp/lake/landing/a.json"),
    ("dbfs:/mnt/lake/landing/a.json", "dbfs:///mnt/lake/landing/a.json"),
    ("file:/tmp/a%20b.json", "/tmp/a b.json"),
    ("faulty:/tmp/a%20b%23c%3F%25.json", "faulty:///tmp/a b#c?%.json"),
    ("hdfs://nn:8020/l/%E8%A1%A8%5Bx%5D.json", "hdfs://nn:8020/l/表[x].json"),
])
def test_one_path_spelled_two_ways_is_one_file(a: str, b: str) -> None:
    # Spark's _metadata.file_path writes a URL with no authority as s:/p, the file source's log
    # as s:///p, both with the name escaped: bronze matches its rows per file under one
    # spelling, the file's own name (which the storage layer takes).
    assert from_uri(a) == from_uri(b) == local_path(b)
    assert local_path("hdfs://nn:8020/lake/a.json") == "hdfs://nn:8020/lake/a.json"
    assert local_path("file:/tmp/a#b%20.json") == "/tmp/a#b%20.json"  # a name, not a URI


def test_the_journal_keeps_its_records_on_every_store(store: tuple[Storage, str]) -> None:
    from framework.errors import OperationOpenError
    from framework.journal import Journal, JournalState, OperationKind

    s, root = store
    journal = Journal(s, root)
    assert journal.last() is None
    begun = journal.begin(OperationKind.REFRESH, {"tables": ["silver.orders"]})
    assert begun.op.startswith("r-") and begun.seq == 0
    assert journal.last() == begun
    assert begun.body == {"kind": "refresh", "tables": ["silver.orders"]}
    with pytest.raises(OperationOpenError, match=f"found {begun.op} \\(planned since"):
        journal.begin(OperationKind.BACKFILL, {})
    assert journal.append(JournalState.SET_ASIDE, aside=["silver.orders"]).seq == 1
    assert journal.append(JournalState.RESET).seq == 2
    # a record cut short by a kill (an ADLS create stops before its flush) is skipped, and
    # keeps its number
    s.create(f"{root}/_refresh/journal/0003.json", b"")
    last = journal.last()
    assert last is not None and last.state is JournalState.RESET
    assert journal.append(JournalState.REBUILT).seq == 4
    s.write_bytes(f"{journal.workspace(begun.op)}/aside/silver/orders/offsets/0", b"v1")
    with pytest.raises(StorageError, match=r"expected .* done or abandoned to close it"):
        journal.close()
    journal.append(JournalState.DONE)
    journal.close()
    journal.close()  # nothing open: nothing to do
    assert journal.last() is None and not s.exists(journal.workspace(begun.op))
    assert [(r.seq, r.state) for r in journal.closed(begun.op)] == [
        (0, JournalState.PLANNED), (1, JournalState.SET_ASIDE), (2, JournalState.RESET),
        (4, JournalState.REBUILT), (5, JournalState.DONE)]
    # a begin cut short (no first record that parses) is no operation, cleared by the next
    s.create(f"{root}/_refresh/journal/0000.json", b'{"op": ')
    assert journal.last() is None
    again = journal.begin(OperationKind.REFRESH, {})
    assert journal.records() == [again]
