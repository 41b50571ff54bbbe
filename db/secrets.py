"""Secrets at rest: sealed with Fernet keys from the environment, so a database dump alone reveals none.

The key list comes from PIA_SECRET_KEY (comma-separated; the first seals, every one opens), or, for the embedded
default without it, from a key file generated once into the data dir. Store functions that keep a secret seal
it on write and open it on read; every column that holds one is listed in SEALED_COLUMNS so that
`pia admin rotate-secret-key` can re-encrypt them all under the first key.
"""

import os
from pathlib import Path

import sqlalchemy as sa
from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from db.schema import ecom_store_event_destinations, signing_keys
from db.tenancy import across_tenants
from settings import Settings

KEY_FILE = "secret.key"
_EVERY_SECRET = "the secret key is rotated for every tenant's secrets at once"
# Every column holding sealed secrets, each in a table whose primary key is one column.
SEALED_COLUMNS: tuple[sa.Column, ...] = (signing_keys.c.sealed_private_jwk,
                                         ecom_store_event_destinations.c.sealed_secret)


class SecretKeyError(Exception):
    """The secret key is missing or malformed, or does not open what the store holds."""


def new_secret_key() -> str:
    return Fernet.generate_key().decode()


class SecretBox:
    """Seals with the first key, opens with any of them."""

    def __init__(self, keys: str, source: str) -> None:
        """keys: comma-separated Fernet keys; source: where they came from, named in errors."""
        self.source = source
        fernets = []
        for position, key in enumerate((part.strip() for part in keys.split(",")), start=1):
            try:
                fernets.append(Fernet(key))
            except ValueError:
                raise SecretKeyError(f"{source}: key {position} is not a Fernet key (32 url-safe base64-encoded "
                                     "bytes); make one with `pia admin new-secret-key`") from None
        self._fernet = MultiFernet(fernets)

    def seal(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode()).decode()

    def open(self, sealed: str) -> str:
        try:
            return self._fernet.decrypt(sealed.encode()).decode()
        except InvalidToken:
            raise self._unreadable() from None

    def reseal(self, sealed: str) -> str:
        """The same secret sealed with the first key."""
        try:
            return self._fernet.rotate(sealed.encode()).decode()
        except InvalidToken:
            raise self._unreadable() from None

    def _unreadable(self) -> SecretKeyError:
        return SecretKeyError(f"a stored secret was sealed with a key that {self.source} does not hold; set the "
                              "key it was sealed with (older keys may follow the first, comma-separated)")


def secret_box(settings: Settings) -> SecretBox:
    """The configured keys; PostgreSQL needs PIA_SECRET_KEY, since every replica must hold the same key."""
    configured = settings.secret_key.get_secret_value()
    if configured.strip():
        return SecretBox(configured, "PIA_SECRET_KEY")
    if not settings.is_embedded:
        raise SecretKeyError("PIA_SECRET_KEY is required with PostgreSQL (every process must share it); make one "
                             "with `pia admin new-secret-key`")
    path = settings.data_dir / KEY_FILE
    return SecretBox(_read_or_create_key_file(path), str(path))


def _read_or_create_key_file(path: Path) -> str:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f".{KEY_FILE}.{os.getpid()}")
        # Written whole under another name, then linked into place: a process starting at the same moment
        # either wins the link or reads the winner's complete file, never a half-written one.
        descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as draft_file:
            draft_file.write(new_secret_key() + "\n")
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    return path.read_text()


def reseal_all(engine: sa.Engine, box: SecretBox) -> int:
    """Re-encrypt every stored secret with the first key; returns how many. Afterwards older keys can go."""
    resealed = 0
    for column in SEALED_COLUMNS:
        (key_column,) = column.table.primary_key.columns
        with engine.begin() as conn:
            rows = conn.execute(across_tenants(sa.select(key_column, column).where(column.is_not(None)),
                                               _EVERY_SECRET)).all()
            for key, sealed in rows:
                # Compare-and-set: a value another process changed meanwhile is left as that process wrote it.
                resealed += conn.execute(across_tenants(column.table.update()
                                                        .where(key_column == key, column == sealed)
                                                        .values({column.name: box.reseal(sealed)}),
                                                        _EVERY_SECRET)).rowcount
    return resealed
