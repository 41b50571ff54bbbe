"""Reads of held demand planning data: sales forecasts and resolved replenishment parameters, keyset-paged.

Both lists are ordered by store, then SKU number, and a page never spans two stores. Each page is one query
that fetches at most the page, the row after it in the same store, and the first row of the next store:
enough to cut the page at the store boundary and to tell whether rows follow, without reading further. DuckDB's
forecast pages take two statements instead, each with filters its scan can apply (see "paging by seeking").
"""

from collections.abc import Sequence
from dataclasses import asdict, astuple, dataclass, fields
from datetime import date, datetime
from typing import Any, Generic, NamedTuple, Self, TypeVar

import sqlalchemy as sa

from db.schema import assortment_lines, retail_stores, sales_forecasts, skus, store_assortment_lines


class PageKey:
    """The last row of a page as plain values, which the HTTP layer wraps into an opaque cursor."""

    def to_dict(self) -> dict[str, str | bool]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """The key back from a cursor; ValueError when the client altered it into something else."""
        types = {field.name: field.type for field in fields(cls)}  # type: ignore[arg-type]
        if (not isinstance(data, dict) or data.keys() != types.keys()
                or any(type(data[name]) is not kind for name, kind in types.items())):
            raise ValueError(f"not a {cls.__name__}")
        return cls(**data)


@dataclass(frozen=True)
class ForecastKey(PageKey):
    is_ecom: bool
    store_number: str
    sku_number: str


@dataclass(frozen=True)
class ParameterKey(PageKey):
    store_number: str
    sku_number: str


KeyT = TypeVar("KeyT", bound=PageKey)
# The column of an unordered page query telling its two reads apart (see page_query).
PAGE_PART = "page_part"


@dataclass(frozen=True)
class Page(Generic[KeyT]):
    rows: list[sa.Row]  # rendered by the HTTP layer
    # The key to read the next page after; None when no rows follow.
    next: KeyT | None


# --- sales forecasts ------------------------------------------------------------------------------------

def held_forecasts(tenant_id: str, *, retail_store_number: str | None = None, ecom_store_number: str | None = None,
                   today: date, columns: Sequence[str] | None = None) -> sa.Subquery:
    """The tenant's unexpired held forecasts (optionally of one store, optionally just these columns),
    unordered; the lists and exports read these."""
    forecasts = sales_forecasts
    query = unexpired_forecasts(tenant_id, today)
    if columns is not None:
        query = query.with_only_columns(*(forecasts.c[name] for name in columns))
    if retail_store_number is not None:
        query = query.where(forecasts.c.is_ecom == sa.false(), forecasts.c.store_number == retail_store_number)
    if ecom_store_number is not None:
        query = query.where(forecasts.c.is_ecom == sa.true(), forecasts.c.store_number == ecom_store_number)
    return query.subquery("forecasts")


def unexpired_forecasts(tenant_id: str, today: date) -> sa.Select:
    """The tenant's held forecasts as clients see them (unordered): expired ones are purged, but until then they
    are no longer held as far as clients can tell."""
    forecasts = sales_forecasts
    return sa.select(forecasts).where(forecasts.c.tenant_id == tenant_id, forecasts.c.horizon_end_date >= today)


# --- replenishment parameters ---------------------------------------------------------------------------

class _Source(NamedTuple):
    """Where a store's lines come from, most specific first: the order in which their values win."""

    name: str  # the parameterSource value
    table: sa.Table
    alias: str
    store_column: str  # the store's column the lines hang off
    line_column: str

    def lines_of(self, line: sa.FromClause, stores: sa.ColumnCollection) -> sa.ColumnElement[bool]:
        return line.c[self.line_column] == stores[self.store_column]


_SOURCES = (_Source("RETAIL_STORE_SPECIFIC", store_assortment_lines, "store_line", "id", "retail_store_id"),
            _Source("LOCAL_ASSORTMENT", assortment_lines, "local_line", "local_assortment_id", "assortment_id"),
            _Source("BASE_ASSORTMENT", assortment_lines, "base_line", "base_assortment_id", "assortment_id"))
PARAMETER_SOURCES = tuple(source.name for source in _SOURCES)  # most specific first
_VALUES = ("reorder_point", "maximum_inventory", "modified_time")
# A page needs the cursor's store, the next store and the store after that one (see _parameter_stores); DuckDB's
# parameter pages (db.parameter_window) take stores this many at a time too.
STORE_WINDOW = 3


