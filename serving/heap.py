"""The heap of a long-running pia process, settled once it has started."""

import atexit
import gc

# The API server's young collections run once this many more container objects were allocated than freed (Python's
# default: 700). On the cheap authenticated GET at 1,900 requests/s the default collected some 60 times a second,
# each time walking what the requests in flight hold; 10,000 measured 15–22 µs less CPU a request in
# benchmarks.request_overhead (rounds alternating in one server, 2026-11-29), and the server's memory after 45 s of
# 200s, 401s and 404s was within 3 MB of the default's. Garbage that holds much is another matter: a bridge retrying
# through tests/test_event_backlog.py's outage keeps failed deliveries' exceptions, each holding its request body,
# and grew by 75 MB at 700, 99 MB at 10,000 and 216 MB at 50,000 (the test's bound: 100). So `pia bridge` and `pia
# worker` keep Python's default; a server that delivers events itself (DuckDB's embedded shape) pays the 24 MB.
YOUNG_GENERATION_THRESHOLD = 10_000


def freeze_startup_heap() -> None:
    """Move every object alive after start-up (imported modules, the app, pools) out of the collector's reach.

    Python's collector walks its oldest generation whenever enough new objects survived; in a process that imported
    SQLAlchemy, Polars, pyarrow and DuckDB that walk covers hundreds of thousands of objects that live as long as the
    process anyway. Frozen, they are never walked again (`gc.freeze`); garbage made later is collected as before.
    Collected first, so that no garbage of the start-up itself is kept for good; thawed at exit, so that the
    interpreter's last collection still finalises them (DuckDB's bindings report what it did not as leaks).
    """
    gc.collect()
    gc.freeze()
    atexit.register(gc.unfreeze)


def collect_young_garbage_less_often() -> None:
    """The API server's young collections every YOUNG_GENERATION_THRESHOLD allocations instead of Python's 700."""
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, *gc.get_threshold()[1:])
