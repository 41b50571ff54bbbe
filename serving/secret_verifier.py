"""Checking presented client secrets without starving the service.

An argon2id check is expensive by design: with the library's parallelism of 4, libargon2 runs four threads of
its own for a few hundred milliseconds. Checks run on a small pool of their own, so the default thread pool
(store calls, health checks) and the event loop stay free; a bounded number may wait, and more are refused at
once. A secret that passed is remembered briefly, so a client asking for tokens again costs no hash."""

import asyncio
import hashlib
import hmac
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor

from cachetools import TTLCache

from serving.credentials import secret_matches

# Successful checks only, so an attacker without a valid secret cannot fill it.
_PROVEN_SECRETS_MAX = 10_000

# (tenant id, client id, keyed digest of the presented secret); the secret itself is never kept.
Proof = tuple[str, str, bytes]


class VerifierBusy(Exception):
    """As many checks as allowed are already running or waiting."""


class SecretVerifier:
    def __init__(self, workers: int, max_pending: int, cache_seconds: float) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="secret-check")
        # Released by the worker thread when a check ends, so a cancelled request keeps its slot until then.
        self._slots = threading.BoundedSemaphore(max_pending)
        # Proof -> the stored hash the secret was checked against; a changed hash does not match.
        self._proven: TTLCache[Proof, str] = TTLCache(maxsize=_PROVEN_SECRETS_MAX, ttl=cache_seconds)
        self._digest_key = secrets.token_bytes(32)
        self.argon2_checks = 0  # how many checks cost an argon2 hash; observable for tests and operators

    def proof(self, tenant_id: str, client_id: str, secret: str) -> Proof:
        digest = hmac.new(self._digest_key, secret.encode(), hashlib.sha256).digest()
        return tenant_id, client_id, digest

    def recently_proven(self, proof: Proof) -> bool:
        """The secret passed a check lately (against the hash stored then, which `matches` compares)."""
        return proof in self._proven

    async def matches(self, proof: Proof, secret: str, secret_hash: str) -> bool:
        if self._proven.get(proof) == secret_hash:
            return True
        self._proven.pop(proof, None)  # proven against a hash that has since changed
        if not self._slots.acquire(blocking=False):
            raise VerifierBusy()
        try:
            check = self._pool.submit(secret_matches, secret, secret_hash)
        except BaseException:
            self._slots.release()
            raise
        check.add_done_callback(lambda _: self._slots.release())
        self.argon2_checks += 1
        if await asyncio.wrap_future(check):
            self._proven[proof] = secret_hash
            return True
        return False

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
