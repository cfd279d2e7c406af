"""Both sketches on real wrist-IMU features: seglearn's watch data, one client per subject.

The rank error is measured against the exact weighted quantiles of the pooled data (what a
centralised trainer would use), with Hessian-like weights from a softmax over 7 classes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from shared.sketches import (
    DDSketch,
    Standardization,
    ddsketch_edges,
    exact_edges,
    merge_edges_columns,
    rank_error,
    summarize_columns,
    weighted_moments,
)
from tests.shared.sketches.sketch_strategies import SLACK

#: ax, ay, wz (raw axes; ay is offset by gravity) and |a| (≈ 1.15 g ± 0.45: an offset feature).
COLUMNS = ["ax", "ay", "wz", "|a|"]


@pytest.fixture(scope="module")
def clients() -> list[tuple[np.ndarray, np.ndarray]]:
    spec = importlib.util.find_spec("seglearn")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("seglearn is not installed (pip install --no-deps seglearn: it only provides the data file)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "watch_dataset.npy"
    data = np.load(path, allow_pickle=True).item()
    subjects = np.asarray(data["subject"])
    rng = np.random.default_rng(2024)
    out = []
    for subject in np.unique(subjects):
        X = np.concatenate([x for x, s in zip(data["X"], subjects) if s == subject])
        X = np.column_stack([X[:, 0], X[:, 1], X[:, 5], np.linalg.norm(X[:, :3], axis=1)])
        logits = rng.normal(0.0, 3.0, size=(X.shape[0], 7))  # a mid-training softmax
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        out.append((X, (p * (1 - p)).sum(axis=1)))  # per-sample Hessian sum, spans ~1e-6 .. 0.85
    assert len(out) == 10
    return out


def _pooled(clients):
    return np.concatenate([c[0] for c in clients]), np.concatenate([c[1] for c in clients])


@pytest.mark.parametrize("n_bins", [64, 256])
def test_mixture_rank_error_is_small_on_real_features(clients, n_bins: int) -> None:
    X, h = _pooled(clients)
    for m in (n_bins, 4 * n_bins):
        edges = merge_edges_columns([summarize_columns(x, w, m) for x, w in clients], n_bins)
        alphas = [rank_error(edges[j], X[:, j], h, n_bins) for j in range(len(COLUMNS))]
        assert max(alphas) <= 1 / m + SLACK  # Theorem 3.1
        assert max(alphas) <= 0.6 / m  # measured ~0.54/M at M = B and ~0.24/M at M = 4B
        assert all(e.size >= n_bins - 2 for e in edges)  # continuous features keep their bins
    for j in range(len(COLUMNS)):
        assert rank_error(exact_edges(X[:, j], h, n_bins), X[:, j], h, n_bins) <= SLACK


def test_ddsketch_needs_standardisation_on_the_offset_feature(clients) -> None:
    X, h = _pooled(clients)
    n_bins, mag = 64, COLUMNS.index("|a|")
    raw = [DDSketch.from_columns(x, w, 0.01) for x, w in clients]
    moments = sum(weighted_moments(x, w) for x, w in clients)
    shared = [Standardization.from_moments(moments[:, j]) for j in range(len(COLUMNS))]
    standardised = [DDSketch.from_columns(x, w, 0.01, shared) for x, w in clients]

    def alpha(sketches, j):
        return rank_error(ddsketch_edges([c[j] for c in sketches], n_bins), X[:, j], h, n_bins)

    assert alpha(raw, mag) > 1 / n_bins  # |a| ≈ 1: buckets of ±1 % hold more than a whole bin
    assert alpha(standardised, mag) < 0.5 / n_bins
    assert max(alpha(standardised, j) for j in range(len(COLUMNS))) < 0.5 / n_bins
