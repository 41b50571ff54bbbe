"""The back-office document `pia demo` loads: a small Norwegian grocery chain, and optionally its web shop.

Built to exercise the API: unreleased stores, a loyalty program covering some stores, a BASE assortment
refined by a LOCAL one (so assortments differ between stores), MANUAL and locked lines, and replenishment
values resolved from each source (store-specific line, local assortment, base assortment). With `products`, the
eCom stores sell the catalogue of serving/demo_shop.py.
"""

from datetime import UTC, date, datetime
from typing import Any

from serving import demo_shop

BASE_CODE = "BASIS"
LOCAL_CODE = "VEST"

_BASE_SKUS = (
    "Helmelk 1 l", "Lettmelk 1 l", "Skummet melk 1 l", "Kulturmelk 1 l", "Gresk yoghurt 500 g",
    "Smør usaltet 250 g", "Brunost 500 g", "Jarlsberg 700 g", "Norvegia 1 kg", "Egg 12 stk",
    "Grovbrød 750 g", "Kneippbrød 750 g", "Havregryn 1 kg", "Knekkebrød 520 g", "Spaghetti 1 kg",
    "Basmatiris 1 kg", "Hvetemel 2 kg", "Sukker 1 kg", "Kaffe filtermalt 500 g", "Te Earl Grey 20 pk",
    "Appelsinjuice 1 l", "Eplejuice 1 l", "Mineralvann 1,5 l", "Bananer løs vekt", "Epler røde 1 kg",
    "Poteter 2 kg", "Gulrøtter 1 kg", "Løk 1 kg", "Tomater 500 g", "Agurk",
    "Isbergsalat", "Kyllingfilet 1 kg", "Kjøttdeig 400 g", "Svinekoteletter 800 g", "Laksefilet 500 g",
    "Fiskeboller 400 g", "Leverpostei 200 g", "Makrell i tomat 170 g", "Frossen pizza 550 g",
    "Frosne erter 600 g", "Vaniljeis 2 l", "Melkesjokolade 200 g", "Potetgull 250 g", "Tørkerull 4 pk",
    "Toalettpapir 8 pk", "Oppvaskmiddel 500 ml", "Vaskemiddel 1,5 l", "Tannkrem 75 ml", "Sjampo 250 ml",
    "Bleier str. 4 42 pk",
)
# West-coast specialities, carried only by stores with the local assortment.
_LOCAL_SKUS = (
    "Fiskekaker 500 g", "Klippfisk 400 g", "Plukkfisk 450 g", "Reker i lake 200 g", "Fersk torsk løs vekt",
    "Skillingsboller 6 pk", "Lefse 8 stk", "Rømmegrøt 450 g", "Pinnekjøtt 1 kg", "Kaviar tube 185 g",
)
# The local assortment also overrides the base values of these (milk sells faster on the west coast).
_LOCAL_OVERRIDES = 5

# number, name, street, post code, city, local assortment, released
_RETAIL_STORES = (
    ("1001", "Bergen Sentrum", "Torgallmenningen 8", "5014", "Bergen", True, True),
    ("1002", "Oslo Grünerløkka", "Thorvald Meyers gate 40", "0555", "Oslo", False, True),
    ("1003", "Trondheim Solsiden", "Beddingen 10", "7014", "Trondheim", False, True),
    ("1004", "Stavanger Madla", "Madlaveien 120", "4042", "Stavanger", True, False),
)
_LOYALTY_MEMBERS = ["1001", "1002", "1003"]

# store, SKU, replenishment type, reorder point, maximum inventory, locked
_STORE_LINES = (
    ("1001", "100001", "AUTO", "20", "60", True),
    ("1001", "100051", "AUTO", "8", "24", False),
    ("1002", "100010", "MANUAL", "30", "90", True),
    ("1002", "100019", "AUTO", "12", "40", False),
    ("1003", "100032", "AUTO", "10", "30", True),
)

# Where the demo's replenishment values come from, for a few (store, SKU) pairs.
DEMO_RESOLUTION_EXAMPLES = {
    ("1001", "100001"): "RETAIL_STORE_SPECIFIC",
    ("1001", "100002"): "LOCAL_ASSORTMENT",
    ("1001", "100020"): "BASE_ASSORTMENT",
    ("1002", "100001"): "BASE_ASSORTMENT",
}


def _sku_number(index: int) -> str:
    return str(100001 + index)


def _line(index: int, manual: bool, scale: int) -> dict[str, Any]:
    reorder_point = (4 + index % 7) * scale
    return {"skuNumber": _sku_number(index), "replenishmentType": "MANUAL" if manual else "AUTO",
            "reorderPoint": str(reorder_point), "maximumInventory": str(reorder_point * 3)}


