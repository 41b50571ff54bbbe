"""The demo's web shop: a catalogue of apparel and home goods worth browsing, with prices, stock, campaigns and
customers, added to the grocery chain's back-office document (serving/demo_data.py).

Deterministic: the same tenant label, size and day give the same document (a seeded generator, no clock but
`today`), so loading it again changes nothing. Campaign dates are relative to `today`, so their statuses hold.
"""

import random
import uuid
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from db.backoffice.checking import gtin_check_digit

ASSORTMENT_CODE = "NETT"
PRICE_LIST_CODE = "NETTPRIS"
BASE_PRICE_LIST_CODE = "GRUNNPRIS"
WAREHOUSES = (("9001", "Sentrallager Oslo"), ("9002", "Lager Bergen"))
# The retail stores that hold shop stock (released ones; 1004 is not released).
_STOCKING_STORES = ("1001", "1002", "1003")

_BRANDS = (("NORDLYS", "Nordlys"), ("FJELLREV", "Fjellrev"), ("HAVBRIS", "Havbris"), ("SKOGFJORD", "Skog & Fjord"))
# category code, name, main group, VAT rate code, base prices to pick from
_APPAREL = (("GENSER", "Gensere"), ("JAKKE", "Jakker"), ("BUKSE", "Bukser"), ("SKJORTE", "Skjorter"),
            ("KJOLE", "Kjoler"))
_HOME = (("TEKSTIL", "Tekstiler"), ("KJOKKEN", "Kjøkken"), ("LYS", "Belysning"), ("DEKOR", "Dekor"),
         ("DELIKATESSE", "Delikatesser"))
_COLORS = (("BLACK", "Svart", "#111111"), ("WHITE", "Hvit", "#F5F5F5"), ("NAVY", "Marineblå", "#1F3A5F"),
           ("RED", "Rød", "#B22222"), ("GREEN", "Skoggrønn", "#2E5E3A"), ("GREY", "Grå", "#8A8D8F"),
           ("SAND", "Sand", "#D8C8A8"), ("BLUE", "Fjordblå", "#3D7AB8"))
_SIZES = ("XS", "S", "M", "L", "XL")
_MATERIALS = (("WOOL", "Ull"), ("COTTON", "Bomull"), ("LINEN", "Lin"), ("RECYCLED", "Resirkulert polyester"),
              ("CERAMIC", "Keramikk"), ("GLASS", "Glass"), ("OAK", "Eik"))
_APPAREL_NOUNS = {"GENSER": "genser", "JAKKE": "jakke", "BUKSE": "bukse", "SKJORTE": "skjorte", "KJOLE": "kjole"}
_HOME_NOUNS = {"TEKSTIL": "pledd", "KJOKKEN": "skål", "LYS": "lampe", "DEKOR": "vase", "DELIKATESSE": "kaffe"}
_ADJECTIVES = ("Fjord", "Polar", "Vind", "Lyng", "Nord", "Kyst", "Tind", "Bre", "Myr", "Elv", "Skjær", "Li")
_FIRST_NAMES = ("Kari", "Ola", "Ingrid", "Lars", "Sofie", "Magnus", "Nora", "Henrik", "Emma", "Jonas", "Thea", "Sindre")
_LAST_NAMES = ("Nordmann", "Hansen", "Johansen", "Olsen", "Larsen", "Andersen", "Berg", "Haugen", "Dahl", "Lie",
               "Moen", "Strand")


@dataclass(frozen=True)
class _Sku:
    number: str
    product_index: int
    price: Decimal


def shop_document(tenant_label: str, products: int, tenant_id: str | None, today: date) -> dict[str, Any]:
    """The shop's lists; `extend_stores` adds the shop settings to the grocery document's stores."""
    rng = random.Random(f"pia demo shop {products}")
    items, shop_skus = _products(rng, products)
    customers = _customers(tenant_id) if tenant_id else []
    return {
        "referenceLists": _reference_lists(),
        "vatRates": [{"code": "STD", "rate": "25"}, {"code": "FOOD", "rate": "15"}],
        "priceLists": _price_lists(tenant_label, shop_skus),
        "products": items,
        "warehouses": [{"number": number, "name": name, "companyNumber": "10"} for number, name in WAREHOUSES],
        "stock": _stock(rng, shop_skus),
        "campaigns": _campaigns(shop_skus, today),
        "customers": customers,
        # Every product but each 25th is sold online: most of the catalogue, not all of it.
        "assortment": {"code": ASSORTMENT_CODE, "kind": "BASE", "name": "Nettbutikk",
                       "lines": [{"skuNumber": sku.number, "replenishmentType": "AUTO"} for sku in shop_skus
                                 if sku.product_index % 25 != 24]},
        "defaultCustomerId": customers[0]["id"] if customers else None,
    }


