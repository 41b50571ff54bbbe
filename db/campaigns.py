"""Campaigns as one eCom store sees them: released campaigns of its company that have not ended, each with the
SKUs of the store's assortment it covers (a campaign covering none is not the store's business)."""

from dataclasses import dataclass
from datetime import date

import sqlalchemy as sa

from db.catalogue import visible_skus
from db.schema import campaign_skus, campaigns, companies, ecom_stores, loyalty_programs, skus


@dataclass(frozen=True)
class Campaign:
    row: sa.Row  # the campaign with currency_iso_code and loyalty_program_name
    skus: list[sa.Row]  # sku_id, campaign_price, loyalty_membership_required; by SKU number


def current_campaigns(engine: sa.Engine, tenant_id: str, ecom_store_id: str, today: date) -> list[Campaign]:
    """By validFrom, then code; a campaign ending today is still current."""
    company = (sa.select(ecom_stores.c.company_id)
               .where(ecom_stores.c.tenant_id == tenant_id, ecom_stores.c.id == ecom_store_id).scalar_subquery())
    visible = visible_skus(tenant_id, ecom_store_id).with_only_columns(skus.c.id, skus.c.number).subquery("visible")
    # One row per campaign SKU in the assortment; the campaign's columns come along, so one round trip does.
    query = (
        sa.select(campaigns, companies.c.currency_iso_code, loyalty_programs.c.name.label("loyalty_program_name"),
                  campaign_skus.c.sku_id, campaign_skus.c.campaign_price,
                  campaign_skus.c.loyalty_membership_required)
        .join(companies, sa.and_(companies.c.tenant_id == tenant_id, companies.c.id == campaigns.c.company_id))
        .join(campaign_skus, sa.and_(campaign_skus.c.tenant_id == tenant_id,
                                     campaign_skus.c.campaign_id == campaigns.c.id))
        .join(visible, visible.c.id == campaign_skus.c.sku_id)
        .outerjoin(loyalty_programs, sa.and_(loyalty_programs.c.tenant_id == tenant_id,
                                             loyalty_programs.c.id == campaigns.c.loyalty_program_id))
        .where(campaigns.c.tenant_id == tenant_id, campaigns.c.company_id == company, campaigns.c.released,
               campaigns.c.valid_to >= today)
        .order_by(campaigns.c.valid_from, campaigns.c.code, visible.c.number))
    found: dict[str, Campaign] = {}
    with engine.connect() as conn:
        for row in conn.execute(query):
            found.setdefault(row.id, Campaign(row, [])).skus.append(row)
    return list(found.values())
