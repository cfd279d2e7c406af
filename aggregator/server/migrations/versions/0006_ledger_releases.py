"""What a running private attempt has released, written ahead of each release
(``privacy_ledger.released_rho``, ``released_xi``, ``releases``); NULL in the entries of a
server before it, which are settled with their plan.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("privacy_ledger", sa.Column("released_rho", sa.Float, nullable=True))
    op.add_column("privacy_ledger", sa.Column("released_xi", sa.Float, nullable=True))
    op.add_column("privacy_ledger", sa.Column("releases", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("privacy_ledger") as batch:
        batch.drop_column("releases")
        batch.drop_column("released_xi")
        batch.drop_column("released_rho")