def _reference_lists() -> dict[str, Any]:
    def plain(pairs: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
        return [{"code": code, "name": name} for code, name in pairs]
    return {
        "brands": plain(_BRANDS),
        "productCategories": plain(_APPAREL + _HOME),
        "mainProductGroups": plain((("KLAER", "Klær"), ("HJEM", "Hjem"))),
        "subProductGroups": plain((("DAME", "Dame"), ("HERRE", "Herre"), ("INTERIOR", "Interiør"))),
        "productConcepts": plain((("BASIS", "Basis"), ("PREMIUM", "Premium"))),
        "exclusivityLevels": plain((("STANDARD", "Standard"), ("NETT", "Kun på nett"))),
        "mainActivities": plain((("HVERDAG", "Hverdag"), ("FRILUFT", "Friluft"))),
        "unitOfMeasures": plain((("STK", "Stykk"), ("PK", "Pakke"))),
        "productColors": [{"code": code, "name": name, "colorCode": hex_code} for code, name, hex_code in _COLORS],
        "sizes": [{"code": code, "name": code, "sortOrder": i} for i, code in enumerate((*_SIZES, "ONE"), start=1)],
        "dynamicAttributes": [
            {"code": "MATERIAL", "name": "Materiale", "valueType": "OPTION",
             "options": [{"code": code, "name": name, "sortOrder": i}
                         for i, (code, name) in enumerate(_MATERIALS, start=1)]},
            {"code": "WASH_TEMP", "name": "Vasketemperatur", "valueType": "NUMBER"},
            {"code": "ORGANIC", "name": "Økologisk", "valueType": "BOOLEAN"},
            {"code": "FIT", "name": "Passform", "valueType": "TEXT"},
        ],
    }


def _gtin(serial: int) -> str:
    body = f"704{serial:09d}"  # a made-up GS1 prefix in Norway's range
    return body + str(gtin_check_digit(body))


def _products(rng: random.Random, count: int) -> tuple[list[dict[str, Any]], list[_Sku]]:
    """Two thirds apparel (1 or 2 colors in five sizes), one third home goods (1 to 3 colors, one size)."""
    items: list[dict[str, Any]] = []
    shop_skus: list[_Sku] = []
    for index in range(count):
        apparel = index % 3 != 2
        category, category_name = rng.choice(_APPAREL if apparel else _HOME)
        noun = (_APPAREL_NOUNS if apparel else _HOME_NOUNS)[category]
        name = f"{rng.choice(_ADJECTIVES)}{noun} {index + 1}"
        number = f"{'K' if apparel else 'H'}{index + 1:05d}"
        price = Decimal(rng.choice((199, 299, 399, 499, 699, 899, 1299) if apparel else (49, 99, 149, 249, 399, 599)))
        colors = rng.sample(_COLORS, (1 + index % 2) if apparel else (1 + index % 3))
        sizes = _SIZES if apparel else ("ONE",)
        food = category == "DELIKATESSE"
        skus = []
        for color_code, color_name, _ in colors:
            for size in sizes:
                sku_number = f"{number}-{color_code}-{size}"
                skus.append({"number": sku_number, "name": f"{name} {color_name.lower()} {size}",
                             "gtin": _gtin(len(shop_skus) + len(skus) + 1), "colorCode": color_code,
                             "sizeCode": size, "unitOfMeasureCode": "STK", "vatRateCode": "FOOD" if food else "STD",
                             # A few SKUs wait for their photos before they are published.
                             "published": (len(shop_skus) + len(skus)) % 40 != 39})
        shop_skus += [_Sku(sku["number"], index, price) for sku in skus]
        material = rng.choice(_MATERIALS[:4] if apparel else _MATERIALS[4:])[0]
        values: list[dict[str, Any]] = [{"code": "MATERIAL", "optionCodes": [material]},
                                        {"code": "ORGANIC", "value": "true" if index % 4 == 0 else "false"}]
        if apparel:
            values += [{"code": "WASH_TEMP", "value": rng.choice(("30", "40", "60"))},
                       {"code": "FIT", "value": rng.choice(("Normal", "Slank", "Romslig"))}]
        items.append({
            "number": number, "name": name, "description": f"{name}: {category_name.lower()} fra demo-katalogen.",
            # Every 50th product is still being prepared (inside the shop's assortment, which leaves out every 25th,
            # so that includeUnpublished=true shows them).
            "released": index % 50 != 20,
            "brandCode": rng.choice(_BRANDS)[0], "productCategoryCode": category,
            "mainProductGroupCode": "KLAER" if apparel else "HJEM",
            "subProductGroupCode": rng.choice(("DAME", "HERRE")) if apparel else "INTERIOR",
            "productConceptCode": "PREMIUM" if price >= 699 else "BASIS",
            "exclusivityLevelCode": "NETT" if index % 10 == 0 else "STANDARD",
            "mainActivityCode": "FRILUFT" if category == "JAKKE" else "HVERDAG",
            "images": [{"url": f"https://images.example.com/demo/{number.lower()}/{view}.jpg", "sortOrder": i,
                        "altText": f"{name}, {view}"} for i, view in enumerate(("front", "detalj"), start=1)],
            "dynamicAttributes": values,
            "skus": skus,
        })
    return items, shop_skus


def _price_lists(tenant_label: str, shop_skus: list[_Sku]) -> list[dict[str, Any]]:
    # Online, every third product sells 10 % below its base price; the rest fall back to the base price.
    online = [{"skuNumber": sku.number, "price": str((sku.price * Decimal("0.9")).quantize(Decimal(1)))}
              for sku in shop_skus if sku.product_index % 3 == 0]
    return [{"code": BASE_PRICE_LIST_CODE, "name": f"Grunnpriser ({tenant_label})",
             "prices": [{"skuNumber": sku.number, "price": str(sku.price)} for sku in shop_skus]},
            {"code": PRICE_LIST_CODE, "name": "Nettpriser", "prices": online}]


def _stock(rng: random.Random, shop_skus: list[_Sku]) -> list[dict[str, Any]]:
    """Both warehouses and the released stores hold stock; some SKUs are sold out, some only in a store."""
    levels = []

    def level(location: str, sku: _Sku, on_hand: int) -> None:
        levels.append({"locationNumber": location, "skuNumber": sku.number, "onHand": str(on_hand)})

    for k, sku in enumerate(shop_skus):
        if k % 23 == 0:  # sold out everywhere
            level(WAREHOUSES[0][0], sku, 0)
            continue
        if k % 29 == 0:  # only in a store
            level(_STOCKING_STORES[k % len(_STOCKING_STORES)], sku, 2)
            continue
        on_hand = rng.randint(0, 40)
        level(WAREHOUSES[0][0], sku, on_hand)
        if k % 2 == 0:
            level(WAREHOUSES[1][0], sku, rng.randint(0, 20))
        for store in _STOCKING_STORES:
            if rng.random() < 0.3:
                level(store, sku, rng.randint(1, 8))
    return levels


def _campaigns(shop_skus: list[_Sku], today: date) -> list[dict[str, Any]]:
    sold = [sku for sku in shop_skus if sku.product_index % 25 != 24]  # in the shop's assortment
    # Home goods (one size) suit three-for-two; the other campaigns take apparel.
    home = [sku for sku in sold if sku.number.startswith("H")]
    apparel = [sku for sku in sold if sku.number.startswith("K")]

    def campaign(code: str, name: str, kind: str, start: int, end: int, chosen: list[_Sku], released: bool = True,
                 members_only: int = 0) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "code": code, "name": name, "campaignType": kind, "validFrom": str(today + timedelta(days=start)),
            "validTo": str(today + timedelta(days=end)), "released": released, "companyNumber": "10",
            "skus": [{"skuNumber": sku.number,
                      "campaignPrice": str(sku.price if kind == "THREE_FOR_TWO"
                                           else (sku.price * Decimal("0.8")).quantize(Decimal(1))),
                      "loyaltyProgramMembershipRequired": i < members_only}
                     for i, sku in enumerate(chosen)]}
        if members_only:
            entry["loyaltyProgramCode"] = "FJORDVENN"
        return entry

    return [
        campaign("VINTERSALG", "Vintersalg", "NORMAL", -7, 14, apparel[0:40:4], members_only=2),
        campaign("TA3BETAL2", "Ta 3, betal for 2", "THREE_FOR_TWO", -3, 30, home[0:9]),
        campaign("VAARNYTT", "Vårnyheter", "NORMAL", 20, 50, apparel[40:80:5]),
        campaign("HOSTSALG", "Høstsalg", "NORMAL", -60, -30, apparel[80:120:5]),
        campaign("BLACKWEEK", "Black Week", "NORMAL", 5, 12, apparel[120:160:5], released=False),
    ]


def _customers(tenant_id: str) -> list[dict[str, Any]]:
    """A dozen customers; ids come from the tenant's (customer ids are unique across tenants)."""
    customers = []
    for n, (first, last) in enumerate(zip(_FIRST_NAMES, _LAST_NAMES, strict=True), start=1):
        customer: dict[str, Any] = {
            "id": str(uuid.uuid5(uuid.UUID(tenant_id), f"demo customer {n}")), "firstName": first, "lastName": last,
            "email": f"{first.lower()}.{last.lower()}@example.no", "phone": f"+479{n:07d}"}
        if n % 2:
            customer["birthDate"] = f"{1960 + 3 * n}-0{1 + n % 9}-{10 + n}"
            customer["deliveryAddress"] = {"name": f"{first} {last}", "street": f"Storgata {n}", "postCode": "0155",
                                           "city": "Oslo", "countryIsoCode": "NO"}
        if n % 3 != 0:  # two in three are loyalty members
            customer["loyaltyMemberships"] = [{"loyaltyProgramCode": "FJORDVENN", "memberNumber": f"FV{n:06d}",
                                               "memberSince": f"{2015 + n % 10}-03-01"}]
        customers.append(customer)
    return customers
