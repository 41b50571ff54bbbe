"""Client secrets' hashes, and the hash an unknown client id is checked against (serving/credentials.py).

The test processes hash with cheap parameters (tests/conftest.py): what the product ships is asked of a process of
its own."""

import subprocess
import sys

import pytest
from argon2 import PasswordHasher, extract_parameters, profiles
from argon2.exceptions import VerifyMismatchError

from serving.credentials import DUMMY_HASH, HASH_PARAMETERS, hash_secret, new_secret, secret_matches, unmatchable_hash

SHIPPED = profiles.RFC_9106_LOW_MEMORY  # argon2-cffi's default: argon2id, 64 MiB, 3 passes, 4 lanes


def test_secrets_and_the_unknown_clients_hash_take_the_shipped_parameters() -> None:
    shown = subprocess.run(
        [sys.executable, "-c", "from serving.credentials import DUMMY_HASH, hash_secret\n"
                               "print(hash_secret('a secret'))\nprint(DUMMY_HASH)"],
        capture_output=True, text=True, check=True, timeout=60).stdout.split()
    assert [extract_parameters(stored) for stored in shown] == [SHIPPED, SHIPPED] and HASH_PARAMETERS == SHIPPED
    assert PasswordHasher().verify(shown[0], "a secret")


def test_the_unknown_clients_hash_costs_a_whole_check_and_matches_nothing() -> None:
    secret = new_secret()
    # A mismatch, not an unreadable hash: argon2 ran over the secret, as for a client's wrong secret (an invalid
    # hash would be refused at once, and the time would tell that the id names no client).
    with pytest.raises(VerifyMismatchError):
        PasswordHasher().verify(DUMMY_HASH, secret)
    assert not secret_matches(secret, DUMMY_HASH)
    assert unmatchable_hash(HASH_PARAMETERS) != DUMMY_HASH  # random salt and digest, never a fixed value


def test_a_secret_matches_its_own_hash_only() -> None:
    secret = new_secret()
    stored = hash_secret(secret)
    assert stored.startswith("$argon2id$") and secret not in stored
    assert secret_matches(secret, stored)
    assert not secret_matches(new_secret(), stored)
    assert not secret_matches(secret, "not a hash")
