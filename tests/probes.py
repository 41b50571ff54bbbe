"""A live server of the real app with one extra blueprint: to show how the app treats routes not written yet."""

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from quart import Blueprint

from serving.app import create_app
from settings import Settings
from tests.conftest import LiveServer, free_port, without_upload_workers


@contextmanager
def serving_with(settings: Settings, engine: sa.Engine, blueprint: Blueprint) -> Iterator[LiveServer]:
    port = free_port()
    app = create_app(without_upload_workers(settings), engine, issuer=f"http://127.0.0.1:{port}")
    app.register_blueprint(blueprint)
    live = LiveServer(app, port)
    live.start()
    try:
        yield live
    finally:
        live.stop()
