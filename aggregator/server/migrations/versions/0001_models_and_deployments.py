"""The registry as ``wheelfed train --registry`` wrote it before the server: models and deployments.

A file written by that code has both tables and no ``alembic_version``; this revision then
creates nothing and only stamps it, so the next revisions upgrade it in place.
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    if "models" not in existing:
        op.create_table(
            "models",
            sa.Column("model_id", sa.Text, nullable=False),
            sa.Column("version", sa.Integer, nullable=False),
            sa.Column("algorithm", sa.Text, nullable=False),
            sa.Column("feature_set_version", sa.Text, nullable=False),
            sa.Column("kind", sa.Text, nullable=False),
            sa.Column("target", sa.Text, nullable=False, server_default=""),
            sa.Column("n_trees", sa.Integer, nullable=False),
            sa.Column("classes", sa.Text, nullable=False),
            sa.Column("metrics", sa.Text, nullable=False, server_default="{}"),
            sa.Column("model", sa.LargeBinary, nullable=False),
            sa.Column("created", sa.Float, nullable=False),
            sa.PrimaryKeyConstraint("model_id", "version"),
        )
    if "deployments" not in existing:
        op.create_table(
            "deployments",
            sa.Column("model_id", sa.Text, nullable=False),
            sa.Column("version", sa.Integer, nullable=False),
            sa.Column("client", sa.Text, nullable=False),
            sa.Column("state", sa.Text, nullable=False),
            sa.Column("detail", sa.Text, nullable=False, server_default=""),
            sa.Column("updated", sa.Float, nullable=False),
            sa.PrimaryKeyConstraint("model_id", "version", "client"),
        )


def downgrade() -> None:
    op.drop_table("deployments")
    op.drop_table("models")
