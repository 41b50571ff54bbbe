"""`pia admin` against a running server: an admin-scope token from the token endpoint, then the admin API."""

import logging
from pathlib import Path
from typing import Any

import httpx
import orjson

from pia_client.tokens import Credentials, TokenCache, token_request
from pia_client.tokens import CredentialsMissing as CredentialsMissing  # pia admin's commands catch it from here
from pia_client.tokens import credentials_from_file as credentials_of_scope

# httpx logs every request at INFO; the command's output is its JSON answer (stdout) or error body (stderr).
logging.getLogger("httpx").setLevel(logging.WARNING)


class AdminCallFailed(Exception):
    """The server answered 4xx or 5xx; `body` is its error body (or a stand-in when it sent none)."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.body = status, body


# The admin client is one API client like the others: its credentials and token come from pia_client/tokens.py.
AdminCredentials = Credentials


def credentials_from_file(path: Path, tenant_id: str) -> AdminCredentials:
    """The admin client in demo-credentials.json (the tenant's client of scope admin) or in one client's
    `{"clientId","clientSecret"}` as `pia admin create-client` prints it."""
    return credentials_of_scope(path, tenant_id, "admin")


class AdminClient:
    """One tenant's admin API at `base_url`; the token is fetched at the first call and renewed shortly before it
    expires."""

    def __init__(self, base_url: str, tenant_id: str, credentials: AdminCredentials, timeout: float = 300) -> None:
        self._tenant_id = tenant_id
        self._credentials = credentials
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)
        self._tokens = TokenCache()

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
        if (token := self._tokens.current()) is None:
            requested_at = self._tokens.now()
            answer = _answer(self._http.request(**token_request(self._tenant_id, "admin", self._credentials)))
            token = self._tokens.store(answer, requested_at)
        return token


def _answer(response: httpx.Response) -> Any:
    """The JSON answer (None for 204 No Content), or AdminCallFailed with the error body."""
    if response.status_code == 204:
        return None
    try:
        body = response.json()
    except ValueError:
        body = {"error": f"HTTP_{response.status_code}", "message": response.text[:500]}
    if response.status_code >= 400:
        raise AdminCallFailed(response.status_code, body)
    return body
