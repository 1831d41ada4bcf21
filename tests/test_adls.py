"""ADLS Gen2 on the real azure-storage-file-datalake SDK, against a loopback DFS endpoint
(``tests/dfs_server.py``): pagination, retries, refusals, the commands that manage the lake,
and the same archive reconciliation and purge as on a local disk. Secrets never appear in
logs, errors or reprs."""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest
import yaml

from bronze.ledger import FileStatus
from bronze.reconcile import purge_archive, settle_file
from bronze.spec import CleanSource
from framework.cli import main
from framework.config.model import AzureStorage, Environment, Runtime
from framework.errors import StorageAccessError, StorageError
from framework.logging import LogFormat, configure_logging, get_logger
from framework.storage import LocalStorage, Storage, archive_target, land
from framework.storage.adls import AbfsPath, AdlsStorage, credential_for, hadoop_settings
from tests.dfs_server import DataLake, serve
from tests.support import Lakehouse, bronze_spec

ACCOUNT = "medallionstest"
FS = "lake"
ROOT = f"abfss://{FS}@{ACCOUNT}.dfs.core.windows.net/dev"
CANARY = "canary-secret-7c1e94"
CANARY_KEY = base64.b64encode(CANARY.encode() * 2).decode()  # a key must be base64


def _settings(url: str, **extra: object) -> AzureStorage:
    return AzureStorage.model_validate({
        "account": ACCOUNT, "auth": "account_key", "account_key": "${TEST_ACCOUNT_KEY}",
        "endpoint": url, "retries": 3, "retry_backoff_seconds": 0, **extra})


@pytest.fixture
def adls(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[DataLake, AdlsStorage]]:
    monkeypatch.setenv("TEST_ACCOUNT_KEY", CANARY_KEY)
    with serve(ACCOUNT) as (lake, url):
        lake.filesystems[FS] = {}
        yield lake, AdlsStorage(_settings(url))


def test_listing_follows_continuation_tokens_past_5000_paths(
    adls: tuple[DataLake, AdlsStorage]
) -> None:
    lake, store = adls
    for i in range(5200):
        lake.put_file(FS, f"dev/landing/orders/day={i % 7}/f{i:05d}.json", b"{}\n")
    files = list(store.list_files(f"{ROOT}/landing/orders"))
    assert len(files) == 5200 == len({f.path for f in files})
    assert all(f.size == 3 and f.path.startswith(f"{ROOT}/landing/orders/day=") for f in files)
    pages = [r for r in lake.requests if r.query.get("resource") == "filesystem"]
    assert len(pages) == 2  # 5,207 paths (7 folders): a full page of 5,000, then the rest
    assert "continuation" not in pages[0].query and pages[1].query["continuation"] == "5000"
    # every request was signed with the account key (and the key itself never sent)
    assert all(r.headers["Authorization"].startswith(f"SharedKey {ACCOUNT}:")
               for r in lake.requests)
    assert not any(CANARY_KEY in str(r.headers) for r in lake.requests)


def test_a_transient_503_is_retried_and_the_operation_succeeds(
    adls: tuple[DataLake, AdlsStorage]
) -> None:
    lake, store = adls
    lake.put_file(FS, "dev/landing/orders/a.json", b'{"order_id": "o1"}\n')
    lake.fail_next(503, times=2)
    assert store.open(f"{ROOT}/landing/orders/a.json").read() == b'{"order_id": "o1"}\n'
    assert [r.method for r in lake.requests].count("GET") == 3  # two refusals, one success
    lake.fail_next(503, times=4)  # more than the 3 retries configured: a clear error
    with pytest.raises(StorageError, match=r"cannot stat .*a\.json: HTTP 503 ServerBusy"):
        store.stat(f"{ROOT}/landing/orders/a.json")


def test_a_403_names_the_path_and_the_identity_and_no_secret(
    adls: tuple[DataLake, AdlsStorage]
) -> None:
    lake, store = adls
    lake.put_file(FS, "dev/restricted/a.json", b"x")
    lake.forbid("dev/restricted")
    with pytest.raises(StorageAccessError) as err:
        store.open(f"{ROOT}/restricted/a.json")
    message = str(err.value)
    assert f"{ROOT}/restricted/a.json" in message
    assert f"the account key of {ACCOUNT}" in message and "HTTP 403" in message
    assert "AuthorizationPermissionMismatch" in message
    for text in (message, repr(store), repr(store.settings), str(store.settings)):
        assert CANARY_KEY not in text and CANARY not in text


