"""Signing keys sealed at rest: a column for the sealed private JWK; the plain one becomes legacy

A migration has no secret key, so rows from before stay in plain text here; the first process that uses the
keys with the secret key (`pia serve`, `pia demo`, `pia admin rotate-key`, `pia admin rotate-secret-key`) seals
them and clears the plain column (db/signing_keys.py prepare_signing_keys).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 09:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("signing_keys", sa.Column("sealed_private_jwk", sa.Text(), nullable=True))
    op.alter_column("signing_keys", "private_jwk", existing_type=sa.Text(), nullable=True)


def downgrade() -> None:
    sealed_only = op.get_bind().execute(sa.text(
        "SELECT count(*) FROM signing_keys WHERE private_jwk IS NULL")).scalar_one()
    if sealed_only:
        # Revision 0003 wants plain text, and unsealing needs the secret key a migration does not have.
        raise RuntimeError(f"{sealed_only} signing key(s) exist only sealed; revision 0003 cannot hold them")
    op.drop_column("signing_keys", "sealed_private_jwk")
    op.alter_column("signing_keys", "private_jwk", existing_type=sa.Text(), nullable=False)
