"""The Python client of pia's public API, for planning partners, analysts and our own tools (`pia upload`).

The `pia-client` distribution stands alone: a partner installs it without the server. It speaks HTTP only and
imports nothing of the server's but `contracts` (the `pia-contracts` distribution, which the server installs too):
the field rules, limits, batch kinds and held-data schemas, which need pyarrow alone.

- `tokens`: credentials, and the access token cached until shortly before it expires
- `retries`: SPEC's retry guidance as a tenacity policy
- `api`: `PiaClient` (sync) and `AsyncPiaClient` (async) over httpx: uploads, batch status, paging iterators,
  held data and exports as Polars DataFrames
- `frames`: Arrow or JSON pages into DataFrames of the schemas in contracts/held_datasets.py
- `upload_file`: a planner's CSV or Parquet file read and checked, by row number, into items
- `upload`: the items into batches with deterministic ids, sent, and followed to their final state
- `cli`: the `pia-upload` command (mounted as `pia upload` by the server's command)
"""
