"""Client secrets: 256 random bits, shown once, kept only as an argon2id hash."""

import base64
import os
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from argon2.low_level import ARGON2_VERSION

_hasher = PasswordHasher()  # argon2id with the library's current recommended cost


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return _hasher.hash(secret)


def secret_matches(secret: str, secret_hash: str) -> bool:
    try:
        return _hasher.verify(secret_hash, secret)
    except (VerificationError, InvalidHashError):
        return False


def _unmatchable_hash() -> str:
    """An argon2id hash in the hasher's parameters whose salt and digest are random bytes: no secret matches it, and
    checking one costs a whole argon2 run, as against a client's hash. Written out rather than hashed, since hashing
    cost every process that imports this module (every `pia admin` command included) about 0.2 s of CPU."""
    def encoded(size: int) -> str:
        return base64.b64encode(os.urandom(size)).decode().rstrip("=")

    return (f"$argon2id$v={ARGON2_VERSION}$m={_hasher.memory_cost},t={_hasher.time_cost},p={_hasher.parallelism}"
            f"${encoded(_hasher.salt_len)}${encoded(_hasher.hash_len)}")


# Verified against when the client does not exist, so an unknown id costs as much as a wrong secret.
DUMMY_HASH = _unmatchable_hash()
