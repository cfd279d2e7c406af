"""The client side of a private job's opening (``shared.protocol.messages.fleet_sums``): the
data's shape, the count/target vector and the grid counts (of the features, and of a regression
target when asked), each an integer vector for a fleet sum (masked by the participant when the
request is secure)."""

from __future__ import annotations

import numpy as np

from shared.differential_privacy import skellam_share
from shared.protocol.messages.fleet_sums import (
    TARGET_BOUND,
    TARGET_RANGE,
    NoiseShare,
    DataShape,
    FleetCountsRequest,
    GridCountsRequest,
)
from shared.sketches import GridPlan, float32_keys, grid_counts

from .dispatcher import RequestRejected
from .training_data import LabelledData, class_ids, label_strings

__all__ = ["count_vector", "data_shape", "grid_vector", "with_noise"]


def with_noise(vector: np.ndarray, noise: NoiseShare | None, rng: np.random.Generator | None = None) -> np.ndarray:
    """``vector`` (int64) scaled and plus this gateway's share of the DP noise, if the request
    asks for it (``NoiseShare``)."""
    if noise is None:
        return vector
    return vector * noise.scale + skellam_share(vector.shape, noise.mu, noise.shares, rng)


def data_shape(data: LabelledData, *, labels: bool) -> DataShape:
    """The snapshot's width and names, and its label set when asked (no counts)."""
    names: tuple[str, ...] = ()
    integral = False
    if labels:
        strings, integral = label_strings(data.y)
        names = tuple(sorted(set(strings.astype(str).tolist())))
    return DataShape(
        n_features=data.X.shape[1], feature_names=data.feature_names, labels=names, integer_labels=integral
    )


def _targets(data: LabelledData) -> np.ndarray:
    try:
        y = np.asarray(data.y, dtype=np.float64)
    except (TypeError, ValueError):
        raise RequestRejected("bad_data", "regression targets must be numbers") from None
    if not np.isfinite(y).all():
        raise RequestRejected("bad_data", "regression targets must be finite")
    return y


def count_vector(data: LabelledData, request: FleetCountsRequest) -> np.ndarray:
    """``[n, per-class counts]`` or, with ``d = y - shift``, ``[n, Σ round(d·2^f), Σ round(d²)]``
    as int64 (refused with ``TARGET_RANGE`` when some ``|d|`` reaches ``TARGET_BOUND``: the sums
    could overflow; the message names no value)."""
    if request.regression:
        d = _targets(data) - request.shift
        if d.size and np.abs(d).max() >= TARGET_BOUND:
            raise RequestRejected(
                TARGET_RANGE, f"private regression needs targets within 2**20 ({TARGET_BOUND:.0f}) of the fleet median"
            )
        return np.array(
            [
                d.size,
                int(np.rint(np.ldexp(d, request.frac_bits)).astype(np.int64).sum()),
                int(np.rint(d * d).astype(np.int64).sum()),
            ],
            dtype=np.int64,
        )
    ids = class_ids(data.y, request.classes)
    ids = ids[ids >= 0]
    return np.concatenate([[ids.size], np.bincount(ids, minlength=len(request.classes))]).astype(np.int64)


def grid_vector(data: LabelledData, request: GridCountsRequest) -> np.ndarray:
    """Counts of the snapshot's values in the request's grid buckets (int64); with
    ``request.target`` the regression target is the last column."""
    columns = np.column_stack([data.X, _targets(data)]) if request.target else data.X
    try:
        plan = GridPlan.from_arrays(
            {"feature": request.feature, "prefix": request.prefix, "bits": request.bits, "step": request.step},
            n_features=columns.shape[1],
        )
    except ValueError as exc:
        raise RequestRejected("bad_request", f"grid plan: {exc}") from None
    keys, missing = float32_keys(np.asarray(columns, dtype=np.float32))
    return grid_counts(keys, missing, plan)
