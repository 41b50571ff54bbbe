"""How stores look to callers, shared by the scopes that list them."""

from typing import Any

import sqlalchemy as sa


def status_of(released: bool) -> str:
    """The status field of stores and products."""
    return "RELEASED" if released else "NOT_RELEASED"


def retail_store_json(row: sa.Row) -> dict[str, Any]:
    return {
        "id": row.id, "number": row.number, "name": row.name, "status": status_of(row.released),
        "visitAddress": {"street": row.street, "postCode": row.post_code, "city": row.city,
                         "countryIsoCode": row.country_iso_code},
    }


def ecom_store_json(row: sa.Row) -> dict[str, Any]:
    return {"id": row.id, "number": row.number, "name": row.name, "status": status_of(row.released)}
