"""Baselines of the FedForest paper, runnable through the same API as the algorithms
(``aggregator.simulate(LocalLearning(...), clients)``); centralized scikit-learn RF is the
benchmarks' reference and lives there (dev dependency)."""

from .histogram import FederatedHistogram
from .local import LocalEnsembling, LocalLearning

__all__ = ["FederatedHistogram", "LocalEnsembling", "LocalLearning"]
