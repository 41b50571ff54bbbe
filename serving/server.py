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
from serving.heap import collect_young_garbage_less_often, freeze_startup_heap
from serving.roles import Roles
from settings import Settings

log = logging.getLogger("pia.serve")

def base_url(host: str, port: int) -> str:
    return f"http://{host}:{port}"


def run(settings: Settings, engine: sa.Engine, host: str, port: int, roles: Roles, settled_heap: bool = True) -> None:
    """Serve the API with `roles` beside it, after saying which they are (and what to start beside it).
    settled_heap: settle the heap once everything has started (serving.heap); benchmarks.request_overhead measures
    the difference."""
    app = create_app(settings, engine, issuer=settings.issuer or base_url(host, port),
                     run_pipeline=roles.pipeline_worker, run_bridge=roles.event_bridge, run_relay=roles.event_relay)
    if settled_heap:
        @app.before_serving  # the last of them: after the app's own threads, pools and workers have started
        async def settle_heap() -> None:
            freeze_startup_heap()
            collect_young_garbage_less_often()

    try:
        app.extensions["pia"].tokens.read_keys()
    except SecretKeyError as error:
        raise click.ClickException(f"cannot read the token signing keys: {error}") from None
    for line in roles.startup_lines(settings):  # logged, so a JSON log stays all JSON
        log.info(line)
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
