"""The cloud side: training jobs driving the algorithms over the fleet in rounds, model registry, API.

``aggregator.simulate(algorithm, clients, seed=...)`` runs an algorithm in one process;
``aggregator.Simulation(clients)`` keeps the simulated fleet (several jobs, dropouts, and
``server_view()``: everything the server received); ``aggregator.algorithms`` holds the
algorithm configurations (``FedSCSXGB``, ...); ``FedSCSXGBClassifier`` and the other estimators
wrap them for users of xgboost and scikit-learn (``fit(clients)``, ``predict_proba``, ...).

The estimators and the simulation sit above both sides (they run gateways in-process), so this
package loads them only when one of those names is first asked for: ``import aggregator.registry``
loads no gateway code.
"""

import importlib
import sys
import types

_LAZY = {
    "FedForestClassifier": "estimators",
    "FedForestRegressor": "estimators",
    "FedSCSXGBClassifier": "estimators",
    "FedSCSXGBRegressor": "estimators",
    "Simulation": "simulate",
    "simulate": "simulate",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """``aggregator.simulate`` is the function, also after ``import aggregator.simulate``.

    Loading a submodule binds it on its package under its own name; for ``simulate`` that would
    hide the function of the same name, so the function is bound instead.
    """

    def __setattr__(self, name: str, value: object) -> None:
        if name == "simulate" and isinstance(value, types.ModuleType):
            value = value.simulate
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