def replenishment_parameter_page(engine: sa.Engine, tenant_id: str, *, retail_store_number: str | None,
                                 modified_since: datetime | None, after: ParameterKey | None,
                                 limit: int) -> Page[ParameterKey]:
    """The values in use per retail store and SKU of its assortment, by store number, then SKU number."""
    rows = held_parameters(tenant_id, retail_store_number=retail_store_number, modified_since=modified_since,
                           after=after, windowed=modified_since is None)
    return _read_page(engine, rows, ParameterKey, after, limit)


def held_parameters(tenant_id: str, *, retail_store_number: str | None = None, modified_since: datetime | None = None,
                    after: ParameterKey | None = None, windowed: bool = False) -> sa.CTE:
    """The parameters in use (columns named after ParameterKey's and _VALUES), unordered: of the stores from
    the key's on, or with `windowed` only of the few stores a page after the key can draw on."""
    stores = _parameter_stores(tenant_id, retail_store_number, after, windowed=windowed)
    lines = _store_lines(tenant_id, stores, modified_since)

    def in_use(column: str) -> sa.ColumnElement[Any]:
        return sa.case({source.name: lines.c[f"{source.alias}_{column}"] for source in _SOURCES},
                       value=lines.c.parameter_source)

    query = sa.select(lines.c.store_number, lines.c.sku_number, lines.c.replenishment_type,
                      *(in_use(column).label(column) for column in _VALUES), lines.c.parameter_source,
                      lines.c.locked)
    if modified_since is not None:
        query = query.where(in_use("modified_time") > modified_since)
    # A CTE, so PostgreSQL resolves the window's stores once for the three reads of a page.
    return query.cte("parameters")


def _parameter_stores(tenant_id: str, retail_store_number: str | None, after: ParameterKey | None, *,
                      windowed: bool) -> sa.CTE:
    """The retail stores the page may draw on.

    Without modifiedSince every store with a line has rows, so the cursor's store (its rest may be empty)
    and the next two stores with lines hold the whole page and the row that shows more follow; resolving
    just those keeps a page's cost independent of the tenant's size. With modifiedSince a store with lines
    may have no row left, so every store from the cursor's on is read (modified lines are few anyway).
    """
    stores = retail_stores
    query = sa.select(stores.c.id, stores.c.number, stores.c.base_assortment_id,
                      stores.c.local_assortment_id).where(stores.c.tenant_id == tenant_id)
    if retail_store_number is not None:
        query = query.where(stores.c.number == retail_store_number)
    if after is not None:
        query = query.where(stores.c.number >= after.store_number)
    if windowed:
        lines = [(source, source.table.alias()) for source in _SOURCES]
        has_lines = sa.or_(*(sa.exists().where(line.c.tenant_id == tenant_id, source.lines_of(line, stores.c))
                             for source, line in lines))
        query = query.where(has_lines).order_by(stores.c.number).limit(STORE_WINDOW)
    return query.cte("stores")


def _candidate_keys(tenant_id: str, stores: sa.CTE, modified_since: datetime | None) -> sa.Subquery:
    """(store id, SKU id) of every line of the stores; with modifiedSince only of lines modified after it.

    A row's values come from one of its lines, so a row modified after modifiedSince has such a line:
    filtering here first keeps the resolution to the few keys that can qualify.
    """
    branches = []
    for source in _SOURCES:
        line = source.table.alias()
        branch = (sa.select(stores.c.id.label("store_id"), line.c.sku_id)
                  .join(line, sa.and_(line.c.tenant_id == tenant_id, source.lines_of(line, stores.c))))
        if modified_since is not None:
            branch = branch.where(line.c.modified_time > modified_since)
        branches.append(branch)
    return sa.union(*branches).subquery("keys")


