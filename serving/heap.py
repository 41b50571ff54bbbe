"""The heap of a long-running pia process, settled once it has started."""

import atexit
import gc


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
