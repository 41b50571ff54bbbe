"""Shared fixtures: the store on both backends, a real server over a socket, tenants with data."""

import asyncio
import concurrent.futures
import contextlib
import gc
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import socket
import ssl
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import sqlalchemy as sa
from argon2 import PasswordHasher, profiles
from hypercorn.asyncio import serve
from hypercorn.config import Config
from hypothesis import settings as hypothesis_settings
from quart import Quart

from benchmarks.databases import ScratchServices, scratch_postgres_url
from db.engine import create_engine
from db.ids import new_id
from db.migrate import upgrade
from db.secrets import new_secret_key
from db.tenancy import install_tenant_guard
from serving import credentials
from serving.app import create_app
from serving.demo import seed_demo_tenant
from serving.heap import freeze_startup_heap
from settings import Settings, TokenSettings, WorkerSettings
from tests import leftover_processes

# Hypothesis's 200 ms deadline per example is a timed assertion: on a loaded two-core machine a pure Polars example
# took 352 ms in CI (test_held_export). Speed is judged by the benchmarks; the properties are judged here.
hypothesis_settings.register_profile("pia", deadline=None)
hypothesis_settings.load_profile("pia")

ENV = ScratchServices()
# Every statement the service makes in this process must name its tenant, or carry the reason it need not
# (db/tenancy.py): one that does not fails where it runs, so the rule cannot be broken silently. Tests' own looks at
# the database (by an order's id, say) are not the service's statements.
TESTS = Path(__file__).parent
install_tenant_guard(exempt_code=TESTS)
T = TypeVar("T")
# One TLS context for every client the tests make: httpx builds one per client otherwise, loading the CA bundle
# (about 30 ms of CPU each: 26 s of a run's CPU over the `http` fixture alone), though the servers here speak
# plain HTTP.
TLS = ssl.create_default_context()
BACKENDS = ("duckdb", "postgresql")
# Client secrets hashed in the test processes take argon2-cffi's cheapest parameters (its profile for tests): at the
# shipped cost (64 MiB, 3 passes, 4 lanes; about 0.2 s of CPU each) the thousands of clients the fixtures seed were
# a sixth of the suite's CPU. A check uses the parameters its hash carries, so these are checked cheaply and every
# full-cost hash at full cost: the unknown client's, those `pia` commands make, and those of the tests about that
# cost (test_token_endpoint_load.py). test_credentials.py holds the shipped parameters to the library's default.
credentials._hasher = PasswordHasher.from_parameters(profiles.CHEAPEST)
# Fixtures of the order tests' web shop (shop, business, document), beside its helpers; pytest's own `pytester`, for
# the tests of the suite's tooling (test_cpu_per_test.py).
pytest_plugins = ("tests.web_shop", "pytester")


def pytest_sessionstart(session: pytest.Session) -> None:
    leftover_processes.adopt_orphans()  # so the check below also finds what outlived a killed parent


def pytest_collection_finish(session: pytest.Session) -> None:
    """Collected, a test process holds every module, Hypothesis and schemathesis, and its servers' objects follow:
    the collector's default thresholds walked that heap over and over (its full passes about 200 ms each). What
    exists now is frozen out of its walks, as a server's start-up heap is, and it runs less often: its time halved
    (8.4 → 4.0 s in four busy test files), about 5 % of the processes' CPU."""
    freeze_startup_heap()
    gc.set_threshold(20_000, 50, 50)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The run fails if any process a test started is still running once every fixture has been torn down."""
    # multiprocessing's resource tracker and fork server of this process (its LiveServers' upload workers use them)
    # end with it.
    own_helpers = {multiprocessing.resource_tracker._resource_tracker._pid,  # private: no public way to ask
                   multiprocessing.forkserver._forkserver._forkserver_pid}
    left = leftover_processes.left_behind(ignored=own_helpers, grace_seconds=10)
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        reporter.write_line("")  # ends the progress line
        reporter.write_sep("=", f"processes the tests left running (now killed): {len(left)}", red=True)
        for process in left:
            reporter.write_line(str(process))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def service_missing(reason: str) -> None:
    """Skip, or fail under PIA_REQUIRE_SERVICES=1 (CI), when a service the test needs is absent."""
    if ENV.require_services:
        pytest.fail(f"required service missing: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped at the end."""
    admin = sa.create_engine(ENV.test_postgres_url, isolation_level="AUTOCOMMIT",
                             connect_args={"connect_timeout": 3})
    name = f"pia_test_{new_id().replace('-', '')[-12:]}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as error:
        service_missing(f"PostgreSQL at {ENV.test_postgres_url} is not reachable: {error.orig}")
    yield sa.make_url(ENV.test_postgres_url).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def postgres_secret_key() -> str:
    """PIA_SECRET_KEY of the session's PostgreSQL database. Its own fixture, as long-lived as the database: pytest
    may tear down the backend's fixtures and build them again when a worker's tests switch backends, and settings
    made afresh must still open the signing keys sealed with it."""
    return new_secret_key()


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="session")
def settings(backend: str, request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Settings:
    data_dir: Path = tmp_path_factory.mktemp(f"data-{backend}")
    if backend == "postgresql":  # replicas share PIA_SECRET_KEY; the embedded default generates one in data_dir
        database_url = request.getfixturevalue("postgres_url")
        secret_key = request.getfixturevalue("postgres_secret_key")
    else:
        database_url, secret_key = "", ""
    # Every test connects from 127.0.0.1; the token-attempt budgets have tests of their own on their own servers.
    # The workers' polls are the shipped ones: uploads and new orders wake them, and each idle poll of a session
    # server (one per backend and test process, alive all session) costs CPU the tests need.
    return Settings(data_dir=data_dir, database_url=database_url, secret_key=secret_key,
                    token=TokenSettings(attempts_per_minute_per_address=100_000,
                                        attempts_per_minute_per_client=100_000))


@pytest.fixture(scope="session")
def engine(settings: Settings) -> Iterator[sa.Engine]:
    engine = create_engine(settings)
    upgrade(engine)
    yield engine
    engine.dispose()


@contextlib.contextmanager
def store_of_its_own(backend: str, request: pytest.FixtureRequest,
                     data_dir: Path) -> Iterator[tuple[Settings, sa.Engine]]:
    """A store of the backend's kind all of its user's own (a fresh DuckDB file or PostgreSQL database), so no
    other worker, such as the session server's, touches what a test sets up."""
    with contextlib.ExitStack() as stack:
        database_url = ""
        if backend == "postgresql":
            request.getfixturevalue("postgres_url")  # skips (or fails) when the server is missing
            database_url = stack.enter_context(scratch_postgres_url("pia_own"))
        settings = Settings(data_dir=data_dir, database_url=database_url, worker=WorkerSettings(poll_seconds=0.1),
                            secret_key=new_secret_key() if database_url else "")
        engine = create_engine(settings)
        upgrade(engine)
        yield settings, engine
        engine.dispose()


@pytest.fixture
def own_store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Settings, sa.Engine]]:
    with store_of_its_own(backend, request, tmp_path) as store:
        yield store


