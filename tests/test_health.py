"""GET /healthcheck probes the database and reports the pipeline."""

import time

import httpx

from db.engine import create_engine
from serving.app import create_app
from settings import Settings
from tests.conftest import LiveServer, free_port, without_upload_workers


def test_healthy_database_is_200(http) -> None:
    response = http.get("/healthcheck")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["checks"]["database"]["status"] == "ok"
    assert body["checks"]["database"]["latencyMs"] >= 0


def test_pipeline_check_shows_the_inprocess_workers_heartbeat(http, settings) -> None:
    deadline = time.monotonic() + 30
    while (pipeline := http.get("/healthcheck").json()["checks"]["pipeline"])["lastHeartbeat"] is None:
        assert time.monotonic() < deadline, "the in-process worker never beat"
        time.sleep(0.05)
    assert pipeline["status"] == "ok" and pipeline["lastHeartbeat"].endswith("Z")
    assert 0 <= pipeline["heartbeatAgeSeconds"] <= settings.pipeline_stale_seconds
    assert pipeline["oldestPendingAgeSeconds"] is None or pipeline["oldestPendingAgeSeconds"] >= 0


def test_unreachable_database_is_503(tmp_path) -> None:
    # Nothing listens on port 1 of loopback: a PostgreSQL server that refuses connections.
    settings = Settings(data_dir=tmp_path, database_url="postgresql+psycopg://postgres@127.0.0.1:1/nothing")
    live = LiveServer(create_app(without_upload_workers(settings), create_engine(settings), issuer="http://x"),
                      free_port())
    live.start()
    try:
        response = httpx.get(f"{live.url}/healthcheck", timeout=10)
        assert response.status_code == 503
        assert response.json()["status"] == "unavailable"
        assert response.json()["checks"]["database"]["status"] == "unavailable"
        assert response.json()["checks"]["pipeline"] == {"status": "unknown"}
    finally:
        live.stop()
