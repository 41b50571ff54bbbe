"""The authenticator's memory: a verified token until its `exp`, an API client for `client_cache_seconds`, so a
disabled client's tokens are refused within that time however often they were used before."""

import asyncio
import dataclasses
import time

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey

import serving.authentication as authentication
from contracts.errors import Unauthorized
from db.clients import Client
from serving.authentication import Authenticator, ExpiringEntries
from serving.tokens import TokenClaims

CLIENT = Client(id="c1", tenant_id="t1", name="n", scope="demand_planning", resource_id=None,
                permissions=("DEMAND_PLANNING",), secret_hash="", enabled=True, rate_limit_per_minute=None)
KEY = ECKey.generate_key("P-256")


def token_expiring_at(exp: int) -> str:
    return jwt.encode({"alg": "ES256"}, {"exp": exp, "jti": str(exp)}, KEY, algorithms=["ES256"])


class CountingTokens:
    """Stands for TokenAuthority: every token verifies, and each check is counted."""

    def __init__(self) -> None:
        self.checks = 0

    async def verify(self, token: str) -> TokenClaims:
        self.checks += 1
        return TokenClaims(token_id=token[-8:], client_id=CLIENT.id, tenant_id=CLIENT.tenant_id,
                           scope=CLIENT.scope, resource=None)


@pytest.fixture
def stored(monkeypatch) -> dict[str, Client | None | Exception]:
    """What the store holds for the client (an exception: the read fails); reads are counted under "reads"."""
    held: dict = {"client": CLIENT, "reads": 0}

    def get_client(_engine, tenant_id: str, client_id: str) -> Client | None:
        held["reads"] += 1
        if isinstance(held["client"], Exception):
            raise held["client"]
        return held["client"]

    monkeypatch.setattr(authentication, "get_client", get_client)
    return held


def test_an_entry_lives_until_its_instant_and_a_full_cache_drops_the_expired_then_the_oldest() -> None:
    now = [100.0]
    entries: ExpiringEntries[str, int] = ExpiringEntries(4, lambda: now[0])
    entries.put("a", 1, expires=101.0)
    entries.put("b", 2, expires=200.0)
    assert entries.get("a") == 1
    now[0] = 101.0
    assert entries.get("a") is None  # at its instant it is gone
    entries.put("a", 1, expires=101.5)
    entries.put("c", 3, expires=200.0)
    entries.put("d", 4, expires=200.0)
    now[0] = 102.0
    entries.put("e", 5, expires=200.0)  # full: the expired "a" makes room, the live ones stay
    assert [entries.get(key) for key in "bcde"] == [2, 3, 4, 5]
    entries.put("f", 6, expires=200.0)  # full of live entries: the oldest quarter goes
    assert entries.get("b") is None
    assert [entries.get(key) for key in "cdef"] == [3, 4, 5, 6]
    entries.discard("c", 99)  # another value: kept
    entries.discard("d", 4)
    assert (entries.get("c"), entries.get("d"), len(entries)) == (3, None, 3)


async def test_a_token_is_verified_once_until_its_expiry(stored) -> None:
    tokens = CountingTokens()
    authenticator = Authenticator(tokens, None, client_cache_seconds=60)  # type: ignore[arg-type]
    token = token_expiring_at(int(time.time()) + 1)
    for _ in range(3):
        assert (await authenticator.caller(token, 0.0)).client == CLIENT
    assert tokens.checks == 1
    await asyncio.sleep(max(0.0, jwt.decode(token, KEY).claims["exp"] - time.time()) + 0.05)
    await authenticator.caller(token, 0.0)
    assert tokens.checks == 2  # past its exp the token is checked again (and the check refuses an expired one)


async def test_a_disabled_clients_token_is_refused_within_the_client_cache_time(stored) -> None:
    authenticator = Authenticator(CountingTokens(), None, client_cache_seconds=0.3)  # type: ignore[arg-type]
    token = token_expiring_at(int(time.time()) + 3600)
    await authenticator.caller(token, 0.0)
    stored["client"] = dataclasses.replace(CLIENT, enabled=False)
    disabled_at = time.monotonic()
    while True:
        try:
            await authenticator.caller(token, 0.0)
        except Unauthorized:
            break
        assert time.monotonic() - disabled_at < 0.3 + 0.2, "the disabled client's cached token still works"
        await asyncio.sleep(0.01)
    stored["client"] = None  # deleted: refused too
    await asyncio.sleep(0.35)
    with pytest.raises(Unauthorized):
        await authenticator.caller(token, 0.0)


async def test_requests_together_share_one_client_read_and_a_failed_read_is_not_remembered(stored) -> None:
    authenticator = Authenticator(CountingTokens(), None, client_cache_seconds=60)  # type: ignore[arg-type]
    stored["client"] = OSError("store unreachable")
    with pytest.raises(OSError):
        await authenticator.client("t1", "c1")
    stored["client"] = CLIENT
    assert await asyncio.gather(*(authenticator.client("t1", "c1") for _ in range(5))) == [CLIENT] * 5
    assert stored["reads"] == 2
