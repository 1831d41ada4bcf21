"""ADLS Gen2: the lake's own file operations on ``abfss://`` paths, and the credentials for it.

:class:`AdlsStorage` implements :class:`framework.storage.Storage` on azure-storage-file-datalake
(moves are ADLS's atomic rename). :func:`resolve_access` resolves an environment's ``storage``
settings once (the method, the account, the identity, the secret); :func:`credential_for` turns
them into an azure-identity credential, explicitly per method, with a description of the
identity (never of its secret) for error messages; :func:`hadoop_settings` gives them to
Spark's ABFS driver (spark-submit and local runs; Databricks sets nothing), and
:func:`framework.deltalog.storage_options` to delta-rs.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import IO, Any, TypeVar

from framework.config.model import AzureAuthMethod, AzureStorage, Environment, Runtime
from framework.errors import StorageAccessError, StorageError
from framework.storage.base import FileInfo, uploading_name

T = TypeVar("T")

DFS_SUFFIX = "dfs.core.windows.net"
ABFS = re.compile(
    r"^abfss?://(?P<fs>[a-z0-9](?:[a-z0-9-]{1,61}[a-z0-9])?)@(?P<account>[a-z0-9]{3,24})"
    r"\.dfs\.core\.windows\.net(?:/(?P<path>.*))?$"
)


@dataclass(frozen=True)
class AbfsPath:
    """``abfss://<filesystem>@<account>.dfs.core.windows.net/<path>``, split."""

    filesystem: str
    account: str
    path: str  # without a leading or trailing slash; "" for the file system's root

    @classmethod
    def parse(cls, url: str) -> AbfsPath:
        m = ABFS.match(url)
        if not m:
            raise StorageError(
                f"expected an ADLS Gen2 URL 'abfss://<filesystem>@<account>.{DFS_SUFFIX}/<path>',"
                f" found {url!r}")
        return cls(m.group("fs"), m.group("account"), (m.group("path") or "").strip("/"))

    def url(self, path: str | None = None) -> str:
        p = self.path if path is None else path.strip("/")
        return f"abfss://{self.filesystem}@{self.account}.{DFS_SUFFIX}/{p}"

    @property
    def parent(self) -> str:
        return self.path.rsplit("/", 1)[0] if "/" in self.path else ""


# ---------------------------------------------------------------------- credentials
@dataclass(frozen=True)
class Access:
    """An environment's ``storage`` settings resolved at the moment of use: the method, the
    account, the identity and the secret the method takes, read from its reference. The SDK's
    credential (:func:`credential_for`), Spark's ABFS settings (:func:`hadoop_settings`) and
    delta-rs's options (:func:`framework.deltalog.storage_options`) only name these."""

    auth: AzureAuthMethod
    account: str
    tenant_id: str = ""
    client_id: str = ""
    # the account key, the SAS token (without its '?') or the client secret, by ``auth``
    secret: str = field(default="", repr=False)
    token_file: str = ""  # a workload identity's: AZURE_FEDERATED_TOKEN_FILE ("": unset)


# The settings each method cannot do without (the others need none).
_REQUIRED = {
    AzureAuthMethod.SERVICE_PRINCIPAL: ("tenant_id", "client_id", "client_secret"),
    AzureAuthMethod.WORKLOAD_IDENTITY: ("tenant_id", "client_id"),
    AzureAuthMethod.ACCOUNT_KEY: ("account_key",),
    AzureAuthMethod.SAS: ("sas_token",),
}


def resolve_access(settings: AzureStorage) -> Access:
    """``settings`` resolved; a setting the method needs and lacks is a :class:`StorageError`."""
    method = settings.auth
    for key in _REQUIRED.get(method, ()):
        if not getattr(settings, key):
            raise StorageError(f"expected storage.{key} for auth {method.value} "
                               f"(account {settings.account}), found none")
    ref = {AzureAuthMethod.SERVICE_PRINCIPAL: settings.client_secret,
           AzureAuthMethod.ACCOUNT_KEY: settings.account_key,
           AzureAuthMethod.SAS: settings.sas_token}.get(method)
    secret = ref.resolve() if ref is not None else ""
    return Access(method, settings.account, settings.tenant_id or "", settings.client_id or "",
                  secret.lstrip("?") if method is AzureAuthMethod.SAS else secret,
                  os.environ.get("AZURE_FEDERATED_TOKEN_FILE", ""))


@dataclass(frozen=True)
class Credential:
    """An SDK credential and who it is, in words fit for a log or an error message."""

    value: Any
    identity: str


