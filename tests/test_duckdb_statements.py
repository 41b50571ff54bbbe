"""DuckDB engines keep DuckDB's parse of each data statement (db.engine.kept_parse): a statement run from its
kept parse answers as its text would, sees schema changes made since it was parsed, fails as its text would, and
transaction control and DDL still take the driver's own path."""

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from db.engine import create_engine, duckdb_statement, kept_parse
from settings import Settings


@pytest.fixture
def duckdb_engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = create_engine(Settings(data_dir=tmp_path, database_url=""))
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE items (key VARCHAR PRIMARY KEY, amount INTEGER)")
    yield engine
    engine.dispose()


def test_a_statement_run_again_from_its_kept_parse_answers_with_the_current_rows(duckdb_engine: sa.Engine) -> None:
    insert = sa.text("INSERT INTO items VALUES (:key, :amount)")
    select = sa.text("SELECT key, amount FROM items WHERE amount >= :least ORDER BY key")
    with duckdb_engine.begin() as conn:
        for key, amount in (("a", 1), ("b", 2), ("c", 3)):
            conn.execute(insert, {"key": key, "amount": amount})
        assert conn.execute(select, {"least": 2}).all() == [("b", 2), ("c", 3)]
        assert conn.execute(sa.text("UPDATE items SET amount = amount + 10 WHERE key <> :key"),
                            {"key": "b"}).rowcount == 2
        assert conn.execute(select, {"least": 2}).all() == [("a", 11), ("b", 2), ("c", 13)]
        assert conn.execute(sa.text("DELETE FROM items WHERE key = :key"), {"key": "a"}).rowcount == 1
        assert conn.execute(select, {"least": 0}).all() == [("b", 2), ("c", 13)]
    with duckdb_engine.connect() as conn:  # the kept parse of another connection's text
        assert conn.execute(select, {"least": 3}).all() == [("c", 13)]
        assert str(select.compile(dialect=conn.dialect)) in kept_parse.cache  # run from its kept parse


def test_a_kept_parse_is_bound_afresh_after_the_schema_changes(duckdb_engine: sa.Engine) -> None:
    select_all = sa.text("SELECT * FROM items")
    with duckdb_engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO items VALUES ('a', 1)"))
        assert conn.execute(select_all).keys() == ["key", "amount"]
        conn.exec_driver_sql("ALTER TABLE items ADD COLUMN note VARCHAR DEFAULT 'x'")
        assert conn.execute(select_all).all() == [("a", 1, "x")]
        conn.exec_driver_sql("DROP TABLE items")
        conn.exec_driver_sql("CREATE TABLE items (other BIGINT)")
        assert conn.execute(select_all).keys() == ["other"]


def test_a_kept_statement_fails_as_its_text_would(duckdb_engine: sa.Engine) -> None:
    insert = sa.text("INSERT INTO items VALUES (:key, :amount)")
    with duckdb_engine.begin() as conn:
        conn.execute(insert, {"key": "a", "amount": 1})
    for _ in range(2):  # the first time parses the text, the second runs the kept parse
        with pytest.raises(sa.exc.IntegrityError, match="Duplicate key"), duckdb_engine.begin() as conn:
            conn.execute(insert, {"key": "a", "amount": 2})
    with duckdb_engine.connect() as conn:
        assert conn.execute(sa.text("SELECT amount FROM items")).scalar_one() == 1  # nothing half-stored
        with pytest.raises(sa.exc.ProgrammingError, match="syntax error"):
            conn.execute(sa.text("SELEC amount FROM items"))


def test_only_single_data_statements_are_kept(duckdb_engine: sa.Engine) -> None:
    with duckdb_engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        for kept in ("SELECT 1", "INSERT INTO items VALUES ('a', 1)", "UPDATE items SET amount = 2",
                     "DELETE FROM items", "WITH k AS (SELECT 1) SELECT * FROM k"):
            assert not isinstance(duckdb_statement(raw, kept), str), kept
        for passed_as_text in ("BEGIN", "COMMIT", "CREATE TABLE other (a INTEGER)", "SELECT 1; SELECT 2",
                               "SELEC 1", "CHECKPOINT"):
            assert duckdb_statement(raw, passed_as_text) == passed_as_text


def test_the_kept_parses_are_bounded(duckdb_engine: sa.Engine) -> None:
    with duckdb_engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        first = kept_parse(raw, "SELECT 0")
        assert kept_parse(raw, "SELECT 0") is first  # kept
        for number in range(1, kept_parse.cache_info().maxsize + 1):
            kept_parse(raw, f"SELECT {number}")
        assert kept_parse.cache_info().currsize == kept_parse.cache_info().maxsize
        assert kept_parse(raw, "SELECT 0") is not first  # pushed out by newer texts, parsed again
