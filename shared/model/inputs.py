"""How a model wants its inputs: one rule for training-time evaluation and on-device inference.

* Boosted models (FedSCS-XGB) were trained on features rounded to float32 (as XGBoost rounds its
  input, and as their bin edges and thresholds are float32): round before predicting, or a
  value within float32 rounding of a threshold could route differently than in training.
* Forests trained with client-indicator splits take one extra input after the features: the
  client index H, looked up in the model's ``metadata["clients"]`` (comma-separated ids). A
  client the model has never seen gets NaN (the splits' default direction).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .ensemble import TreeEnsemble

__all__ = ["client_index", "model_inputs", "uses_client_index"]

CLIENT_FEATURE = "client"


def uses_client_index(model: TreeEnsemble) -> bool:
    return bool(model.metadata.get("client_splits")) and model.feature_names[-1:] == (CLIENT_FEATURE,)


def client_index(model: TreeEnsemble, client_id: str) -> int:
    """The client's index in the model's training fleet, -1 if it was not part of it."""
    clients = str(model.metadata.get("clients", "")).split(",")
    return clients.index(client_id) if client_id in clients else -1


def model_inputs(model: TreeEnsemble, X: ArrayLike, index: int = -1) -> np.ndarray:
    """``X`` (n, d) as the model's input matrix (float64): rounded to float32 for boosted
    models, with the client column appended (``index``; -1 -> NaN) when the model uses it."""
    data = np.asarray(X, dtype=np.float64)
    if data.ndim == 1:
        data = data[None, :]
    if model.kind == "boosted":
        data = data.astype(np.float32).astype(np.float64)
    if uses_client_index(model):
        data = np.column_stack([data, np.full(data.shape[0], np.nan if index < 0 else float(index))])
    return data
