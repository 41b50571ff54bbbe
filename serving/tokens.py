"""Access tokens: JWTs (RFC 9068 profile) signed with the current asymmetric key, verified statelessly."""

import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson
import sqlalchemy as sa
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, KeySet

from contracts.errors import Unauthorized
from store.clients import Client
from store.ids import new_id
from store.signing_keys import add_current_key, published_keys

ALGORITHM = "ES256"
# How long a process trusts its copy of the key set before reading the store again.
KEY_CACHE_SECONDS = 30.0


def rotate_signing_key(engine: sa.Engine) -> str:
    """Create a new current signing key; tokens signed with the previous one keep working."""
    kid = new_id()
    key = ECKey.generate_key("P-256", parameters={"kid": kid, "use": "sig", "alg": ALGORITHM})
    add_current_key(engine, kid, orjson.dumps(key.as_dict(private=True)).decode())
    return kid


@dataclass(frozen=True)
class TokenClaims:
    token_id: str
    client_id: str
    tenant_id: str
    scope: str
    resource: str | None


class TokenAuthority:
    def __init__(self, engine: sa.Engine, issuer: str, lifetime_seconds: int) -> None:
        self._engine = engine
        self.issuer = issuer
        self.lifetime_seconds = lifetime_seconds
        self._lock = threading.Lock()
        self._keys: list[ECKey] = []
        self._loaded_at = float("-inf")

    def _key_set(self, refresh: bool = False) -> list[ECKey]:
        with self._lock:
            stale = time.monotonic() - self._loaded_at > KEY_CACHE_SECONDS
            if refresh or stale or not self._keys:
                rows = published_keys(self._engine, timedelta(seconds=self.lifetime_seconds))
                if not rows:
                    rotate_signing_key(self._engine)
                    rows = published_keys(self._engine, timedelta(seconds=self.lifetime_seconds))
                self._keys = [ECKey.import_key(orjson.loads(row.private_jwk)) for row in rows]
                self._loaded_at = time.monotonic()
            return self._keys

    def public_jwks(self) -> dict[str, Any]:
        return {"keys": [key.as_dict(private=False) for key in self._key_set()]}

    def issue(self, client: Client) -> tuple[str, str]:
        """A token for the client's own scope and resource; returns (token, token id)."""
        current = self._key_set()[0]
        now = int(time.time())
        token_id = new_id()
        claims: dict[str, Any] = {
            "iss": self.issuer, "aud": self.issuer, "sub": client.id, "client_id": client.id,
            "iat": now, "nbf": now, "exp": now + self.lifetime_seconds, "jti": token_id,
            "scope": client.scope, "tenant_id": client.tenant_id,
        }
        if client.resource_id:
            claims["resource"] = client.resource_id
        header = {"alg": ALGORITHM, "kid": current.kid, "typ": "at+jwt"}
        return jwt.encode(header, claims, current, algorithms=[ALGORITHM]), token_id

    def verify(self, token: str) -> TokenClaims:
        try:
            decoded = self._decode(token)
        except (JoseError, ValueError, KeyError, TypeError):
            raise Unauthorized("The access token is invalid.") from None
        if decoded.header.get("typ") != "at+jwt":
            raise Unauthorized("The access token is invalid.")
        try:
            jwt.JWTClaimsRegistry(
                leeway=5,
                iss={"essential": True, "value": self.issuer},
                aud={"essential": True, "value": self.issuer},
                exp={"essential": True}, jti={"essential": True},
                client_id={"essential": True}, tenant_id={"essential": True}, scope={"essential": True},
            ).validate(decoded.claims)
        except JoseError as error:
            expired = error.error == "expired_token"
            raise Unauthorized("The access token has expired." if expired
                               else "The access token is invalid.") from None
        claims = decoded.claims
        return TokenClaims(token_id=claims["jti"], client_id=claims["client_id"],
                           tenant_id=claims["tenant_id"], scope=claims["scope"],
                           resource=claims.get("resource"))

    def _decode(self, token: str) -> jwt.Token:
        try:
            return jwt.decode(token, KeySet(self._key_set()), algorithms=[ALGORITHM])
        except ValueError:
            # An unknown kid may be a key another process created since we last looked.
            return jwt.decode(token, KeySet(self._key_set(refresh=True)), algorithms=[ALGORITHM])
