"""The cloud side: training jobs driving the algorithms over the fleet in rounds, model registry, API.

``aggregator.simulate(algorithm, clients, seed=...)`` runs an algorithm in one process;
``aggregator.Simulation(clients)`` keeps the simulated fleet (several jobs, dropouts, and
``server_view()``: everything the server received); ``aggregator.algorithms`` holds the
algorithm configurations (``FedSCSXGB``, ...).
"""

from .estimators import FedForestClassifier, FedForestRegressor, FedSCSXGBClassifier, FedSCSXGBRegressor
from .simulate import Simulation, simulate

__all__ = ["Simulation", "simulate"]
