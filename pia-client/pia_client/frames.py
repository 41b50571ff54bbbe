"""Pages of held data, as Arrow or JSON answers, into Polars DataFrames of the schemas in contracts/held_datasets.

A server with columnar reads answers an Arrow IPC stream (the cursor of the next page in `X-Next-Cursor`); one
without answers the JSON page. Both end as the same DataFrame: JSON values arrive as strings (decimals, dates,
instants) and are cast to the contract's types by Arrow, which parses them exactly.
"""

import io

import httpx
import polars as pl
import pyarrow as pa

from contracts.held_datasets import ARROW_STREAM, NEXT_CURSOR_HEADER

# Arrow first; JSON from servers without columnar reads.
ACCEPT_COLUMNAR = f"{ARROW_STREAM}, application/json;q=0.5"


def _as_received(data_type: pa.DataType) -> pa.DataType:
    """The type a JSON value of `data_type` arrives as: strings for decimals, dates and instants."""
    if pa.types.is_list(data_type):
        return pa.list_(_as_received(data_type.value_type))
    if pa.types.is_decimal(data_type) or pa.types.is_date(data_type) or pa.types.is_timestamp(data_type):
        return pa.string()
    return data_type


def _received_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, _as_received(f.type)) for f in schema])


def is_arrow(response: httpx.Response) -> bool:
    return response.headers.get("Content-Type", "").split(";")[0].strip() == ARROW_STREAM


def page_table(response: httpx.Response, schema: pa.Schema) -> pa.Table:
    """One page (Arrow or JSON) as an Arrow table of `schema`."""
    if is_arrow(response):
        return pa.ipc.open_stream(io.BytesIO(response.content)).read_all().cast(schema)
    items = response.json()["items"]
    return pa.Table.from_pylist(items, schema=_received_schema(schema)).cast(schema)


def next_cursor(response: httpx.Response) -> str | None:
    if is_arrow(response):
        return response.headers.get(NEXT_CURSOR_HEADER) or None
    return response.json().get("nextCursor")


def frame(tables: list[pa.Table], schema: pa.Schema) -> pl.DataFrame:
    """The pages as one DataFrame; an empty one still has every column of the schema."""
    whole = pa.concat_tables(tables) if tables else schema.empty_table()
    result = pl.from_arrow(whole)
    assert isinstance(result, pl.DataFrame)
    return result
