"""Baselines of the papers, runnable through the same API as the algorithms
(``aggregator.simulate(LocalLearning(...), clients)``): ``LocalLearning``, ``LocalEnsembling`` and
``FederatedHistogram`` (FedForest paper), ``PAX`` (FedSCS-XGB paper), ``DPTree`` (FedGA-Tree
paper). Centralized scikit-learn RF and xgboost are the benchmarks' references and live there
(dev dependencies). What each reveals: PRIVACY.md, section 6."""

from .dp_tree import DPTree
from .histogram import FederatedHistogram
from .local import LocalEnsembling, LocalLearning
from .pax import PAX

__all__ = ["DPTree", "FederatedHistogram", "LocalEnsembling", "LocalLearning", "PAX"]
