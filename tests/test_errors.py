"""One error body everywhere, and a request id on every response."""

import logging
import socket
import uuid

import pytest
from quart import Blueprint

from serving.app import create_app
from settings import Settings
from tests.conftest import bearer, client_of, get_token

pytestmark = pytest.mark.without_shop


def test_unknown_route_is_404_in_the_error_body(http) -> None:
    response = http.get("/v1/nothing/here")
    assert response.status_code == 404
    assert response.json()["error"] == "NOT_FOUND" and response.json()["message"]
    assert response.headers["X-Request-Id"]


def test_wrong_method_is_405_with_allow(http) -> None:
    response = http.delete("/healthcheck")
    assert response.status_code == 405
    assert response.json()["error"] == "METHOD_NOT_ALLOWED"
    assert "GET" in response.headers["Allow"]


def test_every_response_has_a_request_id_and_a_safe_incoming_one_is_kept(http) -> None:
    first, second = http.get("/healthcheck"), http.get("/healthcheck")
    assert first.headers["X-Request-Id"] != second.headers["X-Request-Id"]
    assert http.get("/healthcheck", headers={"X-Request-Id": "abc-123"}).headers["X-Request-Id"] == "abc-123"
    unsafe = http.get("/healthcheck", headers={"X-Request-Id": "a b\tc"}).headers["X-Request-Id"]
    assert unsafe != "a b\tc"


@pytest.fixture
def probe_app(settings: Settings, engine):
    """The real app plus a probe route that fails unexpectedly, to exercise the 500 path."""
    app = create_app(settings, engine, issuer="http://test")
    probes = Blueprint("probes", __name__)

    @probes.get("/probe/crash")
    async def crash():
        raise RuntimeError("secret internals /etc/passwd")

    app.register_blueprint(probes)
    return app


@pytest.mark.parametrize("raw", [b"{oops", b"[1]"])
def test_unparseable_json_is_400_bad_request(http, shared_world, cached_token, raw) -> None:
    token = cached_token(shared_world, client_of(shared_world, "demand_planning"))
    response = http.put(f"/v1/tenants/{shared_world['id']}/demand_planning/sales_forecast_batches/{uuid.uuid4()}",
                        content=raw, headers={**bearer(token), "Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"] == "BAD_REQUEST" and response.json()["message"]


async def test_unexpected_exception_is_500_without_internals(probe_app, caplog) -> None:
    with caplog.at_level(logging.ERROR):
        response = await probe_app.test_client().get("/probe/crash")
    assert response.status_code == 500
    body = await response.get_json()
    request_id = response.headers["X-Request-Id"]
    assert body["error"] == "INTERNAL_SERVER_ERROR" and request_id in body["message"]
    assert "secret internals" not in str(body) and "Traceback" not in str(body)
    assert any(request_id in record.getMessage() and record.exc_info for record in caplog.records)


def test_body_over_the_largest_limit_is_413_limit_exceeded(http) -> None:
    response = http.post("/oauth2/token", content=b"x" * 10_000_001,
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert response.status_code == 413
    body = response.json()
    assert body["error"] == "LIMIT_EXCEEDED"
    assert body["details"] == {"limit": "maxRequestBytes", "max": 10_000_000, "received": 10_000_001}


def test_a_body_the_route_never_reads_is_drained_and_the_connection_kept(server, http, world) -> None:
    """One keep-alive connection: a GET carrying a body its route ignores, then requests without a body (no drain
    needed, none waited for), all answered on the same socket."""
    token = get_token(http, world, client_of(world, "demand_planning"))
    path = f"/v1/tenants/{world['id']}/demand_planning/limits"
    host, port = server.url.removeprefix("http://").split(":")
    head = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        reader = connection.makefile("rb")
        for request in (f"{head}Content-Length: 5\r\n\r\nhello", f"{head}\r\n", f"{head}Content-Length: 0\r\n\r\n"):
            connection.sendall(request.encode())
            status = reader.readline().split()[1]
            headers = {}
            while (line := reader.readline().decode().strip()):
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            body = reader.read(int(headers["content-length"]))
            assert (status, headers.get("connection")) == (b"200", None), headers
            assert b"maxItemsPerBatch" in body
