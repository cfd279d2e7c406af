"""How a model wants its inputs: one rule for training-time evaluation and on-device inference.

* Every model compares features rounded to float32 (the engines' split rule,
  ``shared.model.inference``): ``model_inputs`` rounds them, as training did, so the matrix it
  returns routes alike in the numpy engine, TFLite and XGBoost.
* Forests trained with client-indicator splits take one extra input after the features: the
  client index H, looked up in the model's ``metadata["clients"]`` (comma-separated ids). A
  client the model has never seen gets NaN (the splits' default direction).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .ensemble import TreeEnsemble
from .inference import as_float32_values

__all__ = ["client_index", "model_inputs", "uses_client_index"]

CLIENT_FEATURE = "client"


def uses_client_index(model: TreeEnsemble) -> bool:
    return bool(model.metadata.get("client_splits")) and model.feature_names[-1:] == (CLIENT_FEATURE,)


def client_index(model: TreeEnsemble, client_id: str) -> int:
    """The client's index in the model's training fleet, -1 if it was not part of it."""
    clients = str(model.metadata.get("clients", "")).split(",")
    return clients.index(client_id) if client_id in clients else -1


def model_inputs(model: TreeEnsemble, X: ArrayLike, index: int = -1) -> np.ndarray:
    """``X`` (n, d) as the model's input matrix (float64): rounded to float32 (the split rule),
    with the client column appended (``index``; -1 -> NaN) when the model uses it."""
    data = as_float32_values(X)
    if data.ndim == 1:
        data = data[None, :]
    if uses_client_index(model):
        data = np.column_stack([data, np.full(data.shape[0], np.nan if index < 0 else float(index))])
    return data
