"""Rate limits per API client over a rolling minute, with their headers."""

import asyncio
import socket
import uuid
from urllib.parse import urlsplit

from click.testing import CliRunner

from serving.cli import main
from serving.ratelimit import RollingWindowLimiter
from tests.conftest import ENV, bearer, client_of, get_token, service_missing


def test_headers_on_every_authenticated_response(http, world) -> None:
    token = get_token(http, world, client_of(world, "demand_planning"))
    path = f"/v1/tenants/{world['id']}/demand_planning/limits"
    first, second = (http.get(path, headers=bearer(token)) for _ in range(2))
    assert first.headers["X-RateLimit-Limit"] == "1800"
    assert int(first.headers["X-RateLimit-Remaining"]) - 1 == int(second.headers["X-RateLimit-Remaining"])
    assert 0 < int(first.headers["X-RateLimit-Reset"]) <= 60
    assert first.json()["rateLimitPerMinute"] == 1800


def test_override_per_client_and_429_above_it(http, world, settings) -> None:
    client = client_of(world, "ecom")
    env = {"PIA_DATA_DIR": str(settings.data_dir), "PIA_DATABASE_URL": settings.database_url}
    result = CliRunner().invoke(main, ["admin", "set-rate-limit", client["clientId"], "3"], env=env)
    assert result.exit_code == 0, result.output
    token = get_token(http, world, client)
    path = f"/v1/tenants/{world['id']}/ecom_stores/{client['resource']}/retail_stores"
    statuses = [http.get(path, headers=bearer(token)) for _ in range(4)]
    assert [r.status_code for r in statuses] == [200, 200, 200, 429]
    refused = statuses[-1]
    assert refused.json()["error"] == "TOO_MANY_REQUESTS"
    assert 0 < int(refused.headers["Retry-After"]) <= 60
    assert refused.headers["X-RateLimit-Limit"] == "3" and refused.headers["X-RateLimit-Remaining"] == "0"
    # Another client of the same tenant has its own budget.
    other = client_of(world, "ecom", index=1)
    other_path = f"/v1/tenants/{world['id']}/ecom_stores/{other['resource']}/retail_stores"
    assert http.get(other_path, headers=bearer(get_token(http, world, other))).status_code == 200
    result = CliRunner().invoke(main, ["admin", "set-rate-limit", client["clientId"], "--default"], env=env)
    assert result.exit_code == 0 and '"rateLimitPerMinute": null' in result.output


def test_in_process_limiter_refuses_above_the_limit() -> None:
    async def scenario() -> list[bool]:
        limiter = RollingWindowLimiter("memory://")
        return [(await limiter.hit("k", 2)).allowed for _ in range(3)]

    assert asyncio.run(scenario()) == [True, True, False]


def test_api_replicas_share_the_count_through_redis() -> None:
    """Two limiters on one Redis, as two API replicas would be: the client's budget is shared."""
    address = urlsplit(ENV.test_redis_url)
    try:
        socket.create_connection((address.hostname, address.port or 6379), timeout=2).close()
    except OSError as error:
        service_missing(f"Redis at {ENV.test_redis_url} is not reachable: {error}")

    async def scenario() -> list[bool]:
        replicas = [RollingWindowLimiter(ENV.test_redis_url), RollingWindowLimiter(ENV.test_redis_url)]
        key = f"client:{uuid.uuid4()}"
        return [(await replicas[n % 2].hit(key, 3)).allowed for n in range(4)]

    assert asyncio.run(scenario()) == [True, True, True, False]
