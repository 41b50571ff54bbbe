"""A small back-office document covering the whole e-commerce model, for the loader and outbox tests.

Two companies, each with an eCom store: E1 (company C1) sells P1's SKUs from assortment WEB, E2 (company C2)
sells P2's SKU from assortment OTHER. DP1 is a SKU without a product (demand planning only).
"""

import uuid
from typing import Any

VALID_GTIN_13, VALID_GTIN_8, VALID_GTIN_12 = "4006381333931", "96385074", "036000291452"


def customer_id(tenant_id: str, number: int) -> str:
    """Customer ids are unique across tenants; the document's are made from the tenant's."""
    return str(uuid.uuid5(uuid.UUID(tenant_id), str(number)))


def catalogue_document(tenant_id: str) -> dict[str, Any]:
    customer_1, customer_2 = customer_id(tenant_id, 1), customer_id(tenant_id, 2)
    return {
        "referenceLists": {
            "brands": [{"code": "NORDLYS", "name": "Nordlys"}],
            "productCategories": [{"code": "KNIT", "name": "Strikk"}],
            "productColors": [{"code": "NAVY", "name": "Marine", "colorCode": "#1F3A5F"},
                              {"code": "RED", "name": "Rød", "colorCode": "#B22222"}],
            "sizes": [{"code": "S", "name": "Small", "sortOrder": 1}, {"code": "M", "name": "Medium", "sortOrder": 2}],
            "unitOfMeasures": [{"code": "PCS", "name": "Stykk"}],
            "dynamicAttributes": [
                {"code": "MATERIAL", "name": "Materiale", "valueType": "OPTION",
                 "options": [{"code": "WOOL", "name": "Ull", "sortOrder": 1},
                             {"code": "COTTON", "name": "Bomull", "sortOrder": 2}]},
                {"code": "WASH", "name": "Vasketemperatur", "valueType": "NUMBER"},
            ],
        },
        "vatRates": [{"code": "STD", "rate": "25"}, {"code": "LOW", "rate": "15"}],
        "priceLists": [
            {"code": "BASE", "name": "Grunnpris",
             "prices": [{"skuNumber": "P1-S", "price": "499"}, {"skuNumber": "P1-M", "price": "499"},
                        {"skuNumber": "P2-S", "price": "299.50"}]},
            {"code": "WEB", "name": "Nettpris", "prices": [{"skuNumber": "P1-S", "price": "449"}]},
        ],
        "companies": [
            {"number": "C1", "name": "Nordlys Mote AS", "currencyIsoCode": "NOK", "basePriceListCode": "BASE",
             "freightVatRate": "25"},
            {"number": "C2", "name": "Nordlys Hjem AB", "currencyIsoCode": "SEK", "basePriceListCode": "BASE"},
        ],
        "skus": [{"number": "DP1", "name": "Kun for planlegging"}],
        "products": [
            {"number": "P1", "name": "Ullgenser", "description": "Varm genser", "released": True,
             "brandCode": "NORDLYS", "productCategoryCode": "KNIT",
             "images": [{"url": "https://img.example/p1-a.jpg", "sortOrder": 1, "altText": "Forfra"},
                        {"url": "https://img.example/p1-b.jpg", "sortOrder": 2}],
             "dynamicAttributes": [{"code": "MATERIAL", "optionCodes": ["WOOL"]}, {"code": "WASH", "value": "30"}],
             "skus": [
                 {"number": "P1-S", "name": "Ullgenser S", "gtin": VALID_GTIN_13, "colorCode": "NAVY",
                  "sizeCode": "S", "unitOfMeasureCode": "PCS", "vatRateCode": "STD", "published": True},
                 {"number": "P1-M", "name": "Ullgenser M", "colorCode": "NAVY", "sizeCode": "M",
                  "vatRateCode": "STD", "published": False},
             ]},
            {"number": "P2", "name": "Pute", "released": True,
             "skus": [{"number": "P2-S", "name": "Pute liten", "gtin": VALID_GTIN_8, "vatRateCode": "LOW",
                       "published": True}]},
        ],
        "assortments": [
            {"code": "WEB", "kind": "BASE", "name": "Nett",
             "lines": [{"skuNumber": "P1-S", "replenishmentType": "AUTO"},
                       {"skuNumber": "P1-M", "replenishmentType": "AUTO"}]},
            {"code": "OTHER", "kind": "BASE", "name": "Hjem",
             "lines": [{"skuNumber": "P2-S", "replenishmentType": "AUTO"}]},
        ],
        "retailStores": [
            {"number": "R1", "name": "Nordlys Tromsø", "companyNumber": "C1", "released": True,
             "visitAddress": {"street": "Storgata 1", "postCode": "9008", "city": "Tromsø", "countryIsoCode": "NO"}},
            {"number": "R2", "name": "Nordlys Kiruna", "companyNumber": "C2", "released": True},
            {"number": "R3", "name": "Nordlys Luleå", "companyNumber": "C2", "released": False},
        ],
        "warehouses": [{"number": "W1", "name": "Sentrallager", "companyNumber": "C1"},
                       {"number": "W2", "name": "Reservelager", "companyNumber": "C1"}],
        "ecomStores": [
            {"number": "E1", "name": "nordlys.no", "companyNumber": "C1", "released": True,
             "baseAssortmentCode": "WEB", "priceListCode": "WEB", "servingWarehouseNumbers": ["W1", "W2"],
             "leadTimeDays": 2, "paymentCaptureEnabled": True, "defaultCustomerId": customer_1},
            {"number": "E2", "name": "nordlys.se", "companyNumber": "C2", "released": True,
             "baseAssortmentCode": "OTHER"},
        ],
        "loyaltyPrograms": [{"code": "LP", "name": "Nordlys Venn", "companyNumber": "C1",
                             "retailStoreNumbers": ["R1"]}],
        "stock": [
            {"locationNumber": "W1", "skuNumber": "P1-S", "onHand": "10", "reserved": "2"},
            {"locationNumber": "R1", "skuNumber": "P1-M", "onHand": "3", "reserved": "0"},
            {"locationNumber": "W2", "skuNumber": "P2-S", "onHand": "0", "reserved": "0"},
            {"locationNumber": "W2", "skuNumber": "DP1", "onHand": "7", "reserved": "0"},
        ],
        "campaigns": [
            {"code": "CAMP1", "name": "Medlemsuke", "campaignType": "NORMAL", "validFrom": "2026-11-01",
             "validTo": "2026-12-31", "released": True, "companyNumber": "C1", "loyaltyProgramCode": "LP",
             "skus": [{"skuNumber": "P1-S", "campaignPrice": "399", "loyaltyProgramMembershipRequired": True}]},
            {"code": "CAMP2", "name": "Ta 3 betal for 2", "campaignType": "THREE_FOR_TWO",
             "validFrom": "2026-11-01", "validTo": "2026-11-30", "released": True, "companyNumber": "C2",
             "skus": [{"skuNumber": "P2-S", "campaignPrice": "299.50", "loyaltyProgramMembershipRequired": False}]},
        ],
        "customers": [
            {"id": customer_1, "firstName": "Kari", "lastName": "Nordmann", "email": "Kari+web@Example.NO",
             "phone": "+4791234567", "birthDate": "1980-02-29",
             "deliveryAddress": {"name": "Kari Nordmann", "street": "Storgata 2", "postCode": "9008",
                                 "city": "Tromsø", "countryIsoCode": "NO"},
             "loyaltyMemberships": [{"loyaltyProgramCode": "LP", "memberNumber": "M-1", "memberSince": "2024-01-15"}]},
            {"id": customer_2, "firstName": "Ola", "lastName": "Nordmann", "phone": "+46701234567"},
        ],
    }