def credential_for(settings: AzureStorage, env: Environment | None = None) -> Credential:
    """The credential for ``settings``; secrets are resolved here, at the moment of use."""
    if settings.auth is AzureAuthMethod.DEFAULT and env is not None \
            and env.runtime not in (Runtime.LOCAL, Runtime.AUTO):
        raise StorageError(f"expected an explicit credential (service_principal, "
                           f"managed_identity or workload_identity) for environment "
                           f"{env.name!r} on {env.runtime.value}, found auth: default, which "
                           "is for local development only")
    a = resolve_access(settings)
    if a.auth is AzureAuthMethod.SERVICE_PRINCIPAL:
        from azure.identity import ClientSecretCredential

        return Credential(ClientSecretCredential(a.tenant_id, a.client_id, a.secret),
                          f"service principal {a.client_id} (tenant {a.tenant_id})")
    if a.auth is AzureAuthMethod.MANAGED_IDENTITY:
        from azure.identity import ManagedIdentityCredential

        return Credential(ManagedIdentityCredential(client_id=a.client_id or None),
                          f"managed identity {a.client_id or '(system-assigned)'}")
    if a.auth is AzureAuthMethod.WORKLOAD_IDENTITY:
        from azure.identity import WorkloadIdentityCredential

        if not a.token_file:
            raise StorageError("expected AZURE_FEDERATED_TOKEN_FILE to name the workload "
                               "identity's token file, found it unset")
        return Credential(WorkloadIdentityCredential(tenant_id=a.tenant_id, client_id=a.client_id,
                                                     token_file_path=a.token_file),
                          f"workload identity {a.client_id} (tenant {a.tenant_id})")
    if a.auth is AzureAuthMethod.DEFAULT:
        from azure.identity import DefaultAzureCredential

        return Credential(DefaultAzureCredential(exclude_interactive_browser_credential=True),
                          "developer credentials (DefaultAzureCredential)")
    if a.auth is AzureAuthMethod.ACCOUNT_KEY:
        from azure.core.credentials import AzureNamedKeyCredential

        return Credential(AzureNamedKeyCredential(a.account, a.secret),
                          f"the account key of {a.account}")
    from azure.core.credentials import AzureSasCredential

    return Credential(AzureSasCredential(a.secret), f"a SAS token for {a.account}")


def hadoop_settings(settings: AzureStorage) -> dict[str, str]:
    """Spark's ABFS settings for the account (``spark.hadoop.`` prefixed), secrets resolved."""
    if settings.auth is AzureAuthMethod.DEFAULT:
        raise StorageError("expected an explicit credential for Spark's ABFS driver "
                           "(service_principal, managed_identity, workload_identity, account_key"
                           " or sas), found auth: default, which only the SDK understands")
    a = resolve_access(settings)
    host = f"{a.account}.{DFS_SUFFIX}"
    key = f"spark.hadoop.fs.azure.account.{{}}.{host}"
    if a.auth is AzureAuthMethod.ACCOUNT_KEY:
        return {key.format("key"): a.secret}
    if a.auth is AzureAuthMethod.SAS:
        return {key.format("auth.type"): "SAS",
                f"spark.hadoop.fs.azure.sas.fixed.token.{host}": a.secret}
    conf = {key.format("auth.type"): "OAuth"}
    provider = key.format("oauth.provider.type")
    if a.auth is AzureAuthMethod.SERVICE_PRINCIPAL:
        conf.update({
            provider: "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider",
            key.format("oauth2.client.id"): a.client_id,
            key.format("oauth2.client.secret"): a.secret,
            key.format("oauth2.client.endpoint"):
                f"https://login.microsoftonline.com/{a.tenant_id}/oauth2/token",
        })
    elif a.auth is AzureAuthMethod.MANAGED_IDENTITY:
        conf[provider] = "org.apache.hadoop.fs.azurebfs.oauth2.MsiTokenProvider"
        if a.client_id:
            conf[key.format("oauth2.client.id")] = a.client_id
        if a.tenant_id:
            conf[key.format("oauth2.msi.tenant")] = a.tenant_id
    else:  # workload identity
        conf.update({
            provider: "org.apache.hadoop.fs.azurebfs.oauth2.WorkloadIdentityTokenProvider",
            key.format("oauth2.msi.tenant"): a.tenant_id,
            key.format("oauth2.client.id"): a.client_id,
            key.format("oauth2.token.file"): a.token_file,
        })
    return conf


