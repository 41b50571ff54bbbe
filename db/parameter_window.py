"""Replenishment parameter pages on DuckDB: the next few stores and their lines read by two plain statements, the
values in use resolved in Polars.

db.held resolves a page's parameters in one statement (the store window, the union of the three sources' keys,
three outer joins, the page's reads). PostgreSQL runs it in a few milliseconds by its indexes; DuckDB pays a
millisecond or more per operator of a plan however few its rows, and its decorrelated EXISTS (which stores have
lines) hashes every line of the tenant: that statement took 85–90 ms of CPU a page on the demo's back office of 220
rows. Here a page takes the stores from the cursor's on, a few at a time, reads their lines, and resolves just the
keys the page may need by the rules in the README's Decisions ("Replenishment resolution"), db.held's
rules. Without modifiedSince only: with it, a store with lines may have no row left, and db.held's statement
resolves just the keys modified since (read by seeking on DuckDB, db.held_export).
"""

from collections.abc import Callable

import polars as pl
import sqlalchemy as sa

from db.held import PARAMETER_SOURCES, STORE_WINDOW, ParameterKey
from db.held_quantities import POLARS_DECIMAL
from db.schema import assortment_lines, retail_stores, skus, store_assortment_lines

# What a store's lines hang off, in PARAMETER_SOURCES' order (most specific first; the rank orders them): the store
# itself, then its local and its base assortment.
_OWNERS = ("id", "local_assortment_id", "base_assortment_id")

STORE_COLUMNS = {"id": pl.String, "number": pl.String, "local_assortment_id": pl.String,
                 "base_assortment_id": pl.String}


def parameter_page_rows(read: "Read", tenant_id: str, retail_store_number: str | None, after: ParameterKey | None,
                        limit: int) -> pl.DataFrame:
    """The rows a page is cut from (db.held_export's page reader), resolved: in key order after the key, up to
    limit + 1 rows of the first store that has any, then the first row of the next such store. Stores are taken
    a few at a time by number, with their lines; those without lines (no assortment, or empty ones) yield no rows,
    and the next few are taken until two stores with rows are found or none is left."""
    found, last = [], None
    while True:
        stores = read(_stores_query(tenant_id, retail_store_number, after, last), STORE_COLUMNS)
        lines = read(_lines_query(tenant_id, stores), LINE_COLUMNS) if stores.height else pl.DataFrame(
            schema=LINE_COLUMNS)
        found.append(_resolved(stores, lines, after, limit))
        rows = pl.concat(found)
        if rows.get_column("store_number").n_unique() >= 2 or stores.height < STORE_WINDOW:
            return _needed(rows, limit)
        last = stores.get_column("number").max()


Read = Callable[[sa.Executable, dict[str, pl.DataType]], pl.DataFrame]


def _stores_query(tenant_id: str, retail_store_number: str | None, after: ParameterKey | None,
                  last: str | None) -> sa.Select:
    """The next few stores by number: from the cursor's store on, or after the last store taken. Whether they have
    lines is told by their lines: asked here, it made DuckDB hash every line of the tenant for each page."""
    stores = retail_stores
    query = sa.select(*(stores.c[name] for name in STORE_COLUMNS)).where(stores.c.tenant_id == tenant_id)
    if retail_store_number is not None:
        query = query.where(stores.c.number == retail_store_number)
    if last is not None:
        query = query.where(stores.c.number > last)
    elif after is not None:
        query = query.where(stores.c.number >= after.store_number)
    return query.order_by(stores.c.number).limit(STORE_WINDOW)


LINE_COLUMNS = {"owner": pl.String, "sku_number": pl.String, "replenishment_type": pl.String,
                "reorder_point": POLARS_DECIMAL, "maximum_inventory": POLARS_DECIMAL,
                "modified_time": pl.Datetime("us", "UTC"), "locked": pl.Boolean}