def without_upload_workers(settings: Settings) -> Settings:
    """Settings for a test's own server that takes no uploads: it spawns no upload worker processes (two, about
    1.4 s of CPU, at every server's start), and checks an upload in a thread should one come."""
    return settings.with_changes(upload_processes=0)


def wait_for(condition: Callable[[], T], timeout: float, what: str) -> T:
    """Poll condition() until it returns something truthy, and return that; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout} s for {what}")
        time.sleep(0.02)
    return result


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LiveServer:
    """The real app on Hypercorn, in a thread with its own event loop, reached over a real socket."""

    def __init__(self, app: Quart, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self._config = Config()
        self._config.bind = [f"127.0.0.1:{port}"]
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._serve, args=(app,), daemon=True)

    def _serve(self, app: Quart) -> None:
        self._loop.run_until_complete(serve(app, self._config, shutdown_trigger=self._stop.wait))

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{self.url}/healthcheck", timeout=1, verify=TLS)
                return
            except httpx.TransportError:
                time.sleep(0.05)
        raise RuntimeError("test server did not start")

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=15)

    def call(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run a coroutine on the server's event loop (to reach the app's own objects from a test)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)


@pytest.fixture(scope="session")
def server(settings: Settings, engine: sa.Engine) -> Iterator[LiveServer]:
    port = free_port()
    live = LiveServer(create_app(settings, engine, issuer=f"http://127.0.0.1:{port}", run_pipeline=True), port)
    live.start()
    yield live
    live.stop()


@pytest.fixture
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as client:
        yield client


@pytest.fixture
def world(engine: sa.Engine, request: pytest.FixtureRequest) -> dict[str, Any]:
    """A fresh tenant with the demo's back-office data and a client for every scope (secrets included). In a module
    marked `without_shop`, whose tests never read the web shop (tokens, limits, demand planning), the tenant has the
    grocery data alone: the shop's catalogue is three quarters of the seeding's cost, and these modules seed
    a tenant per test."""
    shop = request.node.get_closest_marker("without_shop") is None
    return seed_demo_tenant(engine, f"tenant {new_id()}", is_test=False, shop=shop)


@pytest.fixture
def other_world(engine: sa.Engine) -> dict[str, Any]:
    return seed_demo_tenant(engine, f"other tenant {new_id()}", is_test=True)


# Read-only tests share these per backend: seeding hashes secrets with argon2, slow by design.
@pytest.fixture(scope="session")
def shared_world(engine: sa.Engine) -> dict[str, Any]:
    return seed_demo_tenant(engine, "shared tenant", is_test=False)


@pytest.fixture(scope="session")
def shared_other_world(engine: sa.Engine) -> dict[str, Any]:
    return seed_demo_tenant(engine, "shared other tenant", is_test=True)


@pytest.fixture(scope="session")
def token_cache() -> dict[str, str]:
    return {}


@pytest.fixture
def cached_token(http: httpx.Client, token_cache: dict[str, str]):
    """A token per client, fetched once per session (tokens live an hour)."""

    def token(world: dict[str, Any], client: dict[str, Any]) -> str:
        if client["clientId"] not in token_cache:
            token_cache[client["clientId"]] = get_token(http, world, client)
        return token_cache[client["clientId"]]

    return token


def client_of(world: dict[str, Any], scope: str, *, permitted: bool = True, index: int = 0) -> dict[str, Any]:
    """The world's client of a scope; for demand_planning, the one with or without the permission."""
    candidates = [c for c in world["clients"] if c["scope"] == scope
                  and (scope != "demand_planning" or bool(c["permissions"]) == permitted)]
    return candidates[index]


def get_token(http: httpx.Client, world: dict[str, Any], client: dict[str, Any]) -> str:
    data = {"grant_type": "client_credentials", "scope": client["scope"], "tenant_id": world["id"]}
    if client["resource"]:
        data["resource"] = client["resource"]
    response = http.post("/oauth2/token", data=data, auth=(client["clientId"], client["clientSecret"]))
    assert response.status_code == 200, response.text
    return response.json()["access_token"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
