"""Uploads are checked in worker processes, with a cap on uploads in progress: over real HTTP, on both backends."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from db.batches import get_batch
from db.clients import DEMAND_PLANNING_PERMISSION
from db.engine import create_engine
from db.ids import new_id
from db.migrate import upgrade
from db.tenants import create_tenant
from serving.admin import issue_client
from serving.app import create_app
from serving.demo import seed_demo_tenant
from serving.uploads import UploadWork
from settings import Settings
from tests.batches import body, envelope, forecast_item, new_batch_id
from tests.conftest import LiveServer, bearer, client_of, free_port, get_token, wait_for
from tests.leftover_processes import descendants, still_running

pytestmark = pytest.mark.without_shop

WAIT_SECONDS = 3.0
PIA = str(Path(sys.executable).parent / "pia")


@dataclass
class Narrow:
    """A server with one worker process and one place for an upload being checked; no pipeline worker."""

    server: LiveServer
    uploads: UploadWork
    tenant_id: str
    auth: dict[str, str]

    def put(self, http: httpx.Client, batch_id: str, document: dict[str, Any]) -> httpx.Response:
        raw, headers = body(document)
        return http.put(self.path(batch_id), content=raw, headers={**self.auth, **headers})

    def path(self, batch_id: str) -> str:
        return f"/v1/tenants/{self.tenant_id}/demand_planning/sales_forecast_batches/{batch_id}"


def narrow_server(settings, engine) -> tuple[LiveServer, UploadWork]:
    narrow_settings = settings.model_copy(update={
        "upload_processes": 1, "max_concurrent_uploads": 1, "upload_wait_seconds": WAIT_SECONDS})
    port = free_port()
    app = create_app(narrow_settings, engine, issuer=f"http://127.0.0.1:{port}")
    server = LiveServer(app, port)
    server.start()
    return server, app.extensions["pia"].uploads


@pytest.fixture(scope="module")
def narrow(settings, engine) -> Iterator[Narrow]:
    server, uploads = narrow_server(settings, engine)
    world = seed_demo_tenant(engine, f"uploads {new_id()}", is_test=True)
    with httpx.Client(base_url=server.url) as http:
        token = get_token(http, world, client_of(world, "demand_planning"))
    yield Narrow(server, uploads, world["id"], bearer(token))
    server.stop()


@pytest.fixture
def http(narrow: Narrow) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=narrow.server.url, timeout=30) as client:
        yield client


@contextmanager
def place_taken(narrow: Narrow) -> Iterator[None]:
    """The only place is held, as by an upload being checked, until the block ends."""
    held, release = threading.Event(), asyncio.Event()

    async def hold() -> None:
        async with narrow.uploads.place():
            held.set()
            await release.wait()

    async def let_go() -> None:
        release.set()

    holding = narrow.server.call(hold())
    assert held.wait(10)
    try:
        yield
    finally:
        narrow.server.call(let_go()).result(10)
        holding.result(10)


def staged_files(settings, tenant_id: str) -> list[Path]:
    folder = settings.resolved_staging_dir / tenant_id
    return sorted(folder.glob("*.parquet")) if folder.exists() else []


def test_an_upload_that_finds_no_place_in_time_is_503_with_retry_after(narrow, http, settings, engine) -> None:
    batch_id, document = new_batch_id(), envelope([forecast_item("100001")])
    with place_taken(narrow):
        refused = narrow.put(http, batch_id, document)
    assert refused.status_code == 503, refused.text
    assert refused.headers["Retry-After"] == "3"
    assert refused.json()["error"] == "SERVICE_UNAVAILABLE" and "retry" in refused.json()["message"]
    assert get_batch(engine, narrow.tenant_id, batch_id) is None
    assert all(batch_id not in path.name for path in staged_files(settings, narrow.tenant_id))

    retried = narrow.put(http, batch_id, document)  # the place is free again
    assert retried.status_code == 202, retried.text


def test_an_upload_whose_client_goes_away_is_recorded_whole(narrow, settings, engine) -> None:
    """Quart cancels the request when its client disconnects; what was received is still checked and recorded,
    so no staged file is left without its batch row."""
    batch_id = new_batch_id()
    raw, headers = body(envelope([forecast_item("100001")]))
    request = (f"PUT {narrow.path(batch_id)} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(raw)}\r\n"
               + "".join(f"{name}: {value}\r\n" for name, value in {**narrow.auth, **headers}.items())
               + "\r\n").encode() + raw
    port = httpx.URL(narrow.server.url).port
    with place_taken(narrow), socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(request)
        deadline = time.monotonic() + 30
        while narrow.uploads.waiting == 0 and time.monotonic() < deadline:  # received whole, waiting for a place
            time.sleep(0.01)
        assert narrow.uploads.waiting == 1
        client.shutdown(socket.SHUT_WR)  # the client goes away ...
        assert client.recv(65536) == b""  # ... and the server has seen it: it closed the connection unanswered
    deadline = time.monotonic() + 30
    while (row := get_batch(engine, narrow.tenant_id, batch_id)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    # Recorded whole: the session's server runs a pipeline worker on the same database, which may already have
    # applied it.
    assert row is not None and row.progress in ("PENDING", "PROCESSING", "COMPLETED"), row.progress
    assert (settings.resolved_staging_dir / row.staged_path).exists()


def test_a_worker_process_that_dies_costs_one_upload_a_503(narrow, http) -> None:
    pid = narrow.server.call(narrow.uploads.compute(os.getpid)).result(30)
    assert pid != os.getpid()
    os.kill(pid, signal.SIGKILL)
    document = envelope([forecast_item("100002")])
    lost = narrow.put(http, new_batch_id(), document)
    assert lost.status_code == 503 and lost.json()["error"] == "SERVICE_UNAVAILABLE", lost.text
    assert "nothing was stored" in lost.json()["message"] and lost.headers["Retry-After"]
    assert narrow.put(http, new_batch_id(), document).status_code == 202  # a new pool
    assert narrow.server.call(narrow.uploads.compute(os.getpid)).result(30) not in (pid, os.getpid())


def test_the_worker_processes_stop_with_the_app(settings, engine) -> None:
    server, uploads = narrow_server(settings, engine)
    try:
        pid = server.call(uploads.compute(os.getpid)).result(30)
        os.kill(pid, 0)  # running
    finally:
        server.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_refusals_cross_back_from_the_worker_process_whole(narrow, http) -> None:
    too_many = envelope([forecast_item(str(n), days=1) for n in range(20_001)])
    response = narrow.put(http, new_batch_id(), too_many)
    assert response.status_code == 413
    assert response.json()["details"] == {"limit": "maxItemsPerBatch", "max": 20_000, "received": 20_001}
    bad = envelope([forecast_item("100001", quantity="-1")])
    response = narrow.put(http, new_batch_id(), bad)
    assert response.status_code == 400 and response.json()["details"]["errors"][0]["path"] == "items[0].quantities[0]"


def test_pia_serve_checks_uploads_in_worker_processes_and_stops_them(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    engine = create_engine(settings)
    upgrade(engine)
    tenant_id = create_tenant(engine, "pia serve uploads", is_test=True)
    client_id, secret = issue_client(engine, tenant_id, "planner", "demand_planning", None,
                                     (DEMAND_PLANNING_PERMISSION,))
    engine.dispose()  # the server process owns the DuckDB file from here
    port = free_port()
    process = subprocess.Popen([PIA, "serve", "--port", str(port)], env={**os.environ, "PIA_DATA_DIR": str(tmp_path)},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and process.poll() is None:
                try:
                    http.get("/healthcheck")
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            token = http.post("/oauth2/token", auth=(client_id, secret), data={
                "grant_type": "client_credentials", "scope": "demand_planning", "tenant_id": tenant_id}).json()
            raw, headers = body(envelope([forecast_item("100001")]))
            response = http.put(f"/v1/tenants/{tenant_id}/demand_planning/sales_forecast_batches/{new_batch_id()}",
                                content=raw, headers={**bearer(token["access_token"]), **headers})
            assert response.status_code == 202, response.text
        workers = set(descendants(process.pid))
        assert len(workers) >= Settings().upload_processes
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    # An ended process pytest adopted stays in /proc until waited for (see tests/leftover_processes.py): not running.
    wait_for(lambda: not still_running(workers), 10, "the worker processes to end")
