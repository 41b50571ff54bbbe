"""A scratch PostgreSQL database for a benchmark run, on the server of PIA_TEST_POSTGRES_URL."""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from settings import Settings


@contextmanager
def scratch_postgres_url(prefix: str = "pia_bench") -> Iterator[str]:
    """The URL of a new, empty database, dropped (with any connection still open to it) at the end."""
    server = Settings().test_postgres_url
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
