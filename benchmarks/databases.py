"""Scratch databases for a benchmark run: a PostgreSQL database on the server of PIA_TEST_POSTGRES_URL, or the
embedded DuckDB file in a temporary data folder."""

import argparse
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from pydantic_settings import BaseSettings, SettingsConfigDict


class ScratchServices(BaseSettings):
    """Where the tests and benchmarks make their scratch databases and find the services they try; not the
    product's settings (`settings.Settings`), though named alike (`PIA_*`)."""

    model_config = SettingsConfigDict(env_prefix="PIA_", frozen=True)

    # When set, tests that need an external service fail instead of skipping (.ci/run sets it).
    require_services: bool = False
    # Tests and benchmarks create (and drop) fresh databases through this server.
    test_postgres_url: str = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    # The shared rate-limit store the tests try across two limiter instances.
    test_redis_url: str = "redis://127.0.0.1:6379"


@contextmanager
def scratch_postgres_url(prefix: str = "pia_bench") -> Iterator[str]:
    """The URL of a new, empty database, dropped (with any connection still open to it) at the end."""
    server = ScratchServices().test_postgres_url
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


@contextmanager
def backend_database(backend: str) -> Iterator[tuple[str, Path]]:
    """(database URL, data folder) of a fresh store for the backend: "" means the embedded DuckDB file in the
    folder; "postgresql" gets a scratch database. Both are removed at the end."""
    with tempfile.TemporaryDirectory(prefix="pia-bench-") as folder:
        if backend == "duckdb":
            yield "", Path(folder)
        else:
            with scratch_postgres_url() as url:
                yield url, Path(folder)


def run_timed_on_a_backend(description: str, run: Callable[[str, str, Path, float], None],
                           default_seconds: float) -> None:
    """The command line of a benchmark that measures each target for some seconds on a fresh store of one
    backend: `run(backend, database URL, data folder, seconds)`."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["duckdb", "postgresql"], default="duckdb")
    parser.add_argument("--seconds", type=float, default=default_seconds, help="measuring time per target")
    args = parser.parse_args()
    with backend_database(args.backend) as (database_url, folder):
        run(args.backend, database_url, folder, args.seconds)
