"""Per-request overhead: the authenticated cheap route `GET /v1/tenants/{t}/demand_planning/limits` against a bare
Quart route returning the same JSON (the floor), both served by Hypercorn, driven by the same client for the same
time. Goal (issue 19): the floor's CPU per request over pia's at least 0.8.

    uv run python -m benchmarks.request_overhead --backend duckdb
    uv run python -m benchmarks.request_overhead --backend postgresql   # the server of PIA_TEST_POSTGRES_URL

Each app runs in a Hypercorn process of its own with the same configuration (one worker, no access log: the log line
would cost both the same). pia's is `pia serve`'s own code (serving.server.run, with the roles `pia serve` gives the
backend); a second pia server differs only in leaving the collector as Python sets it (nothing frozen after
start-up, the default thresholds), which measures what the server's settling of its heap is worth (serving.heap).
The client is one process of asyncio connections speaking HTTP/1.1 through h11 with keep-alive, far lighter than
httpx, because on two cores it competes with the server for CPU: the server gets one core and the client the other.
Rounds go round the servers so background load falls on all alike, after a warm-up; the figure of each is its median
round. Beside requests/s, each round reports the server process's CPU time per request (all its threads, from
/proc), which other work on the machine disturbs far less. The benchmark client has a rate limit above anything the
run can reach, so every request is counted by the limiter and answered 200. On PostgreSQL the database's CPU per
request (its backends: the client read, the audit rows' COPY) is reported beside the server's; it is not part of the
ratio, which compares the API processes.
"""

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import h11
import httpx
import orjson
from hypercorn.asyncio import serve
from hypercorn.config import Config
from quart import Quart, Response, request

from benchmarks.databases import backend_database
from benchmarks.measure import database_backends_cpu, database_cpu_since, load
from contracts.limits import published_limits
from db.audit import FLUSH_SECONDS
from db.clients import DEMAND_PLANNING_PERMISSION, update_client
from db.engine import create_engine
from db.migrate import upgrade
from db.secrets import new_secret_key
from db.tenants import create_tenant
from serving.admin import issue_client
from settings import Settings

UNREACHABLE_RATE_LIMIT = 10**9
AUDIT_WRITE_SECONDS = 1.0  # ample for one round's audit rows, which take tens of milliseconds
GOAL = 0.8  # the floor's CPU per request over pia's
SERVERS = ("bare", "pia", "pia-unsettled")


def bare_app() -> Quart:
    """The floors: this benchmark's `GET /limits`, and `POST …/orders` of benchmarks.order_throughput, which parses
    the order and answers 202 with it (about the size of pia's answer), storing nothing."""
    app = Quart("bare")

    @app.get("/limits")
    async def limits() -> Response:
        return Response(orjson.dumps(published_limits()), content_type="application/json")

    @app.post("/v1/tenants/<tenant_id>/ecom_stores/<store_id>/orders")
    async def orders(tenant_id: str, store_id: str) -> Response:
        order = orjson.loads(await request.get_data())
        return Response(orjson.dumps({"id": store_id, "status": "RECEIVED", **order}), status=202,
                        content_type="application/json")

    return app


def _serve(app: Quart, port: int) -> None:
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await serve(app, config, shutdown_trigger=stop.wait)

    asyncio.run(main())


def _serve_pia(port: int, settled_heap: bool) -> None:
    from serving.roles import Roles
    from serving.server import run as serve_pia

    settings = Settings()
    serve_pia(settings, create_engine(settings), "127.0.0.1", port, Roles.of_serve(settings), settled_heap=settled_heap)


