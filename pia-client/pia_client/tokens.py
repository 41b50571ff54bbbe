"""Client credentials and the access token they are exchanged for, cached until shortly before it expires.

SPEC: "Tokens live 1 hour. Request a new one shortly before expiry, not on the first 401." A cached token is used
until `renew_before` seconds (at most a tenth of its lifetime) remain; the clock is a parameter so tests can move
time on. The cache holds no HTTP: the clients fetch with `token_request(...)` and hand the answer to `store(...)`.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

TOKEN_PATH = "/oauth2/token"


class CredentialsMissing(ValueError):
    """No client of the wanted tenant and scope could be found."""


@dataclass(frozen=True)
class Credentials:
    client_id: str
    client_secret: str = field(repr=False)


def credentials_from_file(path: Path, tenant_id: str | None, scope: str) -> Credentials:
    """The client in a credentials file: `pia demo`'s demo-credentials.json (the tenant's client of `scope`; for
    demand_planning the one holding a permission), or one client's `{"clientId","clientSecret"}` as
    `pia admin create-client` prints it."""
    content = orjson.loads(path.read_bytes())
    if "tenants" in content:
        tenant = next((t for t in content["tenants"] if t.get("id") == tenant_id), None)
        if tenant is None:
            raise CredentialsMissing(f"{path} holds no tenant {tenant_id}")
        # demo-credentials.json lists a demand_planning client without the permission too (it gets 403).
        candidates = sorted((c for c in tenant.get("clients", []) if c.get("scope") == scope),
                            key=lambda c: not c.get("permissions"))
        if not candidates:
            raise CredentialsMissing(f"{path} holds no {scope}-scope client of tenant {tenant_id}")
        return Credentials(candidates[0]["clientId"], candidates[0]["clientSecret"])
    if not content.get("clientId") or not content.get("clientSecret"):
        raise CredentialsMissing(f"{path} has neither tenants nor clientId and clientSecret")
    return Credentials(content["clientId"], content["clientSecret"])


def token_request(tenant_id: str, scope: str, credentials: Credentials) -> dict[str, Any]:
    """Keyword arguments of the httpx request for a token (HTTP Basic, as SPEC recommends)."""
    return {"method": "POST", "url": TOKEN_PATH,
            "data": {"grant_type": "client_credentials", "scope": scope, "tenant_id": tenant_id},
            "auth": (credentials.client_id, credentials.client_secret)}


class TokenCache:
    """One access token and the moment it should be replaced."""

    def __init__(self, renew_before: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._renew_before = renew_before
        self._clock = clock
        self._token: str | None = None
        self._renew_at = 0.0

    def current(self) -> str | None:
        """The cached token, or None when there is none or it is due for renewal."""
        if self._token is None or self._clock() >= self._renew_at:
            return None
        return self._token

    def store(self, answer: dict[str, Any], requested_at: float) -> str:
        """Keep a token endpoint's answer; `requested_at` is the clock's reading when the request was sent, so the
        time the request took counts against the token's life."""
        lifetime = float(answer["expires_in"])
        self._token = answer["access_token"]
        self._renew_at = requested_at + lifetime - min(self._renew_before, lifetime / 10)
        return self._token

    def now(self) -> float:
        return self._clock()
