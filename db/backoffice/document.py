"""The back-office document as the checker and the applier read it: paths, entries, errors, list names."""

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Parts = tuple[str | int, ...]
Entry = tuple[Parts, dict[str, Any]]
Row = dict[str, Any]

# The document's reference lists → the store's `list_name` (the GET /product_schema/* route segment).
REFERENCE_LISTS = {
    "brands": "brands",
    "productCategories": "product_categories",
    "mainProductGroups": "main_product_groups",
    "subProductGroups": "sub_product_groups",
    "productConcepts": "product_concepts",
    "exclusivityLevels": "exclusivity_levels",
    "mainActivities": "main_activities",
    "unitOfMeasures": "unit_of_measures",
    "productColors": "product_colors",
    "sizes": "sizes",
    "dynamicAttributes": "dynamic_attributes",
}
OPTIONS_LIST = "dynamic_attributes_options"

# A product's reference fields: document field → (products column, list_name).
PRODUCT_REFERENCES = {
    "brandCode": ("brand_id", "brands"),
    "productCategoryCode": ("product_category_id", "product_categories"),
    "mainProductGroupCode": ("main_product_group_id", "main_product_groups"),
    "subProductGroupCode": ("sub_product_group_id", "sub_product_groups"),
    "productConceptCode": ("product_concept_id", "product_concepts"),
    "exclusivityLevelCode": ("exclusivity_level_id", "exclusivity_levels"),
    "mainActivityCode": ("main_activity_id", "main_activities"),
}
# A product SKU's reference fields: document field → (skus column, list_name).
SKU_REFERENCES = {
    "colorCode": ("product_color_id", "product_colors"),
    "sizeCode": ("size_id", "sizes"),
    "unitOfMeasureCode": ("unit_of_measure_id", "unit_of_measures"),
}

# A retail store's columns whose change its eCom stores hear of (RetailStoreUpdated; released also moves stock into
# or out of their inventory): the loader reads them for every store it writes, whichever fields the document gives.
ANNOUNCED_RETAIL_STORE_COLUMNS = ("number", "name", "released", "street", "post_code", "city", "country_iso_code",
                                  "company_id")


@dataclass(frozen=True)
class DocumentError:
    path: str
    message: str


class DocumentInvalid(ValueError):
    """The document breaks the schema or its references; every problem is listed and nothing is written."""

    def __init__(self, errors: list[DocumentError]) -> None:
        self.errors = errors
        super().__init__(f"the back-office document has {len(errors)} problem(s); nothing was loaded")


def path(parts: Iterable[str | int]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
    return text or "$"


def error_order(error: DocumentError) -> tuple[list[str | int], str]:
    # Natural order, so retailStores[10] comes after retailStores[9].
    pieces = re.split(r"\[(\d+)\]", error.path)
    return [int(piece) if i % 2 else piece for i, piece in enumerate(pieces)], error.message


def entries(container: Any, name: str, parts: Parts = ()) -> list[Entry]:
    """The objects of container[name] with their paths; anything malformed is skipped (the schema reports it)."""
    items = container.get(name) if isinstance(container, dict) else None
    if not isinstance(items, list):
        return []
    return [((*parts, name, i), item) for i, item in enumerate(items) if isinstance(item, dict)]


def nested(document: Any, outer: str, inner: str) -> list[Entry]:
    """The entries of every `inner` list held by an entry of the top-level `outer` list."""
    return [entry for parts, item in entries(document, outer) for entry in entries(item, inner, parts)]


def reference_lists(document: Any) -> list[tuple[str, list[Entry]]]:
    """(list_name, entries) of each reference list the document gives, options included."""
    lists = document.get("referenceLists") if isinstance(document, dict) else None
    found = [(list_name, entries(lists, name, ("referenceLists",))) for name, list_name in REFERENCE_LISTS.items()]
    options = [entry for parts, attribute in entries(lists, "dynamicAttributes", ("referenceLists",))
               for entry in entries(attribute, "options", parts)]
    return [*found, (OPTIONS_LIST, options)]


def product_skus(document: Any) -> list[Entry]:
    return nested(document, "products", "skus")


def keys_of(items: list[Entry], name: str) -> set[str]:
    return {item[name] for _, item in items if isinstance(item.get(name), str)}
