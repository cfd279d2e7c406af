"""Message bodies, one module per algorithm; importing this package registers them all."""

from . import deployment, evaluation, fedforest, fedscs_xgb
from . import fedga_tree  # noqa: F401  (registers FedGA-Tree's messages)
from . import vertical_forest  # noqa: F401  (registers the vertical Federated Forest's messages)
from .generic import (
    Ack,
    DataSummary,
    DataSummaryRequest,
    Describe,
    ErrorReply,
    Hello,
    ModelAnnouncement,
    Ping,
    Pong,
    Status,
)

__all__ = [
    "deployment",
    "evaluation",
    "fedforest",
    "fedscs_xgb",
    "Ack",
    "DataSummary",
    "DataSummaryRequest",
    "Describe",
    "ErrorReply",
    "Hello",
    "ModelAnnouncement",
    "Ping",
    "Pong",
    "Status",
]
