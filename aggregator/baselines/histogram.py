"""Federated Histogram (Kalloori & Klingler 2022): FedForest's protocol with fixed-width bins on
the fleet's global min/max instead of quantile candidates, and no client-indicator splits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ..algorithms.fedforest import FedForest

__all__ = ["FederatedHistogram"]


@dataclass(frozen=True)
class FederatedHistogram(FedForest):
    """``n_bins`` equal-width bins per feature between the pooled minimum and maximum (from the
    clients' ``DataSummary``, which reveals each client's minimum and maximum: the paper's
    protocol, a research baseline); split evaluation from exact left summaries as in FedForest."""

    candidates: Literal["quantiles", "uniform"] = "uniform"
    protocol: Literal["histogram", "sketches"] = "sketches"

    name: ClassVar[str] = "federated_histogram"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.candidates != "uniform" or self.client_splits:
            raise ValueError("FederatedHistogram uses fixed-width candidates and no client splits")
