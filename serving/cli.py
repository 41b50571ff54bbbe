"""The `pia` command: every role of the service, each room mounting its own commands."""

import asyncio
import logging
import signal

import click

from client.cli import upload
from events.bridge import run_bridge
from pipeline.cli import pipeline, worker
from serving.admin import admin
from serving.demo import demo
from serving.server import run
from settings import Settings
from store.engine import create_engine
from store.migrate import current_revision, head_revision, upgrade


@click.group()
def main() -> None:
    """pia: the Public Integration API of the retail back office."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")


@main.group()
def db() -> None:
    """The database schema."""


@db.command("upgrade")
def db_upgrade() -> None:
    """Create the schema or migrate it to the newest revision, keeping the data."""
    engine = create_engine(Settings())
    before = current_revision(engine)
    upgrade(engine)
    click.echo(f"schema at revision {current_revision(engine)} (was {before or 'empty'})")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=int)
def serve(host: str, port: int) -> None:
    """Serve the API (embedded DuckDB by default, PostgreSQL when PIA_DATABASE_URL names one)."""
    settings = Settings()
    engine = create_engine(settings)
    if settings.is_embedded:
        upgrade(engine)
    elif current_revision(engine) != head_revision():
        raise click.ClickException("The database schema is not current: run `pia db upgrade` first.")
    run(settings, engine, host, port)


@main.command()
def bridge() -> None:
    """Deliver change events to each eCom store's destination until stopped (SIGTERM/SIGINT): from Kafka when
    PIA_KAFKA_BOOTSTRAP_SERVERS is set (run several: they share the partitions), else from the outbox."""
    settings = Settings()
    engine = create_engine(settings)
    if current_revision(engine) != head_revision():
        raise click.ClickException("The database schema is not current: run `pia db upgrade` first.")

    async def deliver_until_signalled() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await run_bridge(settings, engine, stop)

    asyncio.run(deliver_until_signalled())


main.add_command(admin)
main.add_command(demo)
main.add_command(worker)
main.add_command(pipeline)
main.add_command(upload)