def _assortments() -> list[dict[str, Any]]:
    # Every tenth base SKU is ordered by hand, and so is the fresh cod of the local assortment.
    base = [_line(i, manual=i % 10 == 9, scale=1) for i in range(len(_BASE_SKUS))]
    local_indexes = [*range(_LOCAL_OVERRIDES), *range(len(_BASE_SKUS), len(_BASE_SKUS) + len(_LOCAL_SKUS))]
    local = [_line(i, manual=_sku_number(i) == "100055", scale=2) for i in local_indexes]
    return [
        {"code": BASE_CODE, "kind": "BASE", "name": "Basissortiment", "lines": base},
        {"code": LOCAL_CODE, "kind": "LOCAL", "name": "Lokalsortiment Vestlandet", "lines": local},
    ]


def _retail_store(row: tuple[str, str, str, str, str, bool, bool]) -> dict[str, Any]:
    number, name, street, post_code, city, local, released = row
    store: dict[str, Any] = {
        "number": number, "name": f"Fjordmarked {name}", "companyNumber": "10", "released": released,
        "visitAddress": {"street": street, "postCode": post_code, "city": city, "countryIsoCode": "NO"},
        "baseAssortmentCode": BASE_CODE,
    }
    if local:
        store["localAssortmentCode"] = LOCAL_CODE
    return store


# Catalogue sizes: the demo tenant's, and the test tenant's smaller copy.
DEMO_PRODUCTS = 300
TEST_PRODUCTS = 30


def demo_document(tenant_label: str, products: int = 0, tenant_id: str | None = None,
                  today: date | None = None) -> dict[str, Any]:
    """The demo's back-office document; tenant_label goes into the names to tell tenants apart.

    With `products`, the web shop's catalogue of that many products is added (customers too, given the tenant's
    id, from which their ids are made); campaign dates are relative to `today` (UTC by default).
    """
    document = _grocery_document(tenant_label)
    if products:
        _add_shop(document, demo_shop.shop_document(tenant_label, products, tenant_id,
                                                    today or datetime.now(UTC).date()))
    return document


def _add_shop(document: dict[str, Any], shop: dict[str, Any]) -> None:
    for name in ("referenceLists", "vatRates", "priceLists", "products", "warehouses", "stock", "campaigns",
                 "customers"):
        document[name] = shop[name]
    document["assortments"].append(shop["assortment"])
    document["companies"][0] |= {"basePriceListCode": demo_shop.BASE_PRICE_LIST_CODE, "freightVatRate": "25"}
    document["loyaltyPrograms"][0]["companyNumber"] = "10"
    webshop, business = document["ecomStores"]
    warehouses = [number for number, _ in demo_shop.WAREHOUSES]
    webshop |= {"baseAssortmentCode": demo_shop.ASSORTMENT_CODE, "priceListCode": demo_shop.PRICE_LIST_CODE,
                "servingWarehouseNumbers": warehouses, "leadTimeDays": 2, "paymentCaptureEnabled": True}
    if shop["defaultCustomerId"]:
        webshop["defaultCustomerId"] = shop["defaultCustomerId"]
    # The business shop sells the same assortment at base prices, from one warehouse, without payment capture.
    business |= {"baseAssortmentCode": demo_shop.ASSORTMENT_CODE, "servingWarehouseNumbers": warehouses[1:],
                 "leadTimeDays": 5}


def _grocery_document(tenant_label: str) -> dict[str, Any]:
    return {
        "companies": [{"number": "10", "name": f"Fjordmarked Dagligvare AS ({tenant_label})",
                       "currencyIsoCode": "NOK"}],
        "skus": [{"number": _sku_number(i), "name": name}
                 for i, name in enumerate(_BASE_SKUS + _LOCAL_SKUS)],
        "assortments": _assortments(),
        "retailStores": [_retail_store(row) for row in _RETAIL_STORES],
        "ecomStores": [
            {"number": "2001", "name": "Fjordmarked Nettbutikk", "companyNumber": "10", "released": True},
            {"number": "2002", "name": "Fjordmarked Bedrift", "companyNumber": "10", "released": False},
        ],
        "loyaltyPrograms": [{"code": "FJORDVENN", "name": f"Fjordvenn ({tenant_label})",
                             "retailStoreNumbers": list(_LOYALTY_MEMBERS)}],
        "storeAssortmentLines": [
            {"retailStoreNumber": store, "skuNumber": sku, "replenishmentType": kind, "reorderPoint": low,
             "maximumInventory": high, "locked": locked}
            for store, sku, kind, low, high, locked in _STORE_LINES
        ],
    }
