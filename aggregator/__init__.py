"""The cloud side: training jobs driving the algorithms over the fleet in rounds, model registry, API.

``aggregator.simulate(algorithm, clients, seed=...)`` runs an algorithm in one process;
``aggregator.algorithms`` holds the algorithm configurations (``FedSCSXGB``, ...).
"""

from .simulate import simulate

__all__ = ["simulate"]