# ---------------------------------------------------------------------- local and ADLS alike
@dataclass
class Lake:
    """One storage and the helpers to seed it and read it back, relative to its root."""

    store: Storage
    root: str
    put: Callable[[str, bytes, datetime], None]

    def relative(self, path: str | None) -> str | None:
        # the archive keeps the source's full path: name the root's path in it the same way
        if path is None:
            return None
        root_path = self.root.split(".dfs.core.windows.net", 1)[-1]
        return path.removeprefix(self.root).replace(root_path, "<root>")

    def listing(self) -> set[str]:
        return {str(self.relative(f.path)) for f in self.store.list_files(self.root)}


@pytest.fixture(params=["local", "adls"])
def lake(request: pytest.FixtureRequest, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[Lake]:
    if request.param == "local":
        root = str(tmp_path / "dev")

        def put_local(rel: str, data: bytes, modified: datetime) -> None:
            path = Path(root, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            os.utime(path, (modified.timestamp(), modified.timestamp()))

        yield Lake(LocalStorage(), root, put_local)
        return
    monkeypatch.setenv("TEST_ACCOUNT_KEY", CANARY_KEY)
    with serve(ACCOUNT) as (dl, url):
        dl.filesystems[FS] = {}
        yield Lake(AdlsStorage(_settings(url)), ROOT,
                   lambda rel, data, modified: dl.put_file(FS, f"dev/{rel}", data, modified))


def test_reconciliation_and_purge_give_the_same_results_on_local_disk_and_adls(
    lake: Lake
) -> None:
    now = datetime.now(UTC)
    landing, archive, quarantine = (f"{lake.root}/{d}" for d in
                                    ("landing/orders", "archive/orders", "_quarantine/orders"))
    lake.put("landing/orders/old.json", b"1\n", now - timedelta(days=40))
    lake.put("landing/orders/new.json", b"2\n", now - timedelta(days=1))
    lake.put("landing/orders/broken.json.gz", b"\x1f\x8b", now - timedelta(days=1))
    # a file archived already (a batch's move, before a stop): only its ledger status is behind
    early = archive_target(archive, f"{landing}/early.json")
    lake.put(early.removeprefix(lake.root + "/"), b"0\n", now - timedelta(days=45))
    pending = [("old.json", FileStatus.INGESTED), ("new.json", FileStatus.INGESTED),
               ("early.json", FileStatus.INGESTED), ("broken.json.gz", FileStatus.FAILED)]

    def settle_all() -> dict[str, tuple[str, str | None] | None]:
        out = {}
        for name, status in pending:
            settled = settle_file(lake.store, f"{landing}/{name}", status, CleanSource.ARCHIVE,
                                  archive, quarantine)
            out[name] = settled and (settled[0], lake.relative(settled[1]))
        return out

    first = settle_all()
    assert first == {
        "old.json": ("archived", "/archive/orders<root>/landing/orders/old.json"),
        "new.json": ("archived", "/archive/orders<root>/landing/orders/new.json"),
        "early.json": ("archived", "/archive/orders<root>/landing/orders/early.json"),
        "broken.json.gz": ("quarantined",
                           "/_quarantine/orders<root>/landing/orders/broken.json.gz"),
    }
    assert settle_all() == first  # repeated (an interrupted reconcile): nothing moves twice
    assert not any(p.startswith("/landing/") for p in lake.listing())

    # Ages from the archive's manifests: old.json landed 40 days ago but was archived now;
    # new.json's manifest says it was archived 40 days ago; early.json is in no manifest (an
    # archive from before manifests), so its modification time decides.
    day = 86_400_000
    now_ms = int(time.time() * 1000)
    for at, name in ((now_ms - 40 * day, "new.json"), (now_ms, "old.json")):
        target = archive_target(archive, f"{landing}/{name}")
        lake.store.write_bytes(f"{archive}/_manifests/{at}.json", json.dumps(
            {"archived_at_ms": at, "files": [target]}).encode())
    purged = purge_archive(lake.store, archive, 30 * day, now_ms)
    assert sorted(str(lake.relative(f.path)) for f in purged) == [
        "/archive/orders<root>/landing/orders/early.json",
        "/archive/orders<root>/landing/orders/new.json"]
    assert {p for p in lake.listing() if "_manifests" not in p} == {
        "/archive/orders<root>/landing/orders/old.json",
        "/_quarantine/orders<root>/landing/orders/broken.json.gz"}
    assert len([p for p in lake.listing() if "_manifests" in p]) == 1  # the spent one went


# ---------------------------------------------------------------------- commands and secrets
def test_init_land_and_purge_archive_manage_the_lake_on_adls(
    lakehouse: Lakehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TEST_ACCOUNT_KEY", CANARY_KEY)
    caplog.set_level(logging.DEBUG)  # the SDK's own request logging included
    with serve(ACCOUNT) as (dl, url):
        lakehouse.write_env(runtime="auto", root=ROOT, storage={
            "account": ACCOUNT, "auth": "account_key", "account_key": "${TEST_ACCOUNT_KEY}",
            "endpoint": url, "retry_backoff_seconds": 0})
        lakehouse.add_table("bronze", "orders", bronze_spec())
        args = ["--conf", str(lakehouse.conf), "--env", lakehouse.env_name,
                "--log-format", "json", "--log-level", "debug"]
        assert main(["init", *args]) == 0
        assert {p for p, e in dl.filesystems[FS].items() if e.is_dir} >= {
            "dev/tables", "dev/_checkpoints", "dev/landing/orders", "dev/archive/orders",
            "dev/_quarantine/files/orders"}
        assert main(["init", *args]) == 0  # safe to repeat

        export = tmp_path / "orders-0001.json"
        export.write_text('{"order_id": "o1"}\n')
        assert main(["land", "orders", str(export), *args]) == 0
        assert dl.files(FS)["dev/landing/orders/orders-0001.json"] == export.read_bytes()
        assert not any(".uploading" in p for p in dl.files(FS))
        assert main(["land", "orders", str(export), *args]) == 1  # never overwritten
        assert main(["land", "orders", str(export), "--keep-times", *args]) == 2

        dl.put_file(FS, "dev/archive/orders/dev/landing/orders/a.json", b"1",
                    datetime.now(UTC) - timedelta(days=31))
        dl.put_file(FS, "dev/archive/orders/dev/landing/orders/b.json", b"2",
                    datetime.now(UTC) - timedelta(days=29))
        assert main(["purge-archive", "--older-than", "30d", *args]) == 0
        assert [p for p in dl.files(FS) if p.startswith("dev/archive/")] == [
            "dev/archive/orders/dev/landing/orders/b.json"]

        dl.forbid("dev/landing")
        assert main(["land", "orders", str(export), *args]) == 1
    captured = capsys.readouterr()
    assert f"access denied to the account key of {ACCOUNT}" in captured.err
    for text in (captured.out, captured.err, caplog.text):
        assert CANARY_KEY not in text and CANARY not in text


def test_credentials_are_explicit_per_method_and_spark_gets_the_same(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_CLIENT_SECRET", CANARY)
    sp = AzureStorage.model_validate({
        "account": ACCOUNT, "auth": "service_principal", "tenant_id": "tenant-1",
        "client_id": "client-1", "client_secret": "${AZURE_CLIENT_SECRET}"})
    credential = credential_for(sp)
    assert type(credential.value).__name__ == "ClientSecretCredential"
    assert credential.identity == "service principal client-1 (tenant tenant-1)"
    host = f"{ACCOUNT}.dfs.core.windows.net"
    conf = hadoop_settings(sp)
    assert conf[f"spark.hadoop.fs.azure.account.auth.type.{host}"] == "OAuth"
    assert conf[f"spark.hadoop.fs.azure.account.oauth.provider.type.{host}"].endswith(
        "ClientCredsTokenProvider")
    assert conf[f"spark.hadoop.fs.azure.account.oauth2.client.secret.{host}"] == CANARY
    assert CANARY not in repr(sp) and CANARY not in credential.identity
    # spark-submit on an abfss:// root gets these settings; a local root gets none
    from framework.session import storage_conf

    assert storage_conf(Environment(name="dev", root=ROOT, storage=sp)) == conf
    assert storage_conf(Environment(name="local", root="/tmp/lake", storage=sp)) == {}

    mi = AzureStorage.model_validate({"account": ACCOUNT, "auth": "managed_identity",
                                      "client_id": "mi-1"})
    assert type(credential_for(mi).value).__name__ == "ManagedIdentityCredential"
    assert hadoop_settings(mi)[f"spark.hadoop.fs.azure.account.oauth.provider.type.{host}"] \
        .endswith("MsiTokenProvider")

    monkeypatch.setenv("AZURE_FEDERATED_TOKEN_FILE", "/var/run/secrets/token")
    wi = AzureStorage.model_validate({"account": ACCOUNT, "auth": "workload_identity",
                                      "tenant_id": "tenant-1", "client_id": "wi-1"})
    assert type(credential_for(wi).value).__name__ == "WorkloadIdentityCredential"

    default = AzureStorage.model_validate({"account": ACCOUNT, "auth": "default"})
    prod = Environment(name="prod", runtime=Runtime.SUBMIT, root=ROOT, storage=default)
    with pytest.raises(StorageError, match="for local development only"):
        credential_for(default, prod)
    with pytest.raises(StorageError, match="expected an explicit credential for Spark"):
        hadoop_settings(default)


def test_an_abfss_path_without_storage_settings_is_a_clear_error() -> None:
    from framework.storage import storage_for

    env = Environment(name="dev", runtime=Runtime.SUBMIT, root=ROOT)
    with pytest.raises(StorageError, match="expected the environment's storage settings"):
        storage_for(f"{ROOT}/landing", env)
    with pytest.raises(StorageError, match="expected an ADLS Gen2 URL"):
        AbfsPath.parse("abfss://lake/landing")


def test_logs_of_storage_operations_carry_no_secret(
    adls: tuple[DataLake, AdlsStorage], caplog: pytest.LogCaptureFixture
) -> None:
    lake, store = adls
    out = io.StringIO()
    configure_logging(LogFormat.JSON, "debug", stream=out)
    caplog.set_level(logging.DEBUG)
    lake.put_file(FS, "dev/landing/orders/a.json", b"x")
    lake.fail_next(503)
    get_logger().info("storage.listed", files=[f.path for f in store.list_files(ROOT)],
                      storage=repr(store))
    assert yaml.safe_load(out.getvalue().splitlines()[-1])["event"] == "storage.listed"
    for text in (out.getvalue(), caplog.text):
        assert CANARY_KEY not in text and CANARY not in text


def test_an_unreachable_endpoint_is_a_storage_error_without_the_sas_token(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("TEST_SAS", f"sv=2025-01-05&sp=rl&sig={CANARY}")
    store = AdlsStorage(AzureStorage.model_validate({
        "account": ACCOUNT, "auth": "sas", "sas_token": "${TEST_SAS}",
        "endpoint": f"http://127.0.0.1:{port}/{ACCOUNT}", "retries": 0}))
    with pytest.raises(StorageError) as err:
        store.stat(f"{ROOT}/landing/orders/a.json")
    assert f"cannot stat {ROOT}/landing/orders/a.json" in str(err.value)
    assert CANARY not in str(err.value) and CANARY not in repr(store)


# ---------------------------------------------------------------------- landing in order
def _exports(folder: Path, count: int) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):  # named against their order: the order given must win
        path = folder / f"z{count - i:03d}.json"
        path.write_text(f'{{"order_id": "o{i}"}}\n')
        paths.append(str(path))
    return paths


def test_land_gives_each_file_a_later_time_than_the_one_before_on_a_local_disk(
    tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "earlier.json").write_text("{}\n")
    os.utime(landing / "earlier.json", (time.time() + 5, time.time() + 5))  # ahead of now
    exports = _exports(tmp_path / "export", 40)
    landed = land(LocalStorage(), exports, str(landing))
    times = [os.stat(landing / os.path.basename(p)).st_mtime_ns // 1_000_000 for p in exports]
    assert [f.modified_ms for f in landed] == times
    assert all(b > a for a, b in pairwise(times))  # strictly, a millisecond apart at least
    assert times[0] > os.stat(landing / "earlier.json").st_mtime_ns // 1_000_000

    # --keep-times: each file keeps its own time, so the source's order is theirs
    kept = tmp_path / "kept"
    for i, path in enumerate(exports):
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    land(LocalStorage(), exports, str(kept), keep_times=True)
    assert [os.stat(kept / os.path.basename(p)).st_mtime for p in exports] == [
        1_700_000_000 + i for i in range(40)]


def test_land_gives_each_file_a_later_second_on_adls(
    adls: tuple[DataLake, AdlsStorage], tmp_path: Path
) -> None:
    lake, store = adls
    landing = f"{ROOT}/landing/orders"
    lake.put_file(FS, "dev/landing/orders/earlier.json", b"{}\n", datetime.now(UTC))
    exports = _exports(tmp_path / "export", 3)
    started = time.monotonic()
    landed = land(store, exports, landing)
    seconds = [f.modified_ms // 1000 for f in landed]
    # HTTP dates are whole seconds: each file lands in a later second than the one before
    assert len(set(seconds)) == 3 and seconds == sorted(seconds)
    assert seconds[0] > store.stat(f"{landing}/earlier.json").modified_ms // 1000
    assert time.monotonic() - started >= 2  # the price: about a second a file
    listed = {f.path.rsplit("/", 1)[-1]: f.modified_ms for f in store.list_files(landing)}
    assert sorted(listed, key=lambda n: listed[n])[1:] == [os.path.basename(p) for p in exports]
    with pytest.raises(StorageError, match="--keep-times"):
        land(store, exports, f"{ROOT}/landing/other", keep_times=True)
