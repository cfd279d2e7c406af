"""The cloud side: training jobs driving the algorithms over the fleet in rounds, model registry, API.

``aggregator.simulate(algorithm, clients, seed=...)`` runs an algorithm in one process;
``aggregator.Simulation(clients)`` keeps the simulated fleet (several jobs, dropouts, and
``server_view()``: everything the server received); ``aggregator.algorithms`` holds the
algorithm configurations (``FedSCSXGB``, ...); ``FedSCSXGBClassifier`` and the other estimators
wrap them for users of xgboost and scikit-learn (``fit(clients)``, ``predict_proba``, ...).
"""

from .estimators import FedForestClassifier, FedForestRegressor, FedSCSXGBClassifier, FedSCSXGBRegressor
from .simulate import Simulation, simulate

__all__ = ["FedForestClassifier", "FedForestRegressor", "FedSCSXGBClassifier", "FedSCSXGBRegressor",
           "Simulation", "simulate"]
