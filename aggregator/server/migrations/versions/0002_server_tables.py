"""The server's tables: gateways, jobs and their rounds, schedules, promotion decisions; models
gain the configuration they were trained with, their parent version and the job that made them."""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("models", sa.Column("config", sa.Text, nullable=False, server_default="{}"))
    op.add_column("models", sa.Column("parent", sa.Text, nullable=False, server_default=""))
    op.add_column("models", sa.Column("job_id", sa.Text, nullable=False, server_default=""))
    op.create_table(
        "gateways",
        sa.Column("gateway", sa.Text, primary_key=True),
        sa.Column("online", sa.Boolean, nullable=False),
        sa.Column("seen", sa.Float, nullable=False),
        sa.Column("status", sa.Text, nullable=False),  # the folded GatewayRow as JSON
        sa.Column("updated", sa.Float, nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.Text, primary_key=True),
        sa.Column("algorithm", sa.Text, nullable=False),
        sa.Column("config", sa.Text, nullable=False),
        sa.Column("rules", sa.Text, nullable=False),
        sa.Column("model_id", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("total", sa.Integer, nullable=False, server_default="0"),
        sa.Column("completed", sa.Integer, nullable=False, server_default="0"),
        sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
        sa.Column("participants", sa.Text, nullable=False, server_default="[]"),
        sa.Column("feature_set", sa.Text, nullable=False, server_default=""),
        sa.Column("init_model", sa.Text, nullable=False, server_default=""),
        sa.Column("schedule_id", sa.Text, nullable=False, server_default=""),
        sa.Column("result", sa.Text, nullable=False, server_default=""),
        sa.Column("evaluation", sa.Text, nullable=False, server_default="{}"),
        sa.Column("error", sa.Text, nullable=False, server_default=""),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("updated", sa.Float, nullable=False),
    )
    op.create_table(
        "job_rounds",
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("selected", sa.Integer, nullable=False),
        sa.Column("answered", sa.Integer, nullable=False),
        sa.Column("metrics", sa.Text, nullable=False),
        sa.Column("elapsed_s", sa.Float, nullable=False),
        sa.Column("checkpoint", sa.LargeBinary, nullable=True),  # the model after this step (CBOR)
        sa.Column("created", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("job_id", "step"),
    )
    op.create_table(
        "schedules",
        sa.Column("schedule_id", sa.Text, primary_key=True),
        sa.Column("model_id", sa.Text, nullable=False),
        sa.Column("algorithm", sa.Text, nullable=False),
        sa.Column("config", sa.Text, nullable=False),
        sa.Column("every_s", sa.Float, nullable=True),
        sa.Column("cron", sa.Text, nullable=False, server_default=""),
        sa.Column("min_new_windows", sa.Integer, nullable=True),
        sa.Column("threshold", sa.Float, nullable=False),
        sa.Column("canary_share", sa.Float, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("last_run", sa.Float, nullable=False),
        sa.Column("last_windows", sa.Integer, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
    )
    op.create_table(
        "promotions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("model_id", sa.Text, nullable=False),
        sa.Column("candidate", sa.Integer, nullable=False),
        sa.Column("baseline", sa.Integer, nullable=True),
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("candidate_value", sa.Float, nullable=True),
        sa.Column("baseline_value", sa.Float, nullable=True),
        sa.Column("threshold", sa.Float, nullable=False),
        sa.Column("decision", sa.Text, nullable=False),
        sa.Column("detail", sa.Text, nullable=False, server_default=""),
        sa.Column("created", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for table in ("promotions", "schedules", "job_rounds", "jobs", "gateways"):
        op.drop_table(table)
    for column in ("job_id", "parent", "config"):
        op.drop_column("models", column)
