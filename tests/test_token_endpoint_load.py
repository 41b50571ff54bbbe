"""The token endpoint cannot starve the service: attempt budgets, argon2 on its own threads, proven secrets.

Each test runs its own server (its own budgets and in-process counts) over a real socket. Requests come from
distinct loopback source addresses (127.0.0.2, 127.0.0.3, …), which the server sees as distinct callers.
"""

import asyncio
import dataclasses
import logging
import random
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import sqlalchemy as sa

from db.clients import update_client
from db.ids import new_id
from serving.app import create_app
from serving.credentials import HASH_PARAMETERS, hash_secret, new_secret, unmatchable_hash
from serving.secret_verifier import SecretVerifier
from serving.token_attempts import address_key
from settings import RateLimitSettings, SecretCheckSettings, Settings, TokenSettings
from tests.conftest import ENV, TLS, LiveServer, client_of, free_port, service_missing, without_upload_workers

pytestmark = pytest.mark.without_shop

DEFAULTS = Settings()


@dataclass(frozen=True)
class TokenServer:
    url: str
    verifier: SecretVerifier

    def http(self, source: str = "127.0.0.1") -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60,
                            transport=httpx.HTTPTransport(local_address=source, verify=TLS))


@pytest.fixture
def token_server(settings: Settings, engine: sa.Engine) -> Iterator[Callable[..., TokenServer]]:
    """Start a server on the session's store with the default settings except the ones given."""
    started: list[LiveServer] = []

    def start(**overrides: Any) -> TokenServer:
        port = free_port()
        app = create_app(without_upload_workers(Settings(data_dir=settings.data_dir, database_url=settings.database_url,
                                                         secret_key=settings.secret_key, **overrides)),
                         engine, issuer=f"http://127.0.0.1:{port}")
        live = LiveServer(app, port)
        live.start()
        started.append(live)
        return TokenServer(live.url, app.extensions["pia"].secret_verifier)

    yield start
    for live in started:
        live.stop()


def ask(http: httpx.Client, world: dict, client: dict, secret: str, client_id: str | None = None) -> httpx.Response:
    data = {"grant_type": "client_credentials", "tenant_id": world["id"]}
    return http.post("/oauth2/token", data=data, auth=(client_id or client["clientId"], secret))


def assert_slow_down(response: httpx.Response, says: str) -> None:
    assert response.status_code == 429, response.text
    body = response.json()
    assert body["error"] == "slow_down"
    assert says in body["error_description"] and body["message"] == body["error_description"]
    assert 1 <= int(response.headers["Retry-After"]) <= 60
    assert response.headers["Cache-Control"] == "no-store"


def healthcheck_seconds(http: httpx.Client) -> float:
    started = time.perf_counter()
    response = http.get("/healthcheck")
    elapsed = time.perf_counter() - started
    assert response.status_code == 200, response.text
    return elapsed


def test_healthcheck_keeps_its_latency_while_50_wrong_secrets_arrive(token_server, world, engine) -> None:
    server = token_server()  # the default budgets and pool
    clients = world["clients"]  # five: ten attempts each, never over the client budget
    for client in clients:  # each wrong secret costs what it costs against a hash of the shipped parameters
        update_client(engine, world["id"], client["clientId"], secret_hash=_slow_hash(time_cost=3))
    flood_statuses: list[int] = []

    async def flood() -> None:
        transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        async with httpx.AsyncClient(base_url=server.url, timeout=120, transport=transport) as attacker:
            responses = await asyncio.gather(*(
                attacker.post("/oauth2/token", auth=(clients[n % len(clients)]["clientId"], "wrong"),
                              data={"grant_type": "client_credentials", "tenant_id": world["id"]})
                for n in range(50)))
        flood_statuses.extend(response.status_code for response in responses)

    with server.http() as http:
        healthcheck_seconds(http)  # the connection is open before measuring
        unloaded = statistics.median(healthcheck_seconds(http) for _ in range(20))
        attack = threading.Thread(target=asyncio.run, args=(flood(),))
        attack.start()
        loaded = []
        while attack.is_alive():
            loaded.append(healthcheck_seconds(http))
        attack.join()

    assert len(flood_statuses) == 50 and set(flood_statuses) <= {401, 429}, flood_statuses
    # Each attempt was charged before its check, so exactly the address's budget of them cost argon2.
    budget = DEFAULTS.token.attempts_per_minute_per_address
    assert flood_statuses.count(401) == budget and server.verifier.argon2_checks == budget
    assert len(loaded) >= 10
    p90 = statistics.quantiles(loaded, n=10)[-1]
    print(f"healthcheck unloaded median {unloaded * 1000:.1f} ms, under the flood p90 {p90 * 1000:.1f} ms "
          f"over {len(loaded)} samples")
    assert p90 <= 10 * unloaded + 0.05


