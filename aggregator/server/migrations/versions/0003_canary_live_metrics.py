"""The canary's live check: a schedule says how many live predictions of the candidate each
canary gateway must report (``canary_windows``; 0: no live check), how long to wait for them
(``canary_observe_s``) and how far their mean confidence may drop (``canary_max_drop``); a
promotion keeps the live numbers it was decided on (``canary``, JSON)."""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("schedules", sa.Column("canary_windows", sa.Integer, nullable=False, server_default="0"))
    op.add_column("schedules", sa.Column("canary_observe_s", sa.Float, nullable=False, server_default="900"))
    op.add_column("schedules", sa.Column("canary_max_drop", sa.Float, nullable=False, server_default="0.05"))
    op.add_column("promotions", sa.Column("canary", sa.Text, nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("promotions") as batch:
        batch.drop_column("canary")
    with op.batch_alter_table("schedules") as batch:
        for column in ("canary_max_drop", "canary_observe_s", "canary_windows"):
            batch.drop_column(column)
