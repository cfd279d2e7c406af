"""The privacy ledger: per attempt of a private job, what it spent per window on which gateways
and which window start times (``aggregator.privacy.ledger``); a schedule keeps why its last due
run did not start (``note``, e.g. a job the privacy cap refused)."""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "privacy_ledger",
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("gateways", sa.Text, nullable=False),  # JSON list
        sa.Column("since_us", sa.BigInteger, nullable=True),  # NULL: from the beginning
        sa.Column("until_us", sa.BigInteger, nullable=True),  # NULL: the job is still running
        sa.Column("rho", sa.Float, nullable=False),
        sa.Column("xi", sa.Float, nullable=False),
        sa.Column("delta", sa.Float, nullable=False),
        sa.Column("epsilon", sa.Float, nullable=False),
        sa.Column("basis", sa.Text, nullable=False),  # "spent" (the model's metadata) | "planned"
        sa.Column("model", sa.Text, nullable=False, server_default=""),
        sa.Column("created", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("job_id", "attempt"),
    )
    op.add_column("schedules", sa.Column("note", sa.Text, nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("note")
    op.drop_table("privacy_ledger")
