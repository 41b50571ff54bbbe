"""Every statement on a tenant's table names the tenant (DESIGN.md): the rule, its declared exceptions, and a check.

A tenant-owned table is one with a `tenant_id` column; every other table is service-wide and listed in
SERVICE_WIDE_TABLES with the reason it has no tenant. A statement that reads, changes or deletes rows of a
tenant-owned table must compare that table's `tenant_id` with a value (`= :tenant`, `IN (…)`, a tuple with it), or
with the `tenant_id` of a table that does (a join, a correlated subquery). Rows an INSERT writes carry their tenant,
so its target needs no predicate; the SELECT of an INSERT … SELECT does. Statements that work across tenants on
purpose (the processors' polls, retention, the metrics scrape, operators naming a client or a batch by id) say so
with `across_tenants(statement, reason)`.

`install_tenant_guard` makes every engine of the process refuse a statement that breaks the rule; the test suite
installs it for every test (tests/conftest.py), so the rule cannot be broken silently. It reads the statement's
SQLAlchemy expression before it is compiled; textual SQL that reads or changes a tenant's table (FROM, JOIN, UPDATE)
passes only if it mentions tenant_id at all, a coarser check. DDL (migrations) is not checked, nor are statements
sent over the driver's own connection (bulk COPY, db/bulk.py), which are written with the tenant by hand. A table
named once in two places (an UPDATE and its own subquery) counts as bound when either place binds it.
"""

import re
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from cachetools import LRUCache, cached
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import (
    BinaryExpression,
    BindParameter,
    ClauseList,
    ColumnClause,
    Grouping,
    TextClause,
    Tuple,
)
from sqlalchemy.sql.selectable import Alias, TableClause

from db.schema import metadata

ACROSS_TENANTS = "pia_across_tenants"  # the execution option that marks a statement, its value the reason

# The tables without a tenant_id, and why they have none (tests/test_tenancy.py holds the schema to this list).
SERVICE_WIDE_TABLES: Mapping[str, str] = {
    "tenants": "the tenants themselves",
    "signing_keys": "one key set signs every tenant's tokens",
    "pipeline_workers": "a worker's heartbeat: workers serve every tenant",
}
TENANT_TABLES = frozenset(table.name for table in metadata.tables.values() if "tenant_id" in table.c)

E = TypeVar("E", bound=sa.Executable)
# Textual SQL: the tables a statement reads or changes rows of (an INSERT's target is not among them).
_TEXT_TABLES = re.compile(r"\b(?:from|join|update)\s+(?:only\s+)?\"?([a-z_][a-z0-9_]*)", re.IGNORECASE)
_TEXT_TENANT = re.compile(r"\btenant_id\b", re.IGNORECASE)


class TenantNotNamed(AssertionError):
    """A statement touched a tenant's table without naming the tenant."""


def across_tenants(statement: E, reason: str) -> E:
    """The statement, marked as working across tenants on purpose; `reason` says why (it is kept with the mark)."""
    return statement.execution_options(**{ACROSS_TENANTS: reason})


def unnamed_tenant_tables(statement: Any) -> set[str]:
    """The tenant-owned tables the statement reads or changes without naming the tenant; empty when it keeps the
    rule. `statement` is a SQLAlchemy expression or the text of one."""
    if isinstance(statement, str | TextClause):
        text = statement if isinstance(statement, str) else statement.text
        read = {name.lower() for name in _TEXT_TABLES.findall(text)} & TENANT_TABLES
        return set() if _TEXT_TENANT.search(text) else read
    if isinstance(statement, sa.schema.ExecutableDDLElement) or not isinstance(statement, sa.ClauseElement):
        return set()
    # Statements of one shape (SQLAlchemy's cache key: tables, columns, operators, parameters but not their values)
    # get one verdict. The key is memoized on the statement, so the compiled cache's lookup after this one is free.
    key = statement._generate_cache_key()
    if key is None:  # a construct SQLAlchemy does not cache
        return _unnamed_in(statement)
    return set(_verdict(key.key, statement))


@cached(LRUCache(4096), key=lambda shape, statement: shape, lock=threading.Lock())
def _verdict(shape: tuple[Any, ...], statement: sa.ClauseElement) -> frozenset[str]:
    """The unnamed tables of every statement of this shape."""
    return frozenset(_unnamed_in(statement))