def _store_lines(tenant_id: str, stores: sa.CTE, modified_since: datetime | None) -> sa.Subquery:
    """Per candidate key: its numbers, the replenishment type and lock in use, the source of its values,
    and the values of each of its lines (columns named like store_line_reorder_point)."""
    keys = _candidate_keys(tenant_id, stores, modified_since)
    lines = {source.alias: source.table.alias(source.alias) for source in _SOURCES}
    joined = (keys.join(stores, stores.c.id == keys.c.store_id)
              .join(skus, sa.and_(skus.c.tenant_id == tenant_id, skus.c.id == keys.c.sku_id)))
    for source in _SOURCES:
        line = lines[source.alias]
        joined = joined.outerjoin(line, sa.and_(line.c.tenant_id == tenant_id, line.c.sku_id == keys.c.sku_id,
                                                source.lines_of(line, stores.c)))

    # The values come as a pair from the most specific line that has any; a line without values (one that
    # only sets the replenishment type or a lock) leaves them to the next. Failing all, the most specific line.
    def has_values(line: sa.FromClause) -> sa.ColumnElement[bool]:
        return sa.or_(line.c.reorder_point.is_not(None), line.c.maximum_inventory.is_not(None))

    ordered = [(source.name, lines[source.alias]) for source in _SOURCES]
    source = sa.case(*((has_values(line), name) for name, line in ordered),
                     *((line.c.sku_id.is_not(None), name) for name, line in ordered))
    return sa.select(
        stores.c.number.label("store_number"),
        skus.c.number.label("sku_number"),
        sa.func.coalesce(*(line.c.replenishment_type for line in lines.values())).label("replenishment_type"),
        source.label("parameter_source"),
        # A lock is on the store and SKU: it holds even while the values still come from an assortment.
        sa.func.coalesce(lines["store_line"].c.locked, sa.false()).label("locked"),
        *(line.c[column].label(f"{alias}_{column}") for alias, line in lines.items() for column in _VALUES),
    ).select_from(joined).subquery("lines")


# --- paging ---------------------------------------------------------------------------------------------

def _read_page(engine: sa.Engine, rows: sa.FromClause, key_type: type[KeyT], after: KeyT | None,
               limit: int) -> Page[KeyT]:
    """The page of `rows` (tenant and filters applied) after the key, cut at the store boundary and the limit."""
    with engine.connect() as conn:
        fetched = list(conn.execute(page_query(rows, key_type, after, limit)))
    names = key_names(key_type)

    def store_of(row: sa.Row) -> tuple[Any, ...]:
        return tuple(row._mapping[name] for name in names[:-1])

    length = page_length(limit, sum(1 for row in fetched if store_of(row) == store_of(fetched[0])))
    more = len(fetched) > length
    return Page(fetched[:length],
                key_type(**{name: fetched[length - 1]._mapping[name] for name in names}) if more else None)


def key_names(key_type: type[PageKey]) -> list[str]:
    """The columns a page key is made of, which its rows are ordered by: the store's, then the SKU number."""
    return [field.name for field in fields(key_type)]  # type: ignore[arg-type]


def page_length(limit: int, first_store_rows: int) -> int:
    """How many of the rows page_query fetched make the page: those of the first store, up to the limit.
    Any row fetched beyond them means more rows follow."""
    return min(limit, first_store_rows)


def page_query(rows: sa.FromClause, key_type: type[PageKey],
               after: PageKey | Sequence[sa.ColumnElement[Any]] | None, limit: int, *,
               ordered: bool = True) -> sa.Select | sa.CompoundSelect:
    """In key order, after the key: up to limit + 1 rows of the first store, then the first row of the next store.

    Fetching just these, rather than limit + 1 rows in key order, keeps the rows of further stores off the
    wire when stores are small. The key is a PageKey, or the values to compare with as SQL expressions (bound
    parameters of a statement compiled once, see db.adbc.InlinedTemplate).

    Unordered, the two reads come as they are (each in key order) with a column `page_part` numbering them (0:
    the first store's rows, 1: the next store's first row), for the reader to put in order: ordering the union in
    PostgreSQL costs a sort of the page's rows, as its planner cannot see that the first read's index order
    (of one store, by SKU number) is the key order.
    """
    if limit < 1:
        raise ValueError("a page holds at least one row")
    names = key_names(key_type)
    key = [rows.c[name] for name in names]
    store_columns = key[:-1]
    later = []
    if after is not None:
        values = ([sa.literal(value) for value in astuple(after)] if isinstance(after, PageKey) else list(after))
        later.append(sa.tuple_(*key) > sa.tuple_(*values))
    # The first store, found once; read through scalar subqueries, which PostgreSQL computes up front, so the
    # two reads below can seek the index with its values.
    first = sa.select(*store_columns).where(*later).order_by(*key).limit(1).cte("head")
    head = [sa.select(column).scalar_subquery() for column in first.c]
    in_store = [column == value for column, value in zip(store_columns, head, strict=True)]
    in_head = sa.select(rows).where(*later, *in_store).order_by(*key).limit(limit + 1)
    after_head = sa.select(rows).where(*later, sa.tuple_(*store_columns) > sa.tuple_(*head)).order_by(*key).limit(1)
    if not ordered:
        return sa.union_all(in_head.add_columns(sa.literal(0).label(PAGE_PART)),
                            after_head.add_columns(sa.literal(1).label(PAGE_PART)))
    both = sa.union_all(sa.select(in_head.subquery()), sa.select(after_head.subquery())).subquery("page")
    return sa.select(both).order_by(*(both.c[name] for name in names))


