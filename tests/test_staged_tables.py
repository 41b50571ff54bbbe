"""Staged Arrow tables (db.bulk.staged) on both backends: several coexist in one transaction, each read as its own
rows, one after another or nested; on DuckDB their names come back once free, so the statements that read them
repeat their text (and run from DuckDB's kept parse) instead of being new text each time."""

import threading

import pyarrow as pa
import pytest
import sqlalchemy as sa

from db.bulk import staged
from db.engine import is_duckdb, kept_parse


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


def test_a_duckdb_staged_name_comes_back_once_free_and_its_statement_from_the_kept_parse(engine: sa.Engine) -> None:
    if not is_duckdb(engine):
        pytest.skip("PostgreSQL's staged tables live until the commit, so each needs a name of its own")
    with engine.begin() as conn:
        with staged(conn, _numbers(1)) as first:
            pass
        with staged(conn, _numbers(2)) as again:
            assert again == first
            assert _read(conn, again) == [2]
            assert f"SELECT n FROM {again} ORDER BY n" in kept_parse.cache
        with pytest.raises(sa.exc.ProgrammingError), staged(conn, _numbers(3)) as failed:
            conn.execute(sa.text(f"SELECT missing FROM {failed}"))
    with engine.begin() as conn, staged(conn, _numbers(4)) as after_failure:
        assert after_failure == first  # freed by the failure too
        assert _read(conn, after_failure) == [4]


def test_duckdb_staged_names_taken_at_once_by_threads_differ(engine: sa.Engine) -> None:
    if not is_duckdb(engine):
        pytest.skip("PostgreSQL names each staged table apart")
    names: list[str] = []
    all_in = threading.Barrier(4)

    def stage() -> None:
        with engine.begin() as conn, staged(conn, _numbers(1)) as name:
            names.append(name)
            all_in.wait(timeout=10)  # every thread holds its table at once

    threads = [threading.Thread(target=stage) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(set(names)) == 4, names
