"""Token signing keys (service-wide): one current key, older ones kept until their tokens expire."""

from datetime import datetime, timedelta

import sqlalchemy as sa

from store.ids import utc_now
from store.schema import signing_keys


def add_current_key(engine: sa.Engine, kid: str, private_jwk: str) -> None:
    """Make kid the signing key; the previous current key is retired but stays verifiable."""
    now = utc_now()
    with engine.begin() as conn:
        conn.execute(signing_keys.update().where(signing_keys.c.retired_time.is_(None))
                     .values(retired_time=now))
        conn.execute(signing_keys.insert().values(kid=kid, private_jwk=private_jwk, created_time=now))


def published_keys(engine: sa.Engine, token_lifetime: timedelta) -> list[sa.Row]:
    """The current key first, then retired keys whose last tokens may still be unexpired."""
    cutoff: datetime = utc_now() - token_lifetime
    with engine.connect() as conn:
        return list(conn.execute(
            sa.select(signing_keys)
            .where(sa.or_(signing_keys.c.retired_time.is_(None), signing_keys.c.retired_time > cutoff))
            .order_by(signing_keys.c.retired_time.is_not(None), signing_keys.c.created_time.desc())))
