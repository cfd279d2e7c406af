"""Missing samples: the one place that decides what a NaN in a window means.

A dropped sample, a sensor hiccup or an importer that marks gaps leaves non-finite values
(NaN, +-inf) in a window. Every feature downstream needs a defined value, so instead of
teaching each calculator about NaN we repair the series once, here:

- interior runs of missing samples are linearly interpolated between the nearest valid
  neighbours (the pipeline's 20 Hz signals are low-passed at 5-10 Hz, so a straight line over
  a few samples is what the signal most plausibly did);
- leading/trailing runs hold the nearest valid value (no extrapolation of a trend);
- a series with no valid sample at all becomes 0.0 everywhere (a constant, whose features
  are all defined, see FEATURES.md).

The repair is never silent: the fraction of missing samples is returned and becomes the
``missing_fraction`` feature, so a model can tell a repaired window from a clean one.
"""

from __future__ import annotations

import numpy as np


def fill_missing(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Repair non-finite samples along the last axis.

    Returns ``(filled, missing_fraction)``: ``filled`` is float64 with the same shape as ``x``
    and only finite values; ``missing_fraction`` has shape ``x.shape[:-1]`` (1.0 for an empty
    series: nothing was observed). When nothing is missing, ``filled`` is ``x`` as float64
    without a copy.
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    if n == 0:
        return x, np.ones(x.shape[:-1])
    good = np.isfinite(x)
    missing = np.count_nonzero(~good, axis=-1) / n
    if good.all():
        return x, missing
    idx = np.arange(n)
    prev = np.maximum.accumulate(np.where(good, idx, -1), axis=-1)
    nxt = np.minimum.accumulate(np.where(good, idx, n)[..., ::-1], axis=-1)[..., ::-1]
    has_prev, has_next = prev >= 0, nxt < n
    p, q = np.clip(prev, 0, n - 1), np.clip(nxt, 0, n - 1)
    values = np.where(good, x, 0.0)
    xp = np.take_along_axis(values, p, axis=-1)
    xq = np.take_along_axis(values, q, axis=-1)
    span = q - p
    frac = np.divide(idx - p, span, out=np.zeros(x.shape), where=span > 0)
    interpolated = np.where(
        has_prev & has_next, xp + (xq - xp) * frac, np.where(has_prev, xp, np.where(has_next, xq, 0.0))
    )
    return np.where(good, x, interpolated), missing
