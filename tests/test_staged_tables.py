"""Staged Arrow tables (db.bulk.staged) on both backends: several coexist in one transaction, each read as its own
rows, one after another or nested; on DuckDB their names come back once free, so the statements that read them
repeat their text (and run from DuckDB's kept parse) instead of being new text each time."""

import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import sqlalchemy as sa

from db.bulk import staged
from db.engine import create_engine, kept_parse
from settings import Settings


@pytest.fixture
def duckdb_engine(tmp_path: Path) -> Iterator[sa.Engine]:
    """DuckDB alone: PostgreSQL's staged tables live until the commit, so each has a name of its own."""
    engine = create_engine(Settings(data_dir=tmp_path, database_url=""))
    yield engine
    engine.dispose()


def _numbers(*values: int) -> pa.Table:
    return pa.table({"n": pa.array(values, pa.int64())})


def _read(conn: sa.Connection, name: str) -> list[int]:
    return list(conn.scalars(sa.text(f"SELECT n FROM {name} ORDER BY n")))


def test_staged_tables_one_after_another_and_nested_each_read_their_own_rows(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        with staged(conn, _numbers(1, 2)) as first:
            assert _read(conn, first) == [1, 2]
        with staged(conn, _numbers(3)) as second:
            assert _read(conn, second) == [3]
            with staged(conn, _numbers(4, 5)) as inner:
                assert inner != second
                assert _read(conn, inner) == [4, 5]
                assert _read(conn, second) == [3]


def test_duckdb_staged_names_come_back_once_free_and_their_statements_from_the_kept_parse(
        duckdb_engine: sa.Engine) -> None:
    names = []
    for attempt in range(20):
        with duckdb_engine.begin() as conn:
            if attempt % 2:  # a failure frees its name too
                with pytest.raises(sa.exc.ProgrammingError), staged(conn, _numbers(attempt)) as name:
                    names.append(name)
                    conn.execute(sa.text(f"SELECT missing FROM {name}"))
            else:
                with staged(conn, _numbers(attempt)) as name:
                    names.append(name)
                    assert _read(conn, name) == [attempt]
                    assert f"SELECT n FROM {name} ORDER BY n" in kept_parse.cache
    # A new name each time would make 20; the test process's other threads may hold a few names meanwhile.
    assert len(set(names)) <= 5, names


def test_duckdb_staged_names_taken_at_once_by_threads_differ(duckdb_engine: sa.Engine) -> None:
    names: list[str] = []
    all_in = threading.Barrier(4)

    def stage() -> None:
        with duckdb_engine.begin() as conn, staged(conn, _numbers(1)) as name:
            names.append(name)
            all_in.wait(timeout=10)  # every thread holds its table at once

    threads = [threading.Thread(target=stage) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(set(names)) == 4, names



def test_duckdb_first_connections_opened_at_once_by_threads_each_register_a_table(tmp_path: Path) -> None:
    """DuckDB's Python instance cache races on a file no connection holds yet (CI saw a staged table fail to
    register; here raw connects failed in one round of six): the loser could not attach the file, or got a
    connection without the function `register` needs. The engine's dialect takes its connects one at a time. The
    threads call the dialect's connect themselves, as the pool does, without the pool's own work in between, which
    makes the race rare."""
    failures: list[str] = []

    def connect_and_register(engine: sa.Engine, at_once: threading.Barrier) -> None:
        cargs, cparams = engine.dialect.create_connect_args(engine.url)
        try:
            at_once.wait(timeout=10)
            connection = engine.dialect.connect(*cargs, **cparams)
            try:
                connection.register("numbers", _numbers(7))
                assert connection.execute("SELECT n FROM numbers").fetchall() == [(7,)]
            finally:
                connection.close()
        except Exception as error:  # noqa: BLE001 - every failure is the finding, reported below
            failures.append(repr(error))

    for attempt in range(40):
        engine = create_engine(Settings(data_dir=tmp_path / str(attempt), database_url=""))
        at_once = threading.Barrier(4)
        threads = [threading.Thread(target=connect_and_register, args=(engine, at_once)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        engine.dispose()
    assert failures == []
