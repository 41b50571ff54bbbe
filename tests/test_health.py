"""GET /healthcheck probes the database."""

import httpx

from serving.app import create_app
from settings import Settings
from store.engine import create_engine
from tests.conftest import LiveServer, free_port


def test_healthy_database_is_200(http) -> None:
    response = http.get("/healthcheck")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["checks"]["database"]["status"] == "ok"
    assert body["checks"]["database"]["latencyMs"] >= 0


def test_unreachable_database_is_503(tmp_path) -> None:
    # Nothing listens on port 1 of loopback: a PostgreSQL server that refuses connections.
    settings = Settings(data_dir=tmp_path, database_url="postgresql+psycopg://postgres@127.0.0.1:1/nothing")
    live = LiveServer(create_app(settings, create_engine(settings), issuer="http://x"), free_port())
    live.start()
    try:
        response = httpx.get(f"{live.url}/healthcheck", timeout=10)
        assert response.status_code == 503
        assert response.json()["status"] == "unavailable"
        assert response.json()["checks"]["database"]["status"] == "unavailable"
    finally:
        live.stop()
