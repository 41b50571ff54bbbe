"""Rate limits per API client over a rolling minute, with their headers; a lost Redis store fails open."""

import asyncio
import logging
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from click.testing import CliRunner
from limits import RateLimitItem, WindowStats

from serving.app import create_app
from serving.cli import main
from serving.ratelimit import WINDOW_SECONDS, InProcessWindows, RollingWindowLimiter
from tests import conftest
from tests.conftest import ENV, LiveServer, bearer, client_of, free_port, get_token, service_missing, wait_for

pytestmark = pytest.mark.without_shop

REDIS_SERVER = Path("/usr/bin/redis-server")
STORE_TIMEOUT_SECONDS = 0.5


def test_headers_on_every_authenticated_response(http, world) -> None:
    token = get_token(http, world, client_of(world, "demand_planning"))
    path = f"/v1/tenants/{world['id']}/demand_planning/limits"
    first, second = (http.get(path, headers=bearer(token)) for _ in range(2))
    assert first.headers["X-RateLimit-Limit"] == "1800"
    assert int(first.headers["X-RateLimit-Remaining"]) - 1 == int(second.headers["X-RateLimit-Remaining"])
    assert 0 < int(first.headers["X-RateLimit-Reset"]) <= 60
    assert first.json()["rateLimitPerMinute"] == 1800


def test_the_reset_a_shared_store_gives_is_never_beyond_the_window() -> None:
    """A shared store's times come from its clock, rounded: a window it started a moment 'later' than ours must not
    read 61 s (the headers test saw that once on Redis)."""
    limiter = RollingWindowLimiter("redis://127.0.0.1:1")  # never reached: its count is replaced below

    async def count(item: RateLimitItem, key: str) -> tuple[bool, WindowStats]:
        return True, WindowStats(reset_time=time.time() + WINDOW_SECONDS + 0.5, remaining=9)

    limiter._count = count
    state = asyncio.run(limiter.hit("client", 10))
    assert (state.remaining, state.reset_seconds) == (9, WINDOW_SECONDS)


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


def test_in_process_window_rolls_request_by_request_and_forgets_idle_keys(monkeypatch) -> None:
    monkeypatch.setattr("serving.ratelimit.SWEEP_EVERY_HITS", 6)
    now = [1000.0]
    windows = InProcessWindows(clock=lambda: now[0])
    assert windows.hit("k", 2) == (True, 1, WINDOW_SECONDS)
    now[0] += 10
    assert windows.hit("k", 2) == (True, 0, WINDOW_SECONDS - 10)
    refused = windows.hit("k", 2)  # not recorded: the window still holds the two requests
    assert refused == (False, 0, WINDOW_SECONDS - 10)
    now[0] += WINDOW_SECONDS - 10  # the first request leaves the window, the second stays
    assert windows.hit("k", 2) == (True, 0, 10)
    assert windows.hit("k", 3)[:2] == (True, 2)  # a new limit starts a window of its own, as `limits` keyed them
    now[0] += WINDOW_SECONDS
    windows.hit("other", 1)  # the 6th hit sweeps: both windows of "k" are a whole window old
    assert set(windows._windows) == {("other", 1)}


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


