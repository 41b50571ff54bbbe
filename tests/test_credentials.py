"""Client secrets' hashes, and the hash an unknown client id is checked against (serving/credentials.py)."""

import pytest
from argon2 import PasswordHasher, extract_parameters
from argon2.exceptions import VerifyMismatchError

from serving.credentials import DUMMY_HASH, _unmatchable_hash, hash_secret, new_secret, secret_matches


def test_the_unknown_clients_hash_has_a_clients_parameters_and_costs_a_whole_check() -> None:
    secret = new_secret()
    assert extract_parameters(DUMMY_HASH) == extract_parameters(hash_secret(secret))
    # A mismatch, not an unreadable hash: argon2 ran over the secret, as for a client's wrong secret (an invalid
    # hash would be refused at once, and the time would tell that the id names no client).
    with pytest.raises(VerifyMismatchError):
        PasswordHasher().verify(DUMMY_HASH, secret)
    assert not secret_matches(secret, DUMMY_HASH)
    assert _unmatchable_hash() != _unmatchable_hash()  # random salt and digest, never a fixed value


def test_a_secret_matches_its_own_hash_only() -> None:
    secret = new_secret()
    stored = hash_secret(secret)
    assert stored.startswith("$argon2id$") and secret not in stored
    assert secret_matches(secret, stored)
    assert not secret_matches(new_secret(), stored)
    assert not secret_matches(secret, "not a hash")