def _unnamed_in(statement: sa.ClauseElement) -> set[str]:
    inserted = statement.table if isinstance(statement, sa.Insert) else None
    mentioned: set[sa.FromClause] = set()
    bound: set[sa.FromClause] = set()
    pairs: list[tuple[sa.FromClause, sa.FromClause]] = []
    for node in _walk(statement):
        owner = _tenant_owned(node.table if isinstance(node, ColumnClause) else node)
        if owner is not None and owner is not inserted:
            mentioned.add(owner)
        if isinstance(node, BinaryExpression) and node.operator in (operators.eq, operators.in_op):
            for column, other in ((node.left, node.right), (node.right, node.left)):
                if (owner := _tenant_column_owner(column)) is None:
                    continue
                if _is_value(other):
                    bound.add(owner)
                elif (peer := _tenant_column_owner(other)) is not None:
                    pairs.append((owner, peer))
    while True:  # a table compared with a bound table's tenant_id is bound too
        more = {b for a, b in pairs if a in bound and b not in bound} | {a for a, b in pairs
                                                                         if b in bound and a not in bound}
        if not more:
            break
        bound |= more
    return {_table_name(owner) for owner in mentioned - bound}


def _walk(statement: sa.ClauseElement) -> Iterator[Any]:
    """Every element of the statement; an alias of a table stands for the table (its rows are the alias's)."""
    stack = [statement]
    while stack:
        node = stack.pop()
        yield node
        if not (isinstance(node, Alias) and _tenant_owned(node) is not None):
            stack.extend(node.get_children())


def _tenant_owned(clause: Any) -> sa.FromClause | None:
    """The clause itself when it is a tenant-owned table or an alias of one."""
    table = clause
    while isinstance(table, Alias):
        table = table.element
    return clause if isinstance(table, TableClause) and table.name in TENANT_TABLES else None


def _table_name(clause: Any) -> str:
    while isinstance(clause, Alias):
        clause = clause.element
    return clause.name


def _tenant_column_owner(element: Any) -> sa.FromClause | None:
    """The table whose tenant_id the element is, also as one of a tuple's columns (`(tenant_id, id) IN …`)."""
    if isinstance(element, ColumnClause) and element.name == "tenant_id":
        return _tenant_owned(element.table)
    if isinstance(element, Tuple):
        return next((owner for clause in element.clauses if (owner := _tenant_column_owner(clause)) is not None),
                    None)
    return None


def _is_value(element: Any) -> bool:
    """A value given with the statement: a bound parameter, or a list, tuple or group of them."""
    if isinstance(element, BindParameter):
        return True
    if isinstance(element, Grouping):
        return _is_value(element.element)
    if isinstance(element, ClauseList):  # tuples too
        return all(_is_value(clause) for clause in element.clauses)
    return False


def _check(conn: sa.Connection, statement: Any, multiparams: Any, params: Any,
           execution_options: Mapping[str, Any]) -> None:
    if ACROSS_TENANTS in execution_options or ACROSS_TENANTS in conn.get_execution_options() or (
            isinstance(statement, sa.Executable) and ACROSS_TENANTS in statement.get_execution_options()):
        return
    if (unnamed := unnamed_tenant_tables(statement)) and not _exempt_caller():
        raise TenantNotNamed(f"a statement on {', '.join(sorted(unnamed))} names no tenant (compare tenant_id, or "
                             f"mark it with db.tenancy.across_tenants and a reason): {_shown(statement, conn)}")


def _shown(statement: Any, conn: sa.Connection) -> str:
    try:
        return str(statement.compile(dialect=conn.dialect) if isinstance(statement, sa.ClauseElement) else statement)
    except sa.exc.SQLAlchemyError:
        return type(statement).__name__


def _check_driver_sql(conn: sa.Connection, cursor: Any, statement: str, parameters: Any, context: Any,
                      executemany: bool) -> None:
    """Textual SQL sent as it is (`exec_driver_sql`), which before_execute does not see."""
    if context is not None and context.compiled is None and not context.isddl:
        _check(conn, statement, None, None, context.execution_options)


def install_tenant_guard(exempt_code: Path | None = None) -> None:
    """From now on every engine of this process refuses a statement that breaks the rule (TenantNotNamed), unless
    the code that executes it lies under `exempt_code` (a test's own look at the database)."""
    _exempt_code[:] = [str(exempt_code)] if exempt_code else []
    if not sa.event.contains(sa.Engine, "before_execute", _check):
        sa.event.listen(sa.Engine, "before_execute", _check)
        sa.event.listen(sa.Engine, "before_cursor_execute", _check_driver_sql)


_exempt_code: list[str] = []


def _exempt_caller() -> bool:
    """Whether the nearest caller outside SQLAlchemy (and this module) is exempt code."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(("sqlalchemy.", __name__)):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(tuple(_exempt_code))