class PrivateRedis:
    """A redis-server of the test's own on a fixed free port, to kill, pause and start again."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        self._process: subprocess.Popen | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            [str(REDIS_SERVER), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL)
        wait_for(self._answers, 10, f"redis-server on port {self.port} to answer PING")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as probe:
                probe.sendall(b"PING\r\n")
                return probe.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        if self._process is not None:
            self._process.kill()  # SIGKILL: gone without a word to its clients
            self._process.wait()

    def pause(self) -> None:
        """Still accepting connections, never answering: a store that hangs."""
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    if not REDIS_SERVER.exists():
        service_missing(f"{REDIS_SERVER} is not installed")
    redis = PrivateRedis()
    redis.start()
    yield redis
    redis.resume()
    redis.kill()


@pytest.fixture
def redis_limited_server(private_redis, settings, engine) -> Iterator[LiveServer]:
    """The real app over a socket, counting requests in the private Redis."""
    limited = conftest.without_upload_workers(settings).with_changes(rate_limit={"storage_url": private_redis.url,
                                                "storage_timeout_seconds": STORE_TIMEOUT_SECONDS})
    port = free_port()
    live = LiveServer(create_app(limited, engine, issuer=f"http://127.0.0.1:{port}"), port)
    live.start()
    yield live
    live.stop()


class TimedCaller:
    """One API client's requests to the cheap route, each with its duration."""

    def __init__(self, http: httpx.Client, world: dict) -> None:
        self._http = http
        self._path = f"/v1/tenants/{world['id']}/demand_planning/limits"
        self._headers = bearer(get_token(http, world, client_of(world, "demand_planning")))

    def get(self) -> tuple[httpx.Response, float]:
        started = time.perf_counter()
        response = self._http.get(self._path, headers=self._headers)
        return response, time.perf_counter() - started

    def counted(self) -> httpx.Response | None:
        response, _ = self.get()
        return response if "X-RateLimit-Remaining" in response.headers else None


def _remaining(response: httpx.Response) -> int:
    return int(response.headers["X-RateLimit-Remaining"])


def _store_messages(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records
            if record.name == "serving.ratelimit" and text in record.getMessage()]


def _assert_uncounted_and_prompt(outage: list[tuple[httpx.Response, float]], healthy_seconds: float) -> None:
    """Every request answered 200, allowed without a count, and none delayed beyond the store's timeout."""
    assert [response.status_code for response, _ in outage] == [200] * len(outage)
    assert all(response.headers["X-RateLimit-Limit"] == "1800" and "X-RateLimit-Remaining" not in response.headers
               and "X-RateLimit-Reset" not in response.headers for response, _ in outage)
    # One connect or one command may wait for the timeout; a generous margin over a healthy request on top.
    assert max(seconds for _, seconds in outage) < 2 * STORE_TIMEOUT_SECONDS + 10 * healthy_seconds


def test_killed_redis_fails_open_with_one_warning_and_counting_resumes(
        private_redis, redis_limited_server, world, caplog, monkeypatch) -> None:
    caplog.set_level(logging.WARNING, logger="serving.ratelimit")
    # Every request tries the dead store (none is spared by the pause between attempts): still one warning.
    monkeypatch.setattr("serving.ratelimit.STORE_RETRY_SECONDS", 0.0)
    with httpx.Client(base_url=redis_limited_server.url, timeout=30) as http:
        caller = TimedCaller(http, world)
        counted = [caller.get() for _ in range(3)]
        first = _remaining(counted[0][0])
        assert [_remaining(response) for response, _ in counted] == [first, first - 1, first - 2]

        private_redis.kill()
        outage = [caller.get() for _ in range(10)]
        _assert_uncounted_and_prompt(outage, healthy_seconds=max(seconds for _, seconds in counted))
        lost = _store_messages(caplog, "unreachable")
        assert len(lost) == 1 and lost[0].levelno == logging.WARNING

        private_redis.start()  # same port, empty: the count starts again from the full budget
        back = wait_for(caller.counted, 10, "requests to be counted again after Redis came back")
        assert _remaining(caller.get()[0]) == _remaining(back) - 1
        assert len(_store_messages(caplog, "reachable again")) == 1
        assert len(_store_messages(caplog, "unreachable")) == 1


def test_hanging_redis_delays_requests_at_most_its_timeout(private_redis, redis_limited_server, world) -> None:
    with httpx.Client(base_url=redis_limited_server.url, timeout=30) as http:
        caller = TimedCaller(http, world)
        counted = [caller.get() for _ in range(3)]
        assert _remaining(counted[0][0]) - 2 == _remaining(counted[2][0])

        private_redis.pause()
        _assert_uncounted_and_prompt([caller.get() for _ in range(5)],
                                     healthy_seconds=max(seconds for _, seconds in counted))

        private_redis.resume()
        back = wait_for(caller.counted, 10, "requests to be counted again after Redis answered again")
        assert _remaining(caller.get()[0]) == _remaining(back) - 1
