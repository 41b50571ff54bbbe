"""Serving the app with Hypercorn."""

import asyncio
import logging
import signal

import click
import sqlalchemy as sa
from hypercorn.asyncio import serve
from hypercorn.config import Config

from db.secrets import SecretKeyError
from serving.app import create_app
from settings import Settings


def base_url(host: str, port: int) -> str:
    return f"http://{host}:{port}"


def run(settings: Settings, engine: sa.Engine, host: str, port: int) -> None:
    app = create_app(settings, engine, issuer=settings.issuer or base_url(host, port),
                     run_pipeline=settings.runs_inprocess_worker,
                     # The DuckDB file is this process's: its bridge runs here, from Kafka when one is set.
                     run_bridge=settings.is_embedded)
    try:
        app.extensions["pia"].tokens.read_keys()
    except SecretKeyError as error:
        raise click.ClickException(f"cannot read the token signing keys: {error}") from None
    config = Config()
    config.bind = [f"{host}:{port}"]
    # pia's own request line (serving/app.py) replaces Hypercorn's access log; Hypercorn's other lines go through
    # the process's logging, in its format.
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = 10

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await serve(app, config, shutdown_trigger=stop.wait)

    asyncio.run(main())
