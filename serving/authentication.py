"""Who is calling: a bearer token's verified claims and its API client, each remembered briefly."""

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import orjson
import sqlalchemy as sa
from joserfc.jws import extract_compact

from contracts.errors import Unauthorized
from db.clients import Client, get_client
from serving.threads import blocking
from serving.tokens import TokenAuthority, TokenClaims

# Bounds on the caches' memory; a busy replica sees far fewer live tokens and clients than this.
VERIFIED_TOKENS = 10_000
CACHED_CLIENTS = 10_000

K = TypeVar("K")
V = TypeVar("V")


class ExpiringEntries(Generic[K, V]):
    """Values that each expire at an instant of their own, at most `size` of them, for the event loop alone.

    A hit is one dict lookup and one comparison with the clock: cachetools' TLRU and TTL caches, which this replaced
    on every authenticated request, cost 2–3 µs a hit each (their timer's context manager and linked lists). When
    full, the expired entries are dropped, then the oldest quarter if that was not enough.
    """

    def __init__(self, size: int, clock: Callable[[], float]) -> None:
        self._size = size
        self._clock = clock
        self._entries: dict[K, tuple[V, float]] = {}

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._clock() < entry[1]:
            return entry[0]
        del self._entries[key]
        return None

    def put(self, key: K, value: V, expires: float) -> None:
        if len(self._entries) >= self._size and key not in self._entries:
            self._make_room()
        self._entries[key] = (value, expires)

    def discard(self, key: K, value: V) -> None:
        """Forget the key if it still holds this value (not one put since)."""
        entry = self._entries.get(key)
        if entry is not None and entry[0] is value:
            del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)

    def _make_room(self) -> None:
        now = self._clock()
        for key in [key for key, (_, expires) in self._entries.items() if expires <= now]:
            del self._entries[key]
        excess = len(self._entries) - self._size * 3 // 4
        for key in list(itertools.islice(self._entries, max(0, excess))):  # dicts keep insertion order
            del self._entries[key]


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
        self._client_cache_seconds = client_cache_seconds
        # Until the token's `exp`, a Unix time.
        self._verified: ExpiringEntries[str, TokenClaims] = ExpiringEntries(VERIFIED_TOKENS, time.time)
        # Holds the read itself, so requests arriving together while an entry is missing share one store read.
        self._clients: ExpiringEntries[tuple[str, str], asyncio.Future[Client | None]] = ExpiringEntries(
            CACHED_CLIENTS, time.monotonic)

    async def caller(self, token: str, started: float) -> Caller:
        claims = await self._claims(token)
        client = await self.client(claims.tenant_id, claims.client_id)
        if client is None or not client.enabled:
            raise Unauthorized("The API client of this token is disabled or no longer exists.")
        return Caller(client, claims.token_id, started)

    async def _claims(self, token: str) -> TokenClaims:
        if (claims := self._verified.get(token)) is not None:
            return claims
        claims = await self._tokens.verify(token)
        # Verified above, so the payload can be trusted for its expiry time.
        self._verified.put(token, claims, orjson.loads(extract_compact(token.encode()).payload)["exp"])
        return claims

    async def client(self, tenant_id: str, client_id: str) -> Client | None:
        """The API client, as read within the last `client_cache_seconds`."""
        key = (tenant_id, client_id)
        read = self._clients.get(key)
        if read is not None and read.done() and not read.cancelled() and read.exception() is None:
            return read.result()  # the common case, without a wait
        if read is None:
            read = asyncio.ensure_future(blocking(get_client, self._engine, tenant_id, client_id))
            self._clients.put(key, read, time.monotonic() + self._client_cache_seconds)
        try:
            return await asyncio.shield(read)
        except Exception:
            self._clients.discard(key, read)  # a failed read is not remembered
            raise