async def _connection(port: int, path: str, token: str, stop_at: float, statuses: Counter) -> None:
    """Requests one after another on a keep-alive connection, opening a new one when the server closes it
    (Hypercorn does after keep_alive_max_requests, 1,000 by default)."""
    headers = [("Host", f"127.0.0.1:{port}"), ("Authorization", f"Bearer {token}")]
    while time.perf_counter() < stop_at:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        http = h11.Connection(h11.CLIENT)
        try:
            while time.perf_counter() < stop_at and http.our_state is h11.IDLE:
                writer.write(http.send(h11.Request(method="GET", target=path, headers=headers))
                             + http.send(h11.EndOfMessage()))
                status = 0
                while True:
                    event = http.next_event()
                    if event is h11.NEED_DATA:
                        http.receive_data(await reader.read(65536))
                    elif isinstance(event, h11.Response):
                        status = event.status_code
                    elif isinstance(event, h11.EndOfMessage):
                        break
                statuses[status] += 1
                if http.our_state is h11.DONE and http.their_state is h11.DONE:
                    http.start_next_cycle()
        finally:
            writer.close()


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of every thread of the process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _round(port: int, path: str, token: str, seconds: float, connections: int) -> Counter:
    statuses: Counter = Counter()
    stop_at = time.perf_counter() + seconds
    await asyncio.gather(*(_connection(port, path, token, stop_at, statuses) for _ in range(connections)))
    return statuses


def _measure(server: subprocess.Popen, port: int, path: str, token: str, seconds: float,
             connections: int) -> tuple[float, float, Counter]:
    """(requests/s, server CPU µs per request, statuses) of one round. The CPU is read once the server has written
    the round's audit rows (its writer flushes every FLUSH_SECONDS), so that each round pays for its own rows, not
    for the end of the one before; every server gets the same wait, which costs bare nothing and pia its idle
    roles' polls."""
    cpu, started = _cpu_seconds(server.pid), time.perf_counter()
    statuses = asyncio.run(_round(port, path, token, seconds, connections))
    elapsed = time.perf_counter() - started
    time.sleep(FLUSH_SECONDS + AUDIT_WRITE_SECONDS)
    cpu = _cpu_seconds(server.pid) - cpu
    return statuses.total() / elapsed, cpu / statuses.total() * 1e6, statuses


def _start(kind: str, port: int, env: dict[str, str]) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "benchmarks.request_overhead", "--serve", kind,
                                "--port", str(port)], env=env)
    deadline = time.monotonic() + 180  # a DuckDB pia server took over 60 s to start at load 20 on two cores
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            return process
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"the {kind} server did not start")


def _seed(settings: Settings) -> tuple[str, str, str]:
    engine = create_engine(settings)
    upgrade(engine)
    tenant_id = create_tenant(engine, "benchmark", is_test=True)
    client_id, secret = issue_client(engine, tenant_id, "benchmark", "demand_planning", None,
                                     (DEMAND_PLANNING_PERMISSION,))
    update_client(engine, tenant_id, client_id, rate_limit_per_minute=UNREACHABLE_RATE_LIMIT)
    engine.dispose()  # the DuckDB file belongs to the server process from here on
    return tenant_id, client_id, secret


