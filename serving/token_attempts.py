"""Budgets for token requests that cost an argon2 check: per source address, and per client id from one address.

An attempt is charged before its secret is checked, whatever the outcome, so fifty simultaneous attempts cannot
all slip under a count that has not been written yet. Attempts answered from the verifier's memory of recently
checked secrets are never charged: a well-behaved client pays about one attempt per cache period.

The client budget is kept per source address so that an attacker repeating a client id cannot lock its
legitimate owner out from anywhere else.
"""

import hashlib
import ipaddress
from dataclasses import dataclass
from typing import Literal

from serving.ratelimit import RateLimiter

_IPV6_NETWORK_BITS = 64  # one IPv6 subscriber usually holds a whole /64; count it as one address


def address_key(remote_addr: str | None) -> str:
    if not remote_addr:
        return "unknown"
    try:
        address = ipaddress.ip_address(remote_addr)
    except ValueError:
        return remote_addr
    if address.version == 6:
        return str(ipaddress.ip_network(f"{address}/{_IPV6_NETWORK_BITS}", strict=False))
    return str(address)


@dataclass(frozen=True)
class Refusal:
    budget: Literal["address", "client"]
    limit: int
    retry_after_seconds: int


class TokenAttemptLimits:
    def __init__(self, limiter: RateLimiter, per_address: int, per_client: int) -> None:
        self._limiter = limiter
        self._per_address = per_address
        self._per_client = per_client

    async def charge(self, remote_addr: str | None, tenant_id: str, client_id: str) -> Refusal | None:
        """Count one attempt against both budgets; which one is spent, if any."""
        address = address_key(remote_addr)
        state = await self._limiter.hit(f"token-attempts:address:{address}", self._per_address)
        if not state.allowed:
            return Refusal("address", self._per_address, state.reset_seconds)
        # Both ids come from the caller: a fixed-size digest keeps the key short whatever they sent.
        client = hashlib.blake2b(f"{tenant_id}\0{client_id}".encode(), digest_size=16).hexdigest()
        state = await self._limiter.hit(f"token-attempts:client:{client}:{address}", self._per_client)
        return None if state.allowed else Refusal("client", self._per_client, state.reset_seconds)
