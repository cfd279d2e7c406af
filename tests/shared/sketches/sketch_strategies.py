"""Hypothesis strategies and small helpers shared by the sketch tests."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

#: Round-off allowance on top of the theoretical bounds (documented in shared/sketches/mixture.py).
SLACK = 1e-9

WEIGHT_CHOICES = np.array([0.0, 0.01, 0.02, 0.5, 1.0, 3.0])
weights_elements = st.one_of(
    st.sampled_from(WEIGHT_CHOICES.tolist()),
    st.floats(0.0, 10.0, allow_nan=False, allow_infinity=False),
)


@dataclass
class Client:
    x: np.ndarray
    w: np.ndarray


@st.composite
def client_column(draw, shift: float = 0.0, max_n: int = 40) -> Client:
    """One client's column: continuous, heavily tied, or constant values, weights >= 0, some NaN.

    Hypothesis chooses the structure (size, kind, weight style, missing share, seed); numpy fills
    the arrays from the seed, which keeps each example cheap enough to run hundreds per test.
    """
    n = draw(st.integers(0, max_n))
    kind = draw(st.sampled_from(["float", "ties", "const"]))
    weight_style = draw(st.sampled_from(["mixed", "uniform", "small", "zeros"]))
    missing = draw(st.sampled_from([0.0, 0.0, 0.2, 1.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "float":
        x = rng.uniform(-100, 100, n).astype(np.float32).astype(np.float64)
    elif kind == "ties":
        x = rng.integers(-3, 4, n).astype(np.float64)
    else:
        x = np.full(n, float(np.float32(rng.uniform(-100, 100))))
    x = x + shift
    if weight_style == "mixed":
        w = rng.choice(WEIGHT_CHOICES, n)
    elif weight_style == "uniform":
        w = rng.uniform(0, 10, n)
    elif weight_style == "small":
        w = np.full(n, 0.01)
    else:
        w = np.zeros(n)
    x[rng.random(n) < missing] = np.nan
    return Client(x, w)


@st.composite
def fleets(draw, max_clients: int = 6) -> list[Client]:
    """Several clients; with a large shift scale their supports are disjoint (covariate shift)."""
    k = draw(st.integers(1, max_clients))
    scale = draw(st.sampled_from([0.0, 1.0, 1e3, 1e6]))
    return [draw(client_column(shift=i * scale)) for i in range(k)]


def pooled(clients: list[Client]) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([c.x for c in clients]), np.concatenate([c.w for c in clients])


def has_weight(x: np.ndarray, w: np.ndarray) -> bool:
    return bool(np.sum(w[~np.isnan(x)]) > 0)
