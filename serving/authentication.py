"""Who is calling: a bearer token's verified claims and its API client, each remembered briefly."""

import asyncio
import time
from dataclasses import dataclass

import orjson
import sqlalchemy as sa
from cachetools import TLRUCache, TTLCache
from joserfc.jws import extract_compact

from contracts.errors import Unauthorized
from db.clients import Client, get_client
from serving.jsonio import blocking
from serving.tokens import TokenAuthority, TokenClaims

# Bounds on the caches' memory; a busy replica sees far fewer live tokens and clients than this.
VERIFIED_TOKENS = 10_000
CACHED_CLIENTS = 10_000


@dataclass(frozen=True)
class Caller:
    client: Client
    token_id: str
    started: float


class Authenticator:
    """Turns a bearer token into its caller without a signature check and a store read on every request.

    A token that verified is remembered, keyed by the whole token string, until its `exp`: a client sending
    the same token for an hour pays one signature check, not one per request. Its API client is remembered
    for `client_cache_seconds` (0 reads it every time). Nothing invalidates the client cache from outside:
    `pia admin disable-client` runs in another process, so disabling takes effect here when the entry expires.
    """

    def __init__(self, tokens: TokenAuthority, engine: sa.Engine, client_cache_seconds: float) -> None:
        self._tokens = tokens
        self._engine = engine
        self._verified: TLRUCache[str, tuple[TokenClaims, float]] = TLRUCache(
            VERIFIED_TOKENS, ttu=lambda _token, entry, _now: entry[1], timer=time.time)
        # Holds the read itself, so requests arriving together while an entry is missing share one store read.
        self._clients: TTLCache[tuple[str, str], asyncio.Future[Client | None]] = TTLCache(
            CACHED_CLIENTS, client_cache_seconds)

    async def caller(self, token: str, started: float) -> Caller:
        claims = await self._claims(token)
        client = await self.client(claims.tenant_id, claims.client_id)
        if client is None or not client.enabled:
            raise Unauthorized("The API client of this token is disabled or no longer exists.")
        return Caller(client, claims.token_id, started)

    async def _claims(self, token: str) -> TokenClaims:
        if (entry := self._verified.get(token)) is not None:
            return entry[0]
        claims = await self._tokens.verify(token)
        # Verified above, so the payload can be trusted for its expiry time.
        expires = orjson.loads(extract_compact(token.encode()).payload)["exp"]
        self._verified[token] = (claims, expires)
        return claims

    async def client(self, tenant_id: str, client_id: str) -> Client | None:
        """The API client, as read within the last `client_cache_seconds`."""
        key = (tenant_id, client_id)
        read = self._clients.get(key)
        if read is not None and read.done() and not read.cancelled() and read.exception() is None:
            return read.result()  # the common case, without a wait
        if read is None:
            self._clients[key] = read = asyncio.ensure_future(blocking(get_client, self._engine, tenant_id, client_id))
        try:
            return await asyncio.shield(read)
        except Exception:
            if self._clients.get(key) is read:
                del self._clients[key]  # a failed read is not remembered
            raise
