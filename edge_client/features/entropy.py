"""Sample entropy (Richman & Moorman 2000) of every series, vectorised over series.

Definition (tsfresh ``sample_entropy``): m = 2, tolerance r = 0.2 * std (population std).
For all templates of length m (n - m + 1 of them) count the ordered pairs i != j whose
Chebyshev distance is <= r: B. Same for length m + 1 (n - m templates): A. SampEn = -ln(A / B).

Differences, all documented in FEATURES.md:

- TIFEX divides A by (n - m) and B by (n - m + 1) before the ratio, which shifts every value
  by the constant -ln((n - m + 1) / (n - m)) (-0.0127 for n = 80); we keep tsfresh's A / B.
- A = 0 (no template continues to match; tsfresh: inf, or NaN when B = 0 too) gives the
  largest value the estimator can produce on n samples, ln((n - m + 1)(n - m) / 2)
  (A's smallest non-zero value is 2, B's largest (n - m + 1)(n - m)): "at least as irregular
  as anything measurable here", finite so that a tree split can use it.
- A constant series gives 0 (perfectly regular; tsfresh returns -ln((n-m-1)/(n-m+1)) because
  r = 0 still matches every pair), and so does a series too short to form two (m + 1)-templates
  (n < m + 2).

The pairwise distance test is computed once per series as an n x n boolean "close" matrix
(``|x_i - x_j| <= r``); the m-template match is the AND of m shifted diagonals of it and the
(m + 1)-match one more AND, so the cost is O(n^2) bit operations per series, processed in
chunks to bound memory.
"""

from __future__ import annotations

import numpy as np

EMBEDDING_DIMENSION = 2
TOLERANCE_FACTOR = 0.2
_CHUNK_ELEMENTS = 200_000  # pairwise distances per chunk (1.6 MB of float64: stays in cache, ~31 series of 80)


def sample_entropy(x: np.ndarray, std: np.ndarray, constant: np.ndarray) -> np.ndarray:
    """Sample entropy of each series along the last axis; shape ``x.shape[:-1]``."""
    m = EMBEDDING_DIMENSION
    n = x.shape[-1]
    if n < m + 2:
        return np.zeros(x.shape[:-1])
    rows = x.reshape(-1, n)
    tolerance = (TOLERANCE_FACTOR * std).reshape(-1)
    a = np.empty(rows.shape[0])
    b = np.empty(rows.shape[0])
    chunk = min(rows.shape[0], max(1, _CHUNK_ELEMENTS // (n * n)))
    k = n - m + 1  # templates of length m
    distance = np.empty((chunk, n, n))
    close = np.empty((chunk, n, n), dtype=bool)
    match_m = np.empty((chunk, k, k), dtype=bool)
    match_m1 = np.empty((chunk, k - 1, k - 1), dtype=bool)
    for start in range(0, rows.shape[0], chunk):
        xs = rows[start : start + chunk]
        c = xs.shape[0]
        np.subtract(xs[:, :, None], xs[:, None, :], out=distance[:c])
        np.abs(distance[:c], out=distance[:c])
        np.less_equal(distance[:c], tolerance[start : start + c, None, None], out=close[:c])
        np.copyto(match_m[:c], close[:c, :k, :k])
        for shift in range(1, m):
            match_m[:c] &= close[:c, shift : shift + k, shift : shift + k]
        np.logical_and(match_m[:c, :-1, :-1], close[:c, m:, m:], out=match_m1[:c])
        b[start : start + c] = np.count_nonzero(match_m[:c].reshape(c, -1), axis=1) - k
        a[start : start + c] = np.count_nonzero(match_m1[:c].reshape(c, -1), axis=1) - (k - 1)
    ceiling = np.log(k * (k - 1) / 2.0)
    ratio = np.divide(a, b, out=np.ones_like(a), where=(a > 0) & (b > 0))
    value = np.where(a > 0, -np.log(ratio), ceiling)
    return np.where(constant.reshape(-1), 0.0, value).reshape(x.shape[:-1])
