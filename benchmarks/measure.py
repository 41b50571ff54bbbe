"""What the benchmarks measure besides wall time, on a machine shared with other work: CPU seconds of processes
(Linux /proc) and of the PostgreSQL backends serving one database, the load average, and medians."""

import contextlib
import os
import statistics
from pathlib import Path

import sqlalchemy as sa


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def database_backends_cpu(engine: sa.Engine) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend connected to the engine's database (the server runs here);
    empty for DuckDB, which runs inside the process that uses it."""
    if engine.dialect.name != "postgresql":
        return {}
    with engine.connect() as conn:
        pids = conn.scalars(sa.text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")).all()
    found = {}
    for pid in pids:
        with contextlib.suppress(FileNotFoundError):  # ended meanwhile
            found[pid] = process_cpu(pid)
    return found


def database_cpu_since(engine: sa.Engine, before: dict[int, float]) -> float:
    """CPU seconds the database's backends spent since `before` (database_backends_cpu): backends that started
    since count whole; those that ended since are lost, so keep connections pooled while measuring."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in database_backends_cpu(engine).items())


def load() -> float:
    """The one-minute load average."""
    return os.getloadavg()[0]


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float], unit: str = "", digits: int = 1) -> str:
    """"median (min–max)" of the values."""
    return f"{median(values):.{digits}f}{unit} ({min(values):.{digits}f}–{max(values):.{digits}f}{unit})"