# ---------------------------------------------------------------------- the storage
class AdlsStorage:
    """The lake's file operations on one ADLS Gen2 account."""

    def resolution_ms(self, path: str) -> int:
        """Last-Modified is an HTTP date: whole seconds, set by the service when written."""
        return 1000

    def __init__(self, settings: AzureStorage, env: Environment | None = None,
                 credential: Credential | None = None) -> None:
        from azure.storage.filedatalake import DataLakeServiceClient, ExponentialRetry

        self.settings = settings
        self.env = env
        self.credential = credential or credential_for(settings, env)
        # waits backoff, then backoff + 3^n seconds (the SDK's schedule); 0: retry at once
        backoff = settings.retry_backoff_seconds
        retry = ExponentialRetry(initial_backoff=backoff,  # type: ignore[arg-type]
                                 increment_base=3 if backoff else 0,
                                 retry_total=settings.retries,
                                 random_jitter_range=min(3, int(backoff)))
        url = settings.endpoint or f"https://{settings.account}.{DFS_SUFFIX}"
        self.client = DataLakeServiceClient(url, credential=self.credential.value,
                                            retry_policy=retry)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its settings: a copy made elsewhere (a micro-batch on a Spark Connect
        server) takes its credential from the environment there, never from here."""
        return (AdlsStorage, (self.settings, self.env))

    def __repr__(self) -> str:
        return f"AdlsStorage(account={self.settings.account!r}, as {self.credential.identity})"

    # ------------------------------------------------------------------ operations
    def exists(self, path: str) -> bool:
        p = self._parse(path)
        fs = self.client.get_file_system_client(p.filesystem)
        if not p.path:
            return bool(self._call("check", path, fs.exists))
        return bool(self._call("check", path, fs.get_file_client(p.path).exists))

    def stat(self, path: str) -> FileInfo:
        p = self._parse(path)
        file = self.client.get_file_client(p.filesystem, p.path)
        props = self._call("stat", path, file.get_file_properties)
        return FileInfo(path, int(props.size), _ms(props.last_modified))

    def open(self, path: str) -> IO[bytes]:
        p = self._parse(path)
        file = self.client.get_file_client(p.filesystem, p.path)
        return io.BytesIO(self._call("read", path, lambda: file.download_file().readall()))

    def head(self, path: str, size: int) -> bytes:
        p = self._parse(path)
        file = self.client.get_file_client(p.filesystem, p.path)
        length = min(size, self.stat(path).size)
        if length == 0:
            return b""
        return bytes(self._call("read", path,
                                lambda: file.download_file(offset=0, length=length).readall()))

    def move(self, src: str, dst: str) -> None:
        s, d = self._parse(src), self._parse(dst)
        if self.exists(dst):
            raise StorageError(f"expected no file at move target {dst}, found one (source {src})")
        if d.parent:
            self.makedirs(d.url(d.parent))
        file = self.client.get_file_client(s.filesystem, s.path)
        self._call("move", src, lambda: file.rename_file(f"{d.filesystem}/{d.path}"))

    def try_move(self, src: str, dst: str) -> bool:
        if self.exists(dst) or not self.exists(src):
            return False
        self.move(src, dst)
        return True

    def delete(self, path: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        p = self._parse(path)
        file = self.client.get_file_client(p.filesystem, p.path)
        try:
            self._call("delete", path, file.delete_file, passthrough=(ResourceNotFoundError,))
        except ResourceNotFoundError:
            return

    def move_folder(self, src: str, dst: str) -> None:
        s, d = self._parse(src), self._parse(dst)
        if self.exists(dst):
            raise StorageError(f"expected no folder at move target {dst}, found one "
                               f"(source {src})")
        if not self.exists(src):
            raise StorageError(f"expected a folder to move at {src}, found none (target {dst})")
        if d.parent:
            self.makedirs(d.url(d.parent))
        folder = self.client.get_directory_client(s.filesystem, s.path)
        self._call("move", src, lambda: folder.rename_directory(f"{d.filesystem}/{d.path}"))

    def delete_folder(self, path: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        p = self._parse(path)
        folder = self.client.get_directory_client(p.filesystem, p.path)
        try:
            self._call("delete", path, folder.delete_directory,
                       passthrough=(ResourceNotFoundError,))
        except ResourceNotFoundError:
            return

    def list_files(self, path: str) -> Iterator[FileInfo]:
        """Every file under ``path``, recursively, following continuation tokens."""
        from azure.core.exceptions import ResourceNotFoundError

        p = self._parse(path)
        fs = self.client.get_file_system_client(p.filesystem)
        pages = fs.get_paths(path=p.path or None, recursive=True)
        try:
            items = self._call("list", path, lambda: list(pages),
                               passthrough=(ResourceNotFoundError,))
        except ResourceNotFoundError:
            return
        for item in items:
            if not item.is_directory:
                yield FileInfo(p.url(item.name), int(item.content_length or 0),
                               _ms(item.last_modified))

    def makedirs(self, path: str) -> None:
        p = self._parse(path)
        if not p.path:
            return self.create_filesystem(path)
        from azure.core.exceptions import ResourceNotFoundError

        directory = self.client.get_directory_client(p.filesystem, p.path)
        # create_directory without conditions is idempotent on ADLS (parents included)
        try:
            self._call("create directory", path, directory.create_directory,
                       passthrough=(ResourceNotFoundError,))
        except ResourceNotFoundError:  # the file system itself is missing: create it first
            self.create_filesystem(path)
            self._call("create directory", path, directory.create_directory)
        return None

    def create_filesystem(self, path: str) -> None:
        from azure.core.exceptions import ResourceExistsError

        p = self._parse(path)
        fs = self.client.get_file_system_client(p.filesystem)
        try:
            self._call("create file system", path, fs.create_file_system,
                       passthrough=(ResourceExistsError,))
        except ResourceExistsError:
            return

    def upload(self, local_file: str, path: str, modified_ms: int | None = None) -> None:
        """Upload a local file under a hidden name, then rename it into place, so a reader
        listing the folder never sees it half written; an existing target is an error. The
        service sets the modification time (``modified_ms`` cannot be given)."""
        p = self._parse(path)
        if self.exists(path):
            raise StorageError(f"expected no file at {path}, found one (uploading {local_file})")
        if p.parent:
            self.makedirs(p.url(p.parent))
        staging = p.url(uploading_name(p.path).lstrip("/"))
        file = self.client.get_file_client(p.filesystem, AbfsPath.parse(staging).path)
        with open(local_file, "rb") as fh:
            self._call("upload", path, lambda: file.upload_data(fh, overwrite=True))
        self.move(staging, path)

    def write_bytes(self, path: str, data: bytes) -> None:
        p = self._parse(path)
        if p.parent:
            self.makedirs(p.url(p.parent))
        file = self.client.get_file_client(p.filesystem, p.path)
        self._call("write", path, lambda: file.upload_data(data, overwrite=True))

    def create(self, path: str, data: bytes) -> bool:
        """Create the file with ``If-None-Match: *`` (the service refuses it if the name
        exists), then write it; a reader may see it empty for that moment."""
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceExistsError

        p = self._parse(path)
        if p.parent:
            self.makedirs(p.url(p.parent))
        file = self.client.get_file_client(p.filesystem, p.path)
        try:
            self._call("create", path,
                       lambda: file.create_file(match_condition=MatchConditions.IfMissing),
                       passthrough=(ResourceExistsError,))
        except ResourceExistsError:
            return False
        self._call("write", path, lambda: file.append_data(data, 0, len(data)))
        self._call("write", path, lambda: file.flush_data(len(data)))
        return True

    def touch(self, path: str) -> None:
        """Flush the file again at its length: its data is unchanged, its Last-Modified now."""
        p = self._parse(path)
        file = self.client.get_file_client(p.filesystem, p.path)
        size = self.stat(path).size
        self._call("touch", path, lambda: file.flush_data(size))

    # ------------------------------------------------------------------ helpers
    def _parse(self, path: str) -> AbfsPath:
        p = AbfsPath.parse(path)
        if p.account != self.settings.account:
            raise StorageError(f"expected a path on account {self.settings.account}, found "
                               f"{path}")
        return p

    def _call(self, what: str, path: str, fn: Callable[[], T],
              passthrough: tuple[type[BaseException], ...] = ()) -> T:
        """Run an SDK call; its errors become storage errors that name the path, and for a
        refusal the identity used (never a secret)."""
        from azure.core.exceptions import AzureError, ClientAuthenticationError, HttpResponseError

        try:
            return fn()
        except passthrough:
            raise
        except (ClientAuthenticationError, HttpResponseError) as exc:
            status = getattr(exc, "status_code", None)
            code = getattr(exc, "error_code", None) or type(exc).__name__
            code = getattr(code, "value", code)  # the SDK's StorageErrorCode enum
            if status in (401, 403) or isinstance(exc, ClientAuthenticationError):
                raise StorageAccessError(
                    f"cannot {what} {path}: access denied to {self.credential.identity} "
                    f"(HTTP {status}, {code}); expected it to hold a data role such as Storage "
                    "Blob Data Contributor on the account or ACLs on the path") from None
            raise StorageError(f"cannot {what} {path}: HTTP {status} {code}") from None
        except AzureError as exc:
            # the first line only, without query strings (a SAS token travels in one)
            detail = re.sub(r"\?\S*", "", str(exc).splitlines()[0])[:300] if str(exc) else ""
            raise StorageError(f"cannot {what} {path}: {type(exc).__name__}: {detail}") from None


def _ms(value: Any) -> int:
    if isinstance(value, str):
        value = parsedate_to_datetime(value)
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else 0