# --- paging by seeking (DuckDB) ---------------------------------------------------------------------------
# DuckDB has no ordered index to seek: page_query's head and next-store reads compare the key as a row against
# every later row and sort what passes (47 ms of a page at 500,000 forecasts). Found in two statements whose
# filters are each a column against a value, which DuckDB pushes into its scan (row groups skipped by their
# min/max, the rest filtered column by column), a page reads what it returns and little more.


def first_store_after(conn: sa.Connection, rows: sa.FromClause, key_type: type[PageKey],
                      after: PageKey | None) -> tuple[Any, ...] | None:
    """The store (the key's columns but the last) holding the first row after the key; None when no row follows.
    Tried nearest first: the key's own store, then each later store prefix (with DuckDB's booleans: the next
    store number of the same kind, then the other kind)."""
    names = key_names(key_type)
    store = [rows.c[name] for name in names[:-1]]
    if after is None:
        return _first(conn, [sa.select(*store).order_by(*store).limit(1)])
    values = [sa.literal(value, rows.c[name].type) for name, value in zip(names, astuple(after), strict=True)]
    own_store = [column == value for column, value in zip(store, values, strict=False)]
    nearest_first = [sa.select(*store).where(*own_store, rows.c[names[-1]] > values[-1]).limit(1)]
    nearest_first += [sa.select(*store).where(*later).order_by(*store).limit(1)
                      for later in reversed(_later_stores(store, values[:-1]))]
    return _first(conn, nearest_first)


def _later_stores(store: Sequence[sa.ColumnElement[Any]],
                  values: Sequence[sa.ColumnElement[Any]]) -> list[list[sa.ColumnElement[bool]]]:
    """The rows of stores after the given one (its values as SQL), as one filter list per store column: the
    columns before it equal, it greater (farthest first)."""
    return [[*(column == value for column, value in zip(store[:i], values[:i], strict=True)), store[i] > values[i]]
            for i in range(len(store))]


def _first(conn: sa.Connection, nearest_first: list[sa.Select]) -> tuple[Any, ...] | None:
    ranked = [query.add_columns(sa.literal(rank).label("rank")).subquery() for rank, query in enumerate(nearest_first)]
    both = sa.union_all(*(sa.select(query) for query in ranked)).subquery("stores")
    # Fetched to the end: DuckDB takes no other statement on the connection while a result is unfinished.
    found = conn.execute(sa.select(*list(both.c)[:-1]).order_by(both.c["rank"]).limit(1)).all()
    return tuple(found[0]) if found else None


def store_page_query(rows: sa.FromClause, key_type: type[PageKey], store: Sequence[Any], after: PageKey | None,
                     limit: int) -> sa.Select:
    """In key order: up to limit + 1 rows of the store (after the key when it is the key's store), then a row of a
    later store for each store column that has one (any row: it only tells that rows follow). As page_query's
    rows, for the same page reader, when the store is first_store_after's."""
    names = key_names(key_type)
    key = [rows.c[name] for name in names]
    values = [sa.literal(value, column.type) for column, value in zip(key, store, strict=False)]
    in_store = [column == value for column, value in zip(key[:-1], values, strict=True)]
    if after is not None and tuple(store) == astuple(after)[:-1]:
        in_store.append(key[-1] > sa.literal(astuple(after)[-1], key[-1].type))
    reads = [sa.select(rows).where(*in_store).order_by(key[-1]).limit(limit + 1)]
    reads += [sa.select(rows).where(*later).limit(1) for later in _later_stores(key[:-1], values)]
    both = sa.union_all(*(sa.select(read.subquery()) for read in reads)).subquery("page")
    return sa.select(both).order_by(*(both.c[name] for name in names))