def _lines_query(tenant_id: str, stores: pl.DataFrame) -> sa.CompoundSelect:
    """Every line of the stores (_stores_query's): their own and their assortments', each with the
    id of what it hangs off (`owner`) and its SKU's number."""
    assortment_ids = (stores.select(pl.concat_list(_OWNERS[1:]).explode().drop_nulls().unique()).to_series()
                      .to_list())

    def read(lines: sa.Table, owner: sa.Column, owners: list[str], most: int,
             locked: sa.ColumnElement) -> sa.Select:
        # As many values as the window can hold, the rest null (matching nothing): one statement of one shape,
        # compiled once (db.held_export._compiled_on_duckdb), where a list would be expanded at each execution.
        padded = [sa.literal(value, owner.type) for value in owners + [None] * (most - len(owners))]
        return (sa.select(owner.label("owner"), skus.c.number.label("sku_number"), lines.c.replenishment_type,
                          lines.c.reorder_point, lines.c.maximum_inventory, lines.c.modified_time,
                          locked.label("locked"))
                .join(skus, sa.and_(skus.c.tenant_id == tenant_id, skus.c.id == lines.c.sku_id))
                .where(lines.c.tenant_id == tenant_id, owner.in_(padded)))

    return sa.union_all(
        read(store_assortment_lines, store_assortment_lines.c.retail_store_id, stores["id"].to_list(), STORE_WINDOW,
             store_assortment_lines.c.locked),
        read(assortment_lines, assortment_lines.c.assortment_id, assortment_ids, 2 * STORE_WINDOW,
             sa.null().cast(sa.Boolean)))


def _resolved(stores: pl.DataFrame, lines: pl.DataFrame, after: ParameterKey | None, limit: int) -> pl.DataFrame:
    """The parameters in use per store and SKU of the stores' lines (db.held.held_parameters' columns), in key order,
    after the key: of the keys a page may need (_needed's), not of every line read."""
    owners = pl.concat([stores.select(pl.col("number").alias("store_number"), pl.col(owner).alias("owner"),
                                      pl.lit(rank, pl.Int8).alias("rank"))
                        for rank, owner in enumerate(_OWNERS)]).drop_nulls("owner")
    # A store whose local and base assortment are one has its lines twice, ranked local first: the local wins.
    ranked = owners.join(lines, on="owner").sort("store_number", "sku_number", "rank")
    if after is not None:
        store = pl.col("store_number")
        ranked = ranked.filter((store > after.store_number)
                               | ((store == after.store_number) & (pl.col("sku_number") > after.sku_number)))
    ranked = ranked.join(_needed(ranked.select("store_number", "sku_number").unique(maintain_order=True), limit),
                         on=["store_number", "sku_number"], how="semi", maintain_order="left")
    has_values = pl.col("reorder_point").is_not_null() | pl.col("maximum_inventory").is_not_null()
    # The values come as a pair from the most specific line that has any, else from the most specific line.
    chosen = pl.when(has_values.any()).then(has_values.arg_max()).otherwise(0)
    return ranked.group_by("store_number", "sku_number", maintain_order=True).agg(
        pl.col("replenishment_type").first(),
        *(pl.col(column).get(chosen) for column in ("reorder_point", "maximum_inventory", "modified_time")),
        pl.col("rank").get(chosen).replace_strict(dict(enumerate(PARAMETER_SOURCES)), return_dtype=pl.String)
        .alias("parameter_source"),
        # A lock is on the store and SKU: it holds even while the values still come from an assortment.
        pl.col("locked").fill_null(False).any(),
    )


def _needed(rows: pl.DataFrame, limit: int) -> pl.DataFrame:
    """Of rows in key order, those a page may need: limit + 1 of the first store, then one of the next."""
    first_store = pl.col("store_number") == pl.col("store_number").first()
    return pl.concat([rows.filter(first_store).head(limit + 1), rows.filter(~first_store).head(1)])
