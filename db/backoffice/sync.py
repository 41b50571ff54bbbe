"""The one way the loader writes a table: upsert keyed rows within the tenant, touching only rows that differ."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from db.backoffice.document import Row
from db.bulk import insert_rows
from db.ids import new_id
from db.reservations import Released


@dataclass(frozen=True)
class Changes:
    """What one sync did: rows created (as inserted), updated (held row, new values) and deleted (held rows)."""

    created: list[Row] = field(default_factory=list)
    updated: list[tuple[Mapping[str, Any], Row]] = field(default_factory=list)
    deleted: list[sa.RowMapping] = field(default_factory=list)
    unchanged: int = 0

    @property
    def any(self) -> bool:
        return bool(self.created or self.updated or self.deleted)


@dataclass
class LoadReport:
    """Per entity: rows created, updated and unchanged; deleted only for the lists a document owns whole; the
    reservations that stock set below what was reserved took back."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    deleted: dict[str, int] = field(default_factory=dict)
    released: list[Released] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return (any(count["created"] or count["updated"] for count in self.counts.values())
                or any(self.deleted.values()))

    def record(self, entity: str, changes: Changes, owns_whole_list: bool = False) -> None:
        self.counts[entity] = {"created": len(changes.created), "updated": len(changes.updated),
                               "unchanged": changes.unchanged}
        if owns_whole_list:
            self.deleted[entity] = len(changes.deleted)


@dataclass(frozen=True)
class Owned:
    """Marks a nested list the document gives whole: held rows whose `column` is one of `owners` and that the
    document does not name are deleted."""

    column: str
    owners: set[str]


def sync(conn: sa.Connection, tenant_id: str, now: datetime, table: sa.Table, key: tuple[str, ...],
         rows: list[Row], *, within: sa.ColumnElement[bool] | None = None, owned: Owned | None = None,
         defaults: Row | None = None, read: tuple[str, ...] = ()) -> Changes:
    """Upserts rows (column values without tenant, id or stamps) keyed on `key` within the tenant.

    Held rows are those of the tenant (narrowed by `within`). Only rows whose given values differ are updated;
    columns a row does not give are left alone (a partial upsert, field by field). A created row takes `defaults`
    (else null) for the columns it does not give. Key columns are never updated: DuckDB refuses updates of
    indexed columns. Changes report held rows with the columns compared and those named in `read`.
    """
    if not rows and (owned is None or not owned.owners):
        return Changes()
    # Only the columns compared or reported: reading whole rows (stamps included) costs more than the rest.
    wanted = dict.fromkeys([*key, *(name for row in rows for name in row), *read,
                            *(["id"] if "id" in table.c else []), *([owned.column] if owned else [])])
    query = sa.select(*(table.c[name] for name in wanted)).where(table.c.tenant_id == tenant_id)
    held = {tuple(row[name] for name in key): row
            for row in conn.execute(query if within is None else query.where(within)).mappings().all()}
    created: list[Row] = []
    updated: list[tuple[Mapping[str, Any], Row]] = []
    for row in rows:
        current = held.pop(tuple(row[name] for name in key), None)
        if current is None:
            created.append(row)
        elif any(current[name] != value for name, value in row.items()):
            updated.append((current, row))
    deleted = [row for row in held.values() if owned is not None and row[owned.column] in owned.owners]
    created = _completed(table, now, tenant_id, created, defaults or {})
    insert_rows(conn, table, created)
    # One statement per set of columns given: an executemany needs the same parameters in every row.
    by_columns: dict[frozenset[str], list[Row]] = {}
    for _, row in updated:
        by_columns.setdefault(frozenset(row), []).append(row)
    for alike in by_columns.values():
        conn.execute(table.update().where(*_key_match(table, key)),
                     [_stamped(table, now, {**_values(row, key), **_key_params(tenant_id, row, key)})
                      for row in alike])
    if deleted:
        conn.execute(table.delete().where(*_key_match(table, key)),
                     [_key_params(tenant_id, row, key) for row in deleted])
    return Changes(created, updated, deleted, unchanged=len(rows) - len(created) - len(updated))


def _completed(table: sa.Table, now: datetime, tenant_id: str, rows: list[Row], defaults: Row) -> list[Row]:
    """New rows with the same columns each (bulk inserts need it): what a row does not give is its default."""
    columns = {name for row in rows for name in row} | set(defaults)
    return [_stamped(table, now, {"tenant_id": tenant_id, **{name: defaults.get(name) for name in columns}, **row},
                     new=True) for row in rows]


def _stamped(table: sa.Table, now: datetime, row: Row, new: bool = False) -> Row:
    extra: Row = {}
    if new and "id" in table.c and "id" not in row:
        extra["id"] = new_id()
    if new and "created_time" in table.c:
        extra["created_time"] = now
    if "modified_time" in table.c:
        extra["modified_time"] = now
    return {**row, **extra}


def _values(row: Row, key: tuple[str, ...]) -> Row:
    return {name: value for name, value in row.items() if name not in key}


# Bound names must differ from column names, which SQLAlchemy keeps for the SET clause.
def _key_match(table: sa.Table, key: tuple[str, ...]) -> list[sa.ColumnElement[bool]]:
    return [table.c[name] == sa.bindparam(f"key_{name}") for name in ("tenant_id", *key)]


def _key_params(tenant_id: str, row: Row | sa.RowMapping, key: tuple[str, ...]) -> Row:
    return {"key_tenant_id": tenant_id, **{f"key_{name}": row[name] for name in key}}
