"""Client secrets: 256 random bits, shown once, kept only as an argon2id hash."""

import base64
import os
import secrets

from argon2 import Parameters, PasswordHasher, profiles
from argon2.exceptions import InvalidHashError, VerificationError

HASH_PARAMETERS = profiles.RFC_9106_LOW_MEMORY  # argon2id, 64 MiB, 3 passes, 4 lanes: the library's default
_hasher = PasswordHasher.from_parameters(HASH_PARAMETERS)


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return _hasher.hash(secret)


def secret_matches(secret: str, secret_hash: str) -> bool:
    try:
        return _hasher.verify(secret_hash, secret)
    except (VerificationError, InvalidHashError):
        return False


def unmatchable_hash(parameters: Parameters) -> str:
    """An argon2id hash in these parameters whose salt and digest are random bytes: no secret matches it, and
    checking one costs a whole argon2 run in them, as against a client's hash. Written out rather than hashed, since
    hashing at import cost every process that imports this module (every `pia admin` command included) 0.2 s."""
    def encoded(size: int) -> str:
        return base64.b64encode(os.urandom(size)).decode().rstrip("=")

    return (f"$argon2id$v={parameters.version}$m={parameters.memory_cost},t={parameters.time_cost},"
            f"p={parameters.parallelism}${encoded(parameters.salt_len)}${encoded(parameters.hash_len)}")


# Verified against when the client does not exist, so an unknown id costs as much as a wrong secret.
DUMMY_HASH = unmatchable_hash(HASH_PARAMETERS)
