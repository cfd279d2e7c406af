"""Client halves of the training algorithms: what a gateway computes from its own data when the
aggregator asks. Each is named after its algorithm, like its messages and its server half.

``CLIENT_HALVES`` is the plugin list a ``Participant`` serves: an algorithm's client half is
registered by one line here, next to its import. A client half is a class with a ``capability``
name, a constructor taking ``(snapshots, secure)`` -- the participant's per-job data snapshots and
its secure-aggregation keys -- and ``register(dispatcher)`` for its request types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .fedforest import FedForestClient
from .fedga_tree import FedGATreeClient
from .fedscs_xgb import FedSCSXGBClient
from .vertical_forest import VerticalForestClient

if TYPE_CHECKING:
    from ..dispatcher import Dispatcher
    from ..secure_aggregation import SecureAggregationClient
    from ..training_data import JobSnapshots


class ClientHalf(Protocol):
    """What ``Participant`` needs of an algorithm's client half."""

    capability: str

    def __init__(self, data: JobSnapshots, secure: SecureAggregationClient) -> None: ...

    def register(self, dispatcher: Dispatcher) -> None: ...


CLIENT_HALVES: tuple[type[ClientHalf], ...] = (
    FedSCSXGBClient,
    FedForestClient,
    FedGATreeClient,
    VerticalForestClient,
)

__all__ = [
    "CLIENT_HALVES",
    "ClientHalf",
    "FedForestClient",
    "FedGATreeClient",
    "FedSCSXGBClient",
    "VerticalForestClient",
]
