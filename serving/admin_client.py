"""`pia admin` against a running server: an admin-scope token from the token endpoint, then the admin API."""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

# httpx logs every request at INFO; the command's output is its JSON answer (stdout) or error body (stderr).
logging.getLogger("httpx").setLevel(logging.WARNING)


class AdminCallFailed(Exception):
    """The server answered 4xx or 5xx; `body` is its error body (or a stand-in when it sent none)."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.body = status, body


class CredentialsMissing(ValueError):
    """No admin-scope client could be found for the tenant."""


@dataclass(frozen=True)
class AdminCredentials:
    client_id: str
    client_secret: str = field(repr=False)


def credentials_from_file(path: Path, tenant_id: str) -> AdminCredentials:
    """The admin client in a credentials file: `pia demo`'s demo-credentials.json (the tenant's client of
    scope admin), or one client's `{"clientId","clientSecret"}` as `pia admin create-client` prints it."""
    content = orjson.loads(path.read_bytes())
    if "tenants" in content:
        tenant = next((t for t in content["tenants"] if t.get("id") == tenant_id), None)
        if tenant is None:
            raise CredentialsMissing(f"{path} holds no tenant {tenant_id}")
        admin = next((c for c in tenant.get("clients", []) if c.get("scope") == "admin"), None)
        if admin is None:
            raise CredentialsMissing(f"{path} holds no admin-scope client of tenant {tenant_id}")
        return AdminCredentials(admin["clientId"], admin["clientSecret"])
    if not content.get("clientId") or not content.get("clientSecret"):
        raise CredentialsMissing(f"{path} has neither tenants nor clientId and clientSecret")
    return AdminCredentials(content["clientId"], content["clientSecret"])


class AdminClient:
    """One tenant's admin API at `base_url`; the token is fetched at the first call."""

    def __init__(self, base_url: str, tenant_id: str, credentials: AdminCredentials, timeout: float = 300) -> None:
        self._tenant_id = tenant_id
        self._credentials = credentials
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)
        self._token: str | None = None

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *_: object) -> None:
        self._http.close()

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """`path` below /admin/v1/tenants/{tenantId}; returns the JSON answer or raises AdminCallFailed."""
        content = None if body is None else orjson.dumps(body)
        response = self._http.request(method, f"/admin/v1/tenants/{self._tenant_id}{path}", content=content,
                                      headers={"Authorization": f"Bearer {self._access_token()}",
                                               "Content-Type": "application/json"})
        return _answer(response)

    def _access_token(self) -> str:
        if self._token is None:
            response = self._http.post("/oauth2/token", data={
                "grant_type": "client_credentials", "scope": "admin", "tenant_id": self._tenant_id},
                auth=(self._credentials.client_id, self._credentials.client_secret))
            self._token = _answer(response)["access_token"]
        return self._token


def _answer(response: httpx.Response) -> Any:
    try:
        body = response.json()
    except ValueError:
        body = {"error": f"HTTP_{response.status_code}", "message": response.text[:500]}
    if response.status_code >= 400:
        raise AdminCallFailed(response.status_code, body)
    return body
