# Copied from contracts/batch_kinds.py by pia-client/copy_contracts.py: edit that file, then run it.
"""The two kinds of demand planning batch, as batchKind shows them."""

SALES_FORECAST = "SALES_FORECAST"
REPLENISHMENT_PARAMETER = "REPLENISHMENT_PARAMETER"
BATCH_KINDS = (SALES_FORECAST, REPLENISHMENT_PARAMETER)
