"""Token signing keys (service-wide): one current key, older ones kept until their tokens expire.

Private keys are kept sealed (db/secrets.py); these functions seal on write and open on read.
"""

from datetime import datetime, timedelta

import sqlalchemy as sa

from db.ids import utc_now
from db.schema import signing_keys
from db.secrets import SecretBox


def add_current_key(engine: sa.Engine, box: SecretBox, kid: str, private_jwk: str) -> None:
    """Make kid the signing key; the previous current key is retired but stays verifiable."""
    now = utc_now()
    sealed = box.seal(private_jwk)
    with engine.begin() as conn:
        conn.execute(signing_keys.update().where(signing_keys.c.retired_time.is_(None))
                     .values(retired_time=now))
        conn.execute(signing_keys.insert().values(kid=kid, sealed_private_jwk=sealed, created_time=now))


def published_keys(engine: sa.Engine, box: SecretBox, token_lifetime: timedelta) -> list[str]:
    """Private JWKs: the current key first, then retired keys whose last tokens may still be unexpired."""
    cutoff: datetime = utc_now() - token_lifetime
    with engine.connect() as conn:
        sealed = conn.execute(
            sa.select(signing_keys.c.sealed_private_jwk)
            .where(sa.or_(signing_keys.c.retired_time.is_(None), signing_keys.c.retired_time > cutoff))
            .order_by(signing_keys.c.retired_time.is_not(None), signing_keys.c.created_time.desc())).scalars()
        return [box.open(value) for value in sealed]


def prepare_signing_keys(engine: sa.Engine, box: SecretBox) -> None:
    """A process's first step with the keys: check that box opens them (SecretKeyError if not, before anything
    is sealed with a wrong key), then seal the keys a release before revision 0004 kept in plain text."""
    with engine.begin() as conn:
        newest_sealed = conn.execute(sa.select(signing_keys.c.sealed_private_jwk)
                                     .where(signing_keys.c.sealed_private_jwk.is_not(None))
                                     .order_by(signing_keys.c.created_time.desc()).limit(1)).scalar()
        if newest_sealed is not None:
            box.open(newest_sealed)
        plain = conn.execute(sa.select(signing_keys.c.kid, signing_keys.c.private_jwk)
                             .where(signing_keys.c.private_jwk.is_not(None))).all()
        for kid, private_jwk in plain:
            # Compare-and-set, so two processes starting at once seal each row once.
            conn.execute(signing_keys.update()
                         .where(signing_keys.c.kid == kid, signing_keys.c.private_jwk == private_jwk)
                         .values(sealed_private_jwk=box.seal(private_jwk), private_jwk=None))
