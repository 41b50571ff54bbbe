"""The `pia` command: every role of the service, each room mounting its own commands."""

import asyncio
import importlib
import signal
import sys

import click

from serving.logs import configure_logging
from settings import Settings


class RoomCommands(click.Group):
    """A group whose subcommands, each room's own, are imported only when one is run or listed: `pia upload` on a
    planner's laptop need not load the server, the pipeline and the event bridge first (seconds of start-up)."""

    def __init__(self, *args, rooms: dict[str, str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rooms = rooms  # command name -> "module:attribute"

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.rooms])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.rooms:
            return super().get_command(ctx, cmd_name)
        module, attribute = self.rooms[cmd_name].split(":")
        return getattr(importlib.import_module(module), attribute)


@click.group(cls=RoomCommands, rooms={
    "admin": "serving.admin:admin", "demo": "serving.demo:demo", "worker": "serving.worker_process:worker",
    "pipeline": "pipeline.cli:pipeline", "upload": "pia_client.cli:upload"})
@click.pass_context
def main(context: click.Context) -> None:
    """pia: the Public Integration API of the retail back office."""
    # PIA_LOG_FORMAT, else JSON lines, but readable text for `pia demo` run on a terminal.
    demo_on_terminal = context.invoked_subcommand == "demo" and sys.stderr.isatty()
    configure_logging(Settings().log_format or ("text" if demo_on_terminal else "json"))


@main.group()
def db() -> None:
    """The database schema."""


@db.command("upgrade")
def db_upgrade() -> None:
    """Create the schema or migrate it to the newest revision, keeping the data."""
    from db.engine import create_engine
    from db.migrate import current_revision, upgrade

    engine = create_engine(Settings())
    before = current_revision(engine)
    upgrade(engine)
    click.echo(f"schema at revision {current_revision(engine)} (was {before or 'empty'})")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=int)
def serve(host: str, port: int) -> None:
    """Serve the API (embedded DuckDB by default, PostgreSQL when PIA_DATABASE_URL names one)."""
    from db.engine import create_engine
    from db.migrate import current_revision, head_revision, upgrade
    from serving.roles import Roles
    from serving.server import run

    settings = Settings()
    engine = create_engine(settings)
    if settings.is_embedded:
        upgrade(engine)
    elif current_revision(engine) != head_revision():
        raise click.ClickException("The database schema is not current: run `pia db upgrade` first.")
    run(settings, engine, host, port, Roles.of_serve(settings))


@main.command()
def bridge() -> None:
    """Deliver change events to each eCom store's destination until stopped (SIGTERM/SIGINT): from Kafka when
    PIA_KAFKA_BOOTSTRAP_SERVERS is set (run several: they share the partitions), else from the outbox."""
    from db.engine import create_engine
    from db.migrate import current_revision, head_revision
    from events.bridge import run_bridge
    from serving.heap import freeze_startup_heap

    settings = Settings()
    engine = create_engine(settings)
    if current_revision(engine) != head_revision():
        raise click.ClickException("The database schema is not current: run `pia db upgrade` first.")

    async def deliver_until_signalled() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        freeze_startup_heap()
        await run_bridge(settings, engine, stop)

    asyncio.run(deliver_until_signalled())

