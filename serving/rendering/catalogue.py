"""Catalogue rows rendered as ECOMMERCE.md's JSON: reference entries, products, inventory, campaigns, programs."""

from datetime import date
from decimal import Decimal
from typing import Any

import orjson
import sqlalchemy as sa

from contracts.rendering import decimal, instant
from db.campaigns import Campaign
from db.catalogue import ProductRecord
from db.inventory import WAREHOUSE, SkuInventory
from serving.rendering.stores import status_of

# The fields a list adds to {"id","code","name"}: wire name → column.
_LIST_FIELDS: dict[str, dict[str, str]] = {
    "product_colors": {"colorCode": "color_code"},
    "sizes": {"sortOrder": "sort_order"},
    "dynamic_attributes": {"valueType": "value_type"},
    "dynamic_attributes_options": {"dynamicAttributeId": "dynamic_attribute_id", "sortOrder": "sort_order"},
}

# Product field → products column holding its reference id.
_REFERENCE_IDS = {"brandId": "brand_id", "productCategoryId": "product_category_id",
                  "mainProductGroupId": "main_product_group_id", "subProductGroupId": "sub_product_group_id",
                  "productConceptId": "product_concept_id", "exclusivityLevelId": "exclusivity_level_id",
                  "mainActivityId": "main_activity_id"}


def reference_entry(list_name: str, row: sa.Row) -> dict[str, Any]:
    entry = {"id": row.id, "code": row.code, "name": row.name}
    for name, column in _LIST_FIELDS.get(list_name, {}).items():
        entry[name] = row._mapping[column]
    return entry


def _attribute(row: sa.Row) -> dict[str, Any]:
    if row.option_ids is not None:
        return {"dynamicAttributeId": row.dynamic_attribute_id, "optionIds": orjson.loads(row.option_ids)}
    return {"dynamicAttributeId": row.dynamic_attribute_id, "value": row.value}


def _sku(row: sa.Row) -> dict[str, Any]:
    return {"id": row.sku_id, "number": row.sku_number, "gtin": row.gtin, "name": row.sku_name,
            "published": row.sku_published, "productColorId": row.product_color_id, "sizeId": row.size_id,
            "unitOfMeasureId": row.unit_of_measure_id, "price": decimal(row.price), "vatRate": decimal(row.vat_rate)}


def product(record: ProductRecord) -> dict[str, Any]:
    row = record.product
    return {
        "id": row.id, "number": row.number, "name": row.name, "description": row.description,
        "status": status_of(row.released),
        "published": row.released and any(sku.sku_published for sku in record.skus),
        **{name: row._mapping[column] for name, column in _REFERENCE_IDS.items()},
        "dynamicAttributes": [_attribute(value) for value in record.attributes],
        "images": [{"url": image.url, "sortOrder": image.sort_order, "altText": image.alt_text}
                   for image in record.images],
        "currencyIsoCode": row.currency_iso_code,
        "skus": [_sku(sku) for sku in record.skus],
        "modifiedTime": instant(row.modified_time),
    }


def _available(on_hand: Decimal, reserved: Decimal) -> Decimal:
    return max(on_hand - reserved, Decimal(0))


def inventory(found: SkuInventory) -> dict[str, Any]:
    locations = [{"locationId": row.location_id, "locationNumber": row.location_number,
                  "locationName": row.location_name, "locationType": row.location_type,
                  "onHand": decimal(row.on_hand), "reserved": decimal(row.reserved),
                  "available": decimal(_available(row.on_hand, row.reserved))} for row in found.locations]
    changes = [row.modified_time for row in found.locations if row.modified_time is not None]
    return {"skuId": found.sku_id, "skuNumber": found.sku_number,
            # What the web shop can sell for delivery: the serving warehouses only.
            "available": decimal(sum((_available(row.on_hand, row.reserved) for row in found.locations
                                      if row.location_type == WAREHOUSE), Decimal(0))),
            "locations": locations, "modifiedTime": instant(max(changes, default=None))}


def campaign(found: Campaign, today: date) -> dict[str, Any]:
    row = found.row
    membership = any(sku.loyalty_membership_required for sku in found.skus)
    program = ({"id": row.loyalty_program_id, "name": row.loyalty_program_name}
               if membership and row.loyalty_program_name is not None else None)
    return {
        "id": row.id, "code": row.code, "name": row.name,
        "validFrom": row.valid_from.isoformat(), "validTo": row.valid_to.isoformat(),
        "currencyIsoCode": row.currency_iso_code,
        "status": "PLANNED" if today < row.valid_from else "ACTIVE",
        "campaignType": row.campaign_type,
        # SPEC.md shows campaign prices as JSON numbers; a float prints the shortest form that reads back equal.
        "skus": [{"skuId": sku.sku_id, "campaignPrice": float(sku.campaign_price),
                  "loyaltyProgramMembershipRequired": sku.loyalty_membership_required} for sku in found.skus],
        "loyaltyProgram": program,
    }


def loyalty_program(row: sa.Row) -> dict[str, Any]:
    return {"id": row.id, "code": row.code, "name": row.name, "currencyIsoCode": row.currency_iso_code,
            "retailStoreCount": row.retail_store_count}
