"""The data-quality contract of held demand planning data: great-expectations suites that `pia pipeline audit` runs.

Each suite checks one audit dataset: the rows the read path returns, one per held item, with the facts the
rules need already derived (pipeline/audit.py derives them). The columns of each dataset are listed below
its name; every row also carries the columns of AUDIT_ROW_KEY, which name an offending row in the report.
Every expectation names itself and the rule it checks in its meta, so the report and the Data Docs say what
failed in the contract's words.

Importing this module imports great-expectations (seconds): only the audit command imports it.
"""

from typing import Any

import great_expectations as gx
import great_expectations.expectations as gxe

from contracts.limits import MAX_DECIMAL_PLACES, MAX_HORIZON_DAYS

PARAMETER_SOURCES = ("RETAIL_STORE_SPECIFIC", "LOCAL_ASSORTMENT", "BASE_ASSORTMENT")

# tenant_id, store_kind (RETAIL or ECOM), store_number, sku_number
AUDIT_ROW_KEY = ("tenant_id", "store_kind", "store_number", "sku_number")

# One row per held sales forecast that GET /sales_forecasts returns today (UTC). Columns:
#   horizon_start_date, horizon_end_date  as held
#   quantities_readable     the quantities are held as whole 8-byte integers (of ten-thousandths)
#   horizon_days            the number of quantities held
#   expected_end_date       horizon_start_date + (horizon_days - 1) days
#   out_of_range_quantities quantities beyond DECIMAL(18,4) (held as integers of ten-thousandths, so a quantity
#                           always has at most 4 decimals, but 8 bytes hold a few more digits than 18)
#   smallest_quantity       the smallest quantity (a float: its sign is exact); null when none is readable
#   ended_before_today      horizon_end_date is before today (UTC): such a row is expired and must not be returned
#   store_known, sku_known  the tenant has a store of that kind with that number, and a SKU with that number
HELD_SALES_FORECASTS = "held_sales_forecasts"

# One row per retail store and SKU that GET /replenishment_parameters returns, beside the lines of that store
# and SKU read from the assortment tables on their own. Columns:
#   reorder_point, maximum_inventory, parameter_source, locked  as returned (Decimals, a string, a boolean)
#   source_line_exists             a line of the kind parameter_source names exists for the store and SKU
#   source_line_carries_values     that line holds exactly the returned reorder point and maximum inventory
#   follows_resolution_order       no more specific line (store-specific, then local, then base) has values
#   locked_as_store_line           locked is the store-specific line's flag, false without one
HELD_REPLENISHMENT_PARAMETERS = "held_replenishment_parameters"

# One row per store-specific assortment line (store_kind RETAIL). Columns:
#   store_known, sku_known  the line's retail store and SKU exist in the tenant (a line of a missing one is
#                           silently left out of GET /replenishment_parameters)
STORE_ASSORTMENT_LINES = "store_assortment_lines"

DATASETS = (HELD_SALES_FORECASTS, HELD_REPLENISHMENT_PARAMETERS, STORE_ASSORTMENT_LINES)


def _named(expectation: type[gxe.Expectation], name: str, rule: str, **arguments: Any) -> gxe.Expectation:
    return expectation(meta={"name": name, "rule": rule}, **arguments)


def _always(column: str, name: str, rule: str) -> gxe.Expectation:
    """A derived fact that must hold on every row."""
    return _named(gxe.ExpectColumnValuesToBeInSet, name, rule, column=column, value_set=[True])


def _never(column: str, name: str, rule: str) -> gxe.Expectation:
    return _named(gxe.ExpectColumnValuesToBeInSet, name, rule, column=column, value_set=[False])


def _forecast_expectations() -> list[gxe.Expectation]:
    return [
        _always("quantities_readable", "forecast_quantities_readable", "Quantities are held as whole 8-byte integers"),
        _named(gxe.ExpectColumnValuesToBeBetween, "forecast_quantities_fit_decimal",
               f"Quantities fit DECIMAL(18,{MAX_DECIMAL_PLACES})", column="out_of_range_quantities",
               min_value=0, max_value=0),
        _named(gxe.ExpectColumnValuesToBeBetween, "forecast_quantities_non_negative",
               "Quantities are non-negative", column="smallest_quantity", min_value=0),
        _named(gxe.ExpectColumnValuesToBeBetween, "forecast_horizon_length_allowed",
               f"A horizon has at least one day and at most {MAX_HORIZON_DAYS}", column="horizon_days",
               min_value=1, max_value=MAX_HORIZON_DAYS),
        _named(gxe.ExpectColumnPairValuesToBeEqual, "forecast_horizon_end_is_start_plus_length",
               "horizonEndDate equals horizonStartDate plus (quantities length minus 1) days",
               column_A="horizon_end_date", column_B="expected_end_date"),
        _never("ended_before_today", "forecast_not_expired",
               "Forecasts whose horizon ended before today (UTC) are not returned"),
        _always("store_known", "forecast_store_known", "The retail or eCom store is one of the tenant's"),
        _always("sku_known", "forecast_sku_known", "The SKU is one of the tenant's"),
    ]


def _parameter_expectations() -> list[gxe.Expectation]:
    return [
        _named(gxe.ExpectColumnPairValuesAToBeGreaterThanB, "parameter_reorder_point_below_maximum",
               "reorderPoint is less than maximumInventory", column_A="maximum_inventory", column_B="reorder_point",
               or_equal=False, ignore_row_if="either_value_is_missing"),
        _named(gxe.ExpectColumnValuesToBeInSet, "parameter_source_named", "parameterSource is one of the enum",
               column="parameter_source", value_set=list(PARAMETER_SOURCES)),
        _always("source_line_exists", "parameter_source_line_exists",
                "parameterSource names a line that exists for the store and SKU"),
        _always("source_line_carries_values", "parameter_source_line_carries_values",
                "The line parameterSource names carries the returned reorderPoint and maximumInventory"),
        _always("follows_resolution_order", "parameter_source_follows_resolution_order",
                "Store-specific line if it has values, else the local assortment's, else the base assortment's"),
        _always("locked_as_store_line", "parameter_locked_only_on_store_specific_lines",
                "locked is true only through a locked store-specific line"),
    ]


def _store_line_expectations() -> list[gxe.Expectation]:
    return [
        _always("store_known", "store_line_store_known",
                "A store-specific line belongs to one of the tenant's retail stores"),
        _always("sku_known", "store_line_sku_known", "A store-specific line is for one of the tenant's SKUs"),
    ]


def held_data_suites() -> dict[str, gx.ExpectationSuite]:
    """A fresh suite per dataset, by dataset name (fresh: a context takes ownership of the suites added to it)."""
    expectations = {HELD_SALES_FORECASTS: _forecast_expectations(),
                    HELD_REPLENISHMENT_PARAMETERS: _parameter_expectations(),
                    STORE_ASSORTMENT_LINES: _store_line_expectations()}
    return {name: gx.ExpectationSuite(name=name, expectations=expectations[name]) for name in DATASETS}