def run(backend: str, database_url: str, data_dir: Path, seconds: float, rounds: int, connections: int) -> None:
    secret_key = os.environ.get("PIA_SECRET_KEY") or new_secret_key()  # PostgreSQL requires one
    tenant_id, client_id, secret = _seed(Settings(data_dir=data_dir, database_url=database_url,
                                                  secret_key=secret_key))
    env = {**os.environ, "PIA_DATA_DIR": str(data_dir), "PIA_DATABASE_URL": database_url,
           "PIA_SECRET_KEY": secret_key}
    envs = {kind: env for kind in SERVERS}
    if backend == "duckdb":  # the DuckDB file is one process's: the second pia server gets a copy of the seeded one
        shutil.copytree(data_dir, data_dir / "unsettled", ignore=shutil.ignore_patterns("unsettled"))
        envs["pia-unsettled"] = {**env, "PIA_DATA_DIR": str(data_dir / "unsettled")}
    ports = {kind: 17500 + 500 * number + os.getpid() % 500 for number, kind in enumerate(SERVERS)}
    database = create_engine(Settings(database_url=database_url)) if backend == "postgresql" else None
    servers: dict[str, subprocess.Popen] = {}
    try:
        for kind in SERVERS:
            servers[kind] = _start(kind, ports[kind], envs[kind])
        targets = {kind: f"/v1/tenants/{tenant_id}/demand_planning/limits" for kind in SERVERS} | {"bare": "/limits"}
        tokens = {kind: _token(ports[kind], tenant_id, client_id, secret) for kind in SERVERS[1:]}
        tokens["bare"] = tokens["pia"]  # the same request bytes; the bare route ignores the header
        rates: dict[str, list[float]] = {kind: [] for kind in SERVERS}
        costs: dict[str, list[float]] = {kind: [] for kind in SERVERS}
        database_costs: list[float] = []
        loads = [load()]
        for kind in SERVERS:  # warm-up: connections, caches, first-call imports
            asyncio.run(_round(ports[kind], targets[kind], tokens[kind], 1.0, connections))
        for round_number in range(rounds):
            for kind in SERVERS:
                database_before = database_backends_cpu(database) if database is not None else {}
                rate, cost, statuses = _measure(servers[kind], ports[kind], targets[kind], tokens[kind], seconds,
                                                connections)
                assert set(statuses) == {200}, f"{kind}: {dict(statuses)}"
                rates[kind].append(rate)
                costs[kind].append(cost)
                line = f"[{backend}] round {round_number + 1} {kind:12}: {rate:8,.0f} requests/s, " \
                       f"{cost:6,.0f} µs server CPU per request"
                if database is not None and kind == "pia":
                    database_costs.append(database_cpu_since(database, database_before) / statuses.total() * 1e6)
                    line += f", PostgreSQL {database_costs[-1]:4,.0f} µs"
                print(line, flush=True)
            loads.append(load())
    finally:
        for process in servers.values():
            process.send_signal(signal.SIGTERM)
        for process in servers.values():
            process.wait(timeout=60)
        if database is not None:
            database.dispose()
    rate, cost = ({kind: statistics.median(values[kind]) for kind in SERVERS} for values in (rates, costs))
    print(f"[{backend}] medians of {rounds} rounds of {seconds:g} s, {connections} connections, "
          f"load average {min(loads):.1f}–{max(loads):.1f}")
    print(f"[{backend}] floor, bare Quart route:      {rate['bare']:8,.0f} requests/s {cost['bare']:6,.0f} µs "
          "CPU/request")
    database_cost = f" (+ PostgreSQL {statistics.median(database_costs):,.0f} µs)" if database_costs else ""
    print(f"[{backend}] authenticated GET …/limits:    {rate['pia']:8,.0f} requests/s {cost['pia']:6,.0f} µs "
          f"CPU/request{database_cost}")
    print(f"[{backend}] … the heap left unsettled:   {rate['pia-unsettled']:8,.0f} requests/s "
          f"{cost['pia-unsettled']:6,.0f} µs CPU/request")
    ratio = cost["bare"] / cost["pia"]
    print(f"[{backend}] goal: floor / pia by CPU per request >= {GOAL}: {ratio:.2f}, "
          f"{'met' if ratio >= GOAL else 'missed'} (unsettled {cost['bare'] / cost['pia-unsettled']:.2f}; "
          f"by requests/s {rate['pia'] / rate['bare']:.2f})")


def _token(port: int, tenant_id: str, client_id: str, secret: str) -> str:
    return httpx.post(f"http://127.0.0.1:{port}/oauth2/token", auth=(client_id, secret), data={
        "grant_type": "client_credentials", "tenant_id": tenant_id}).json()["access_token"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["duckdb", "postgresql"], default="duckdb")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16, help="concurrent keep-alive connections")
    parser.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve == "bare":
        return _serve(bare_app(), args.port)
    if args.serve in ("pia", "pia-unsettled"):
        return _serve_pia(args.port, settled_heap=args.serve == "pia")
    measure = (args.seconds, args.rounds, args.connections)
    with backend_database(args.backend) as (database_url, folder):
        run(args.backend, database_url, folder, *measure)


if __name__ == "__main__":
    main()
