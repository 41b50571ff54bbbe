"""The Python client of pia's public API, for planning partners, analysts and our own tools (`pia upload`).

The `pia-client` distribution stands alone: a partner installs it without the server. It speaks HTTP only and
imports nothing of the server's; the contract modules it shares with the server (formats, limits, batch kinds,
held-data schemas) are copies in `contracts/`, kept current by pia-client/copy_contracts.py.

- `tokens`: credentials, and the access token cached until shortly before it expires
- `retries`: SPEC's retry guidance as a tenacity policy
- `api`: `PiaClient` (sync) and `AsyncPiaClient` (async) over httpx: uploads, batch status, paging iterators,
  held data and exports as Polars DataFrames
- `frames`: Arrow or JSON pages into DataFrames of the schemas in contracts/held_datasets.py
- `upload_file`: a planner's CSV or Parquet file read and checked, by row number, into items
- `upload`: the items into batches with deterministic ids, sent, and followed to their final state
- `cli`: the `pia-upload` command (mounted as `pia upload` by the server's command)
"""
