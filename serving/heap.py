"""The heap of a long-running pia process, settled once it has started."""

import atexit
import gc

# Young collections run once this many more container objects were allocated than freed (Python's default: 700). On
# the cheap authenticated GET at 1,900 requests/s the default collected some 60 times a second, each time walking
# what the requests in flight hold; 50,000 measured 15–28 µs less CPU a request in benchmarks.request_overhead
# (rounds alternating in one server, 2026-11-29), for at most a few MB of cyclic garbage kept a little longer.
YOUNG_GENERATION_THRESHOLD = 50_000


def settle_heap() -> None:
    """Move every object alive after start-up (imported modules, the app, pools) out of the collector's reach, and
    collect young garbage less often.

    Python's collector walks its oldest generation whenever enough new objects survived; in a process that imported
    SQLAlchemy, Polars, pyarrow and DuckDB that walk covers hundreds of thousands of objects that live as long as the
    process anyway. Frozen, they are never walked again (`gc.freeze`); garbage made later is collected as before.
    Collected first, so that no garbage of the start-up itself is kept for good; thawed at exit, so that the
    interpreter's last collection still finalises them (DuckDB's bindings report what it did not as leaks).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, *gc.get_threshold()[1:])
    atexit.register(gc.unfreeze)