def test_client_budget_answers_429_and_spares_its_owner_elsewhere(token_server, shared_world) -> None:
    server = token_server(token=TokenSettings(attempts_per_minute_per_client=3, attempts_per_minute_per_address=100))
    client = client_of(shared_world, "ecom")
    with server.http("127.0.0.2") as attacker, server.http("127.0.0.1") as owner:
        assert [ask(attacker, shared_world, client, "wrong").status_code for _ in range(3)] == [401] * 3
        assert_slow_down(ask(attacker, shared_world, client, "wrong"), "for this client from this address")
        # From that address even the right secret waits now, and costs no hash while it does.
        checks = server.verifier.argon2_checks
        assert ask(attacker, shared_world, client, client["clientSecret"]).status_code == 429
        assert server.verifier.argon2_checks == checks
        # The attacker cannot lock the client's owner out from anywhere else.
        assert ask(owner, shared_world, client, client["clientSecret"]).status_code == 200


def logged_addresses(caplog: pytest.LogCaptureFixture, answers: list[httpx.Response]) -> list[str]:
    """The client address of each answer's request line, in order."""
    lines = {record.request_id: record for record in caplog.records if record.name == "pia.request"}
    return [lines[answer.headers["X-Request-Id"]].client_address for answer in answers]


def test_address_budget_spans_client_ids(token_server, shared_world, caplog) -> None:
    caplog.set_level(logging.INFO, logger="pia.request")
    server = token_server(token=TokenSettings(attempts_per_minute_per_client=100, attempts_per_minute_per_address=3))
    clients = shared_world["clients"][:3]
    with server.http("127.0.0.3") as prober, server.http("127.0.0.4") as neighbour:
        # X-Forwarded-For is not trusted (no PIA_TRUSTED_PROXY_HOPS): claiming other addresses does not give the
        # prober more attempts, and its log lines name the socket's peer.
        answers = []
        for n, client in enumerate(clients):
            forwarded = {"X-Forwarded-For": f"10.0.0.{n}"}
            answers.append(prober.post("/oauth2/token", auth=(client["clientId"], "wrong"), headers=forwarded,
                                       data={"grant_type": "client_credentials", "tenant_id": shared_world["id"]}))
            assert answers[-1].status_code == 401
        assert_slow_down(ask(prober, shared_world, clients[0], "wrong", client_id=new_id()), "from this address")
        assert ask(neighbour, shared_world, clients[0], "wrong").status_code == 401
    assert logged_addresses(caplog, answers) == ["127.0.0.3"] * 3


def test_behind_trusted_proxies_the_budget_and_the_logs_take_the_forwarded_address(token_server, shared_world,
                                                                                    caplog) -> None:
    caplog.set_level(logging.INFO, logger="pia.request")
    server = token_server(token=TokenSettings(attempts_per_minute_per_client=100, attempts_per_minute_per_address=3),
                          trusted_proxy_hops=1)
    client = shared_world["clients"][0]
    # One proxy (this client, from 127.0.0.5) appends the caller's address; what a caller wrote before it is not
    # trusted, so the first caller cannot escape its budget by claiming other addresses.
    first, second = "203.0.113.7", "2001:db8::1"
    with server.http("127.0.0.5") as proxy:
        def through(caller: str, claimed: str | None = None) -> httpx.Response:
            forwarded = f"{claimed}, {caller}" if claimed else caller
            return proxy.post("/oauth2/token", auth=(client["clientId"], "wrong"),
                              headers={"X-Forwarded-For": forwarded},
                              data={"grant_type": "client_credentials", "tenant_id": shared_world["id"]})

        answers = [through(first), through(first, claimed="10.0.0.1"), through(first, claimed="10.0.0.2")]
        assert [answer.status_code for answer in answers] == [401] * 3
        assert_slow_down(through(first, claimed="10.0.0.3"), "from this address")
        # Another caller behind the same proxy has a budget of its own.
        answers.append(through(second))
        assert answers[-1].status_code == 401
    assert logged_addresses(caplog, answers) == [first] * 3 + [second]


def test_replicas_share_the_budgets_through_redis(token_server, shared_world) -> None:
    address = urlsplit(ENV.test_redis_url)
    try:
        socket.create_connection((address.hostname, address.port or 6379), timeout=2).close()
    except OSError as error:
        service_missing(f"Redis at {ENV.test_redis_url} is not reachable: {error}")
    replicas = [token_server(rate_limit=RateLimitSettings(storage_url=ENV.test_redis_url),
                             token=TokenSettings(attempts_per_minute_per_address=3))
                for _ in range(2)]
    # A loopback address of its own, so counts left in Redis by an earlier run do not meet this one.
    source = f"127.{random.randrange(1, 255)}.{random.randrange(256)}.{random.randrange(1, 255)}"
    client = client_of(shared_world, "ecom")
    with replicas[0].http(source) as first, replicas[1].http(source) as second:
        statuses = [ask(http, shared_world, client, "wrong").status_code for http in (first, second, first)]
        assert statuses == [401] * 3
        assert_slow_down(ask(second, shared_world, client, "wrong"), "from this address")


