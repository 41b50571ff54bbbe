"""Client secrets: 256 random bits, shown once, kept only as an argon2id hash."""

import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

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


# Verified against when the client does not exist, so an unknown id costs as much as a wrong secret.
DUMMY_HASH = hash_secret(new_secret())
