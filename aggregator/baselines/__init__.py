"""Baselines of the FedForest paper, runnable through the same API as the algorithms
(``aggregator.simulate(LocalLearning(...), clients)``); centralized scikit-learn RF is the
benchmarks' reference and lives there (dev dependency)."""

from .histogram import FederatedHistogram
from .local import LocalEnsembling, LocalLearning
from .pax import PAX as PAX  # the FedSCS-XGB paper's baseline (issue 14)
from .dp_tree import DPTree as DPTree  # the FedGA-Tree paper's IBM tree baseline (issue 17)

__all__ = ["FederatedHistogram", "LocalEnsembling", "LocalLearning"]
