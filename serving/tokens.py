"""Access tokens: JWTs (RFC 9068 profile) signed with the current asymmetric key, verified statelessly.

Each process keeps a copy of the key set. Another process may rotate the key at any moment (`pia admin
rotate-key`, or a replica creating the first key), so a token whose kid the copy lacks makes the process read the
store again before the token is refused; those rereads are spaced at least KEY_REREAD_SECONDS apart, so made-up
kids cannot hammer the database, and a token waits for the next reread rather than being refused.
"""

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson
import sqlalchemy as sa
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import ECKey
from joserfc.jws import extract_compact

from contracts.errors import Unauthorized
from db.clients import Client
from db.ids import new_id
from db.secrets import SecretBox
from db.signing_keys import add_current_key, prepare_signing_keys, published_keys
from serving.threads import blocking

ALGORITHM = "ES256"
# How long a process signs with its copy of the key set before reading the store again.
KEY_CACHE_SECONDS = 30.0
# The least time between two reads of the store prompted by an unknown kid or a JWKS request.
KEY_REREAD_SECONDS = 1.0


def rotate_signing_key(engine: sa.Engine, box: SecretBox) -> str:
    """Create a new current signing key; tokens signed with the previous one keep working."""
    kid = new_id()
    key = ECKey.generate_key("P-256", parameters={"kid": kid, "use": "sig", "alg": ALGORITHM})
    add_current_key(engine, box, kid, orjson.dumps(key.as_dict(private=True)).decode())
    return kid


def _may_be_ours(kid: str) -> bool:
    """Our kids are UUIDv7 (new_id); anything else is refused without reading the store."""
    try:
        return uuid.UUID(kid).version == 7
    except ValueError:
        return False


@dataclass(frozen=True)
class TokenClaims:
    token_id: str
    client_id: str
    tenant_id: str
    scope: str
    resource: str | None


class TokenAuthority:
    def __init__(self, engine: sa.Engine, issuer: str, lifetime_seconds: int,
                 secrets: Callable[[], SecretBox]) -> None:
        """secrets: gives the secret box; called at the first read, so an app that never signs needs no key."""
        self._engine = engine
        self.issuer = issuer
        self.lifetime_seconds = lifetime_seconds
        self._secrets = secrets
        self._box: SecretBox | None = None
        self._read_lock = threading.Lock()
        self._reread_lock = asyncio.Lock()
        self._keys: dict[str, ECKey] = {}  # by kid, the current key first
        self._read_started = float("-inf")  # time.monotonic() when the last completed read began

    def read_keys(self) -> None:
        """Read the key set now (creating the first key in an empty store); at start, so a missing or wrong
        secret key fails there (db.secrets.SecretKeyError) rather than at the first request."""
        self._keys_read_since(time.monotonic())

    def _keys_read_since(self, instant: float) -> dict[str, ECKey]:
        """The key set as read from the store by a read that began at or after instant; reads if needed."""
        with self._read_lock:
            if self._read_started < instant:
                started = time.monotonic()
                self._keys = {key.kid: key for key in self._read_store()}
                self._read_started = started
            return self._keys

    def _read_store(self) -> list[ECKey]:
        if self._box is None:
            box = self._secrets()
            prepare_signing_keys(self._engine, box)
            self._box = box
        lifetime = timedelta(seconds=self.lifetime_seconds)
        private_jwks = published_keys(self._engine, self._box, lifetime)
        if not private_jwks:
            rotate_signing_key(self._engine, self._box)
            private_jwks = published_keys(self._engine, self._box, lifetime)
        return [ECKey.import_key(orjson.loads(jwk)) for jwk in private_jwks]

    async def _keys_read_after(self, arrived: float) -> dict[str, ECKey]:
        """The key set from a read that began after `arrived`, waiting for the next allowed reread."""
        async with self._reread_lock:  # one reread at a time; whoever queued behind it shares its result
            if self._read_started < arrived:
                await asyncio.sleep(max(0.0, self._read_started + KEY_REREAD_SECONDS - time.monotonic()))
                await blocking(self._keys_read_since, arrived)
            return self._keys

    async def _cached_keys(self) -> dict[str, ECKey]:
        since = time.monotonic() - KEY_CACHE_SECONDS
        return self._keys if self._read_started >= since else await blocking(self._keys_read_since, since)

    async def public_jwks(self) -> dict[str, Any]:
        """Every key any process may sign with at the moment of the request, so verifiers can trust it."""
        keys = await self._keys_read_after(time.monotonic())
        return {"keys": [key.as_dict(private=False) for key in keys.values()]}

    def issue(self, client: Client) -> tuple[str, str]:
        """A token for the client's own scope and resource; returns (token, token id)."""
        current = next(iter(self._keys_read_since(time.monotonic() - KEY_CACHE_SECONDS).values()))
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

    async def verify(self, token: str) -> TokenClaims:
        arrived = time.monotonic()
        try:
            kid = extract_compact(token.encode()).headers().get("kid")
        except (JoseError, ValueError, KeyError, TypeError):
            raise Unauthorized("The access token is invalid.") from None
        if not isinstance(kid, str):
            raise Unauthorized("The access token is invalid.")
        keys = await self._cached_keys()
        if kid not in keys and _may_be_ours(kid):
            # A key another process created since this one last read the store.
            keys = await self._keys_read_after(arrived)
        if kid not in keys:
            raise Unauthorized("The access token is invalid.")
        return await blocking(self._check, token, keys[kid])

    def _check(self, token: str, key: ECKey) -> TokenClaims:
        try:
            decoded = jwt.decode(token, key, algorithms=[ALGORITHM])
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