def test_ipv6_callers_are_counted_per_64_bit_network() -> None:
    assert address_key("2001:db8:0:7::1") == address_key("2001:db8:0:7:ffff::2") == "2001:db8:0:7::/64"
    assert address_key("2001:db8:0:8::1") != address_key("2001:db8:0:7::1")
    assert address_key("192.0.2.7") == "192.0.2.7" and address_key(None) == "unknown"


def test_repeat_token_requests_cost_no_argon2(token_server, shared_world) -> None:
    server = token_server()
    client = client_of(shared_world, "demand_planning")
    with server.http() as http:
        assert ask(http, shared_world, client, client["clientSecret"]).status_code == 200
        assert server.verifier.argon2_checks == 1
        for _ in range(5):
            assert ask(http, shared_world, client, client["clientSecret"]).status_code == 200
        assert server.verifier.argon2_checks == 1
        # Another secret for the same client is checked, not served from what was proven.
        assert ask(http, shared_world, client, new_secret()).status_code == 401
        assert server.verifier.argon2_checks == 2


def test_proven_client_is_not_throttled_by_its_address(token_server, shared_world) -> None:
    server = token_server(token=TokenSettings(attempts_per_minute_per_client=1, attempts_per_minute_per_address=1))
    client = client_of(shared_world, "loyalty_programs")
    with server.http() as http:
        assert ask(http, shared_world, client, client["clientSecret"]).status_code == 200  # spends both budgets
        assert_slow_down(ask(http, shared_world, client, "wrong"), "from this address")
        for _ in range(3):
            assert ask(http, shared_world, client, client["clientSecret"]).status_code == 200


def test_disabled_client_is_refused_though_its_secret_was_proven(token_server, world, engine) -> None:
    server = token_server()
    client = client_of(world, "ecom")
    with server.http() as http:
        assert ask(http, world, client, client["clientSecret"]).status_code == 200
        update_client(engine, world["id"], client["clientId"], enabled=False)
        refused = ask(http, world, client, client["clientSecret"])
        assert refused.status_code == 401 and refused.json()["error"] == "invalid_client"
        assert "disabled" in refused.json()["error_description"]
        update_client(engine, world["id"], client["clientId"], enabled=True)
        assert ask(http, world, client, client["clientSecret"]).status_code == 200
    assert server.verifier.argon2_checks == 1


def test_changed_secret_hash_is_not_served_from_memory(token_server, world, engine) -> None:
    server = token_server()
    client = client_of(world, "ecom")
    with server.http() as http:
        assert ask(http, world, client, client["clientSecret"]).status_code == 200
        replacement = new_secret()
        update_client(engine, world["id"], client["clientId"], secret_hash=hash_secret(replacement))
        assert ask(http, world, client, client["clientSecret"]).status_code == 401
        assert server.verifier.argon2_checks == 2
        assert ask(http, world, client, replacement).status_code == 200


def _slow_hash(time_cost: int) -> str:
    """A well-formed argon2id hash of nothing in particular whose check takes time_cost passes over 64 MiB (3: the
    shipped cost)."""
    return unmatchable_hash(dataclasses.replace(HASH_PARAMETERS, time_cost=time_cost))


def test_full_check_queue_refuses_at_once(token_server, world, engine) -> None:
    server = token_server(secret_check=SecretCheckSettings(max_pending=1))
    slow, other = client_of(world, "ecom"), client_of(world, "demand_planning")
    # Its check runs about fifteen times as long as an ordinary one, holding the only slot meanwhile.
    update_client(engine, world["id"], slow["clientId"], secret_hash=_slow_hash(time_cost=45))
    with server.http("127.0.0.2") as first, server.http("127.0.0.3") as second, ThreadPoolExecutor(1) as pool:
        holding = pool.submit(ask, first, world, slow, "wrong")
        deadline = time.monotonic() + 30
        while server.verifier.argon2_checks == 0:
            assert time.monotonic() < deadline, "the slow check never started"
            time.sleep(0.002)
        started = time.perf_counter()
        refused = ask(second, world, other, other["clientSecret"])
        refused_after = time.perf_counter() - started
        assert not holding.done()
        assert_slow_down(refused, "being checked at once")
        assert holding.result().status_code == 401
        print(f"refused in {refused_after * 1000:.1f} ms while the slot was held")
        # The slot is free again once the check ends.
        assert ask(second, world, other, other["clientSecret"]).status_code == 200
