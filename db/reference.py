"""The back-office reference data: reads of stores, programs and the reference lists of GET /product_schema/*,
and releasing a retail store."""

import sqlalchemy as sa

from db.outbox import retail_store_events
from db.schema import (
    companies,
    ecom_stores,
    loyalty_program_stores,
    loyalty_programs,
    reference_entries,
    retail_stores,
)

_RETAIL_STORE_COLUMNS = (retail_stores.c.id, retail_stores.c.number, retail_stores.c.name,
                         retail_stores.c.released, retail_stores.c.street, retail_stores.c.post_code,
                         retail_stores.c.city, retail_stores.c.country_iso_code)


def _rows(engine: sa.Engine, query: sa.Select) -> list[sa.Row]:
    with engine.connect() as conn:
        return list(conn.execute(query))


def list_retail_stores(engine: sa.Engine, tenant_id: str) -> list[sa.Row]:
    return _rows(engine, sa.select(*_RETAIL_STORE_COLUMNS)
                 .where(retail_stores.c.tenant_id == tenant_id).order_by(retail_stores.c.number))


def list_ecom_stores(engine: sa.Engine, tenant_id: str) -> list[sa.Row]:
    return _rows(engine, sa.select(ecom_stores.c.id, ecom_stores.c.number, ecom_stores.c.name,
                                   ecom_stores.c.released)
                 .where(ecom_stores.c.tenant_id == tenant_id).order_by(ecom_stores.c.number))


def list_loyalty_programs(engine: sa.Engine, tenant_id: str) -> list[sa.Row]:
    return _rows(engine, sa.select(loyalty_programs.c.id, loyalty_programs.c.code, loyalty_programs.c.name)
                 .where(loyalty_programs.c.tenant_id == tenant_id).order_by(loyalty_programs.c.code))


def company_retail_stores(engine: sa.Engine, tenant_id: str, ecom_store_id: str) -> list[sa.Row]:
    """The click and collect network of an eCom store: the retail stores of its company."""
    company = (sa.select(ecom_stores.c.company_id)
               .where(ecom_stores.c.tenant_id == tenant_id, ecom_stores.c.id == ecom_store_id)
               .scalar_subquery())
    return _rows(engine, sa.select(*_RETAIL_STORE_COLUMNS)
                 .where(retail_stores.c.tenant_id == tenant_id, retail_stores.c.company_id == company)
                 .order_by(retail_stores.c.number))


def program_retail_stores(engine: sa.Engine, tenant_id: str, program_id: str) -> list[sa.Row]:
    members = loyalty_program_stores
    return _rows(engine, sa.select(*_RETAIL_STORE_COLUMNS)
                 .join(members, sa.and_(members.c.retail_store_id == retail_stores.c.id,
                                        members.c.tenant_id == tenant_id))
                 .where(retail_stores.c.tenant_id == tenant_id, members.c.loyalty_program_id == program_id)
                 .order_by(retail_stores.c.number))


def loyalty_program(engine: sa.Engine, tenant_id: str, program_id: str) -> sa.Row | None:
    """The program with its currency and how many retail stores it covers.

    The currency is that of the program's company; a program loaded before companies were named on programs
    counts in the currency of the tenant's first company by number.
    """
    first_company = (sa.select(companies.c.currency_iso_code).where(companies.c.tenant_id == tenant_id)
                     .order_by(companies.c.number).limit(1).scalar_subquery())
    own_company = (sa.select(companies.c.currency_iso_code)
                   .where(companies.c.tenant_id == tenant_id, companies.c.id == loyalty_programs.c.company_id)
                   .scalar_subquery())
    store_count = (sa.select(sa.func.count()).select_from(loyalty_program_stores)
                   .where(loyalty_program_stores.c.tenant_id == tenant_id,
                          loyalty_program_stores.c.loyalty_program_id == loyalty_programs.c.id)
                   .scalar_subquery())
    query = (sa.select(loyalty_programs.c.id, loyalty_programs.c.code, loyalty_programs.c.name,
                       sa.func.coalesce(own_company, first_company).label("currency_iso_code"),
                       store_count.label("retail_store_count"))
             .where(loyalty_programs.c.tenant_id == tenant_id, loyalty_programs.c.id == program_id))
    with engine.connect() as conn:
        return conn.execute(query).first()


def reference_list(engine: sa.Engine, tenant_id: str, list_name: str) -> list[sa.Row]:
    """The entries of one reference list (list_name: the segment of GET /product_schema/{list}), by code."""
    return _rows(engine, sa.select(reference_entries)
                 .where(reference_entries.c.tenant_id == tenant_id, reference_entries.c.list_name == list_name)
                 .order_by(reference_entries.c.code))


def release_retail_store(engine: sa.Engine, tenant_id: str, number: str) -> tuple[sa.Row, bool] | None:
    """Mark the store released, with its RetailStoreUpdated events; returns (store, whether it changed), or None
    for an unknown number. Releasing a released store writes nothing."""
    with engine.begin() as conn:
        changed = conn.execute(retail_stores.update().where(
            retail_stores.c.tenant_id == tenant_id, retail_stores.c.number == number,
            retail_stores.c.released.is_(False)).values(released=True)).rowcount == 1
        row = conn.execute(sa.select(*_RETAIL_STORE_COLUMNS).where(
            retail_stores.c.tenant_id == tenant_id, retail_stores.c.number == number)).first()
        if changed:
            retail_store_events(conn, tenant_id, [row.id])
    return (row, changed) if row else None
