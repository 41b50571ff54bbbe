"""Closed-loop HTTP load over real sockets: N asyncio h11 connections, each sending its next request as soon as the
last answer is complete. Shared by the benchmarks that measure requests/s and latency beside a baseline."""

import asyncio
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import h11

# What to send next: method, target, body (None for none); given the connection's own random generator.
NextRequest = Callable[[random.Random], tuple[str, str, bytes | None]]


@dataclass(frozen=True)
class Figures:
    rate: float
    p50_ms: float
    p99_ms: float


def gets(paths: list[str]) -> NextRequest:
    """A GET of a random path of the list per request."""
    return lambda rng: ("GET", rng.choice(paths), None)


async def _connection(port: int, next_request: NextRequest, token: str, stop_at: float, latencies: list[float],
                      statuses: Counter, rng: random.Random) -> None:
    headers = [("Host", f"127.0.0.1:{port}"), ("Authorization", f"Bearer {token}")]
    while time.perf_counter() < stop_at:  # a new connection when the server closes one (Hypercorn: every 1,000)
        await _requests(port, next_request, headers, stop_at, latencies, statuses, rng)


async def _requests(port: int, next_request: NextRequest, headers: list[tuple[str, str]], stop_at: float,
                    latencies: list[float], statuses: Counter, rng: random.Random) -> None:
    """Requests one after another on one keep-alive connection, until stop_at or until the server closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    http = h11.Connection(h11.CLIENT)
    try:
        while time.perf_counter() < stop_at and http.our_state is h11.IDLE:
            method, target, body = next_request(rng)
            started = time.perf_counter()
            sent = headers if body is None else [*headers, ("Content-Type", "application/json"),
                                                 ("Content-Length", str(len(body)))]
            writer.write(http.send(h11.Request(method=method, target=target, headers=sent))
                         + (http.send(h11.Data(data=body)) if body is not None else b"")
                         + http.send(h11.EndOfMessage()))
            status = 0
            while True:
                event = http.next_event()
                if event is h11.NEED_DATA:
                    http.receive_data(await reader.read(1 << 20))
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.EndOfMessage):
                    break
            latencies.append(time.perf_counter() - started)
            statuses[status] += 1
            if http.our_state is h11.DONE and http.their_state is h11.DONE:
                http.start_next_cycle()
    finally:
        writer.close()


def measure(port: int, next_request: NextRequest, tokens: list[str], seconds: float, connections: int,
            expected_status: int = 200) -> Figures:
    """Figures of `connections` connections for `seconds`; connection n uses tokens[n % len(tokens)]."""
    latencies: list[float] = []
    statuses: Counter = Counter()

    async def run() -> None:
        stop_at = time.perf_counter() + seconds
        await asyncio.gather(*(_connection(port, next_request, tokens[n % len(tokens)], stop_at, latencies,
                                           statuses, random.Random(n)) for n in range(connections)))

    started = time.perf_counter()
    asyncio.run(run())
    elapsed = time.perf_counter() - started
    assert set(statuses) == {expected_status}, dict(statuses)
    cuts = statistics.quantiles(latencies, n=100)
    return Figures(len(latencies) / elapsed, cuts[49] * 1000, cuts[98] * 1000)
