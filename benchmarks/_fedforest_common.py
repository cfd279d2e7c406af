"""Helpers shared by the FedForest benchmarks (bench_fedforest_*.py): running the library's
methods through ``aggregator.simulate.Simulation``, scoring models on held-out rows (with the
client index H for models trained with ``client_splits=True``), the centralized scikit-learn
reference, and mean +- std formatting."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import _common  # noqa: F401  (puts the repo root on sys.path)
import numpy as np

T0 = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f} s] {message}", file=sys.stderr, flush=True)


@dataclass
class Block:
    """One client's rows: ``client_id`` (its ``ClientData`` id), train and held-out arrays."""

    client_id: str
    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def client_data(blocks: list[Block], *, with_test: bool = False) -> list:
    from edge_client.training_data import ClientData

    if with_test:
        return [ClientData(b.client_id, b.X, b.y, X_test=b.X_test, y_test=b.y_test) for b in blocks]
    return [ClientData(b.client_id, b.X, b.y) for b in blocks]


def model_output(model, blocks: list[Block], *, proba: bool = False) -> np.ndarray:
    """Predictions (or class probabilities) of ``model`` on every block's held-out rows,
    concatenated in block order. Models that use the client index get each block's own index
    (``shared.model.model_inputs`` with the client's position in ``metadata["clients"]``)."""
    from shared.model import client_index, model_inputs

    out = []
    for b in blocks:
        X = model_inputs(model, b.X_test, client_index(model, b.client_id))
        out.append(model.predict_proba(X) if proba else model.predict(X))
    return np.concatenate(out)


def pooled(blocks: list[Block]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X, y, h) train and (X, y, h) test pooled over the blocks; h = the block's position."""
    Xtr = np.vstack([b.X for b in blocks])
    ytr = np.concatenate([b.y for b in blocks])
    htr = np.concatenate([np.full(b.y.shape[0], k) for k, b in enumerate(blocks)])
    Xte = np.vstack([b.X_test for b in blocks])
    yte = np.concatenate([b.y_test for b in blocks])
    hte = np.concatenate([np.full(b.y_test.shape[0], k) for k, b in enumerate(blocks)])
    return Xtr, ytr, htr, Xte, yte, hte


def fisher_codes(h: np.ndarray, y: np.ndarray, K: int) -> np.ndarray:
    """Fisher encoding of the client index for a centralized regression forest: client k's code is
    the rank of its training-set target mean (the paper's 'Fisher encoding at the root node');
    clients without rows get the middle rank."""
    means = np.array([y[h == k].mean() if np.any(h == k) else np.nan for k in range(K)])
    means = np.where(np.isnan(means), np.nanmedian(means), means)
    return np.argsort(np.argsort(means, kind="stable"), kind="stable").astype(np.float64)


def mean_std(values: list[float], digits: int = 3) -> str:
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return "-"
    sd = float(a.std(ddof=1)) if a.size > 1 else 0.0
    return f"{a.mean():.{digits}f} ± {sd:.{digits}f}"
