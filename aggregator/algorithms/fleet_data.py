"""A job's opening round, shared by every algorithm: what the fleet's data looks like.

Each client answers a ``DataSummaryRequest`` with additive statistics (``DataSummary``); this
module sums them into a :class:`FleetData` -- the feature count, the label vocabulary, class
counts or target sums, per-feature moments and value ranges -- and leaves out (with a logged
reason) the clients whose data do not fit the majority's shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shared.protocol.messages import DataSummary, DataSummaryRequest

from ..jobs import FederatedJob, TrainingError

__all__ = ["FleetData", "MAX_CLASSES", "describe_fleet", "fleet_vocabulary", "job_classes", "keep_majority_width"]

#: More distinct labels than this is almost surely a regression target given to a classifier.
MAX_CLASSES = 256


@dataclass(frozen=True, eq=False)
class FleetData:
    """Summed ``DataSummary`` replies of the accepted ``clients`` (in client-id order).

    ``classes``: the wire vocabulary (strings; empty for regression); ``model_classes``: the
    same as ints when every client's labels are integers. ``label_counts`` is aligned with
    ``classes``; ``n_samples`` maps client -> its number of labelled samples.
    """

    clients: tuple[str, ...]
    n_samples: dict[str, int]
    n_features: int
    feature_names: tuple[str, ...]
    classes: tuple[str, ...]
    model_classes: tuple
    label_counts: np.ndarray
    target_sum: float
    target_sum_squares: float
    moments: np.ndarray
    minimum: np.ndarray
    maximum: np.ndarray

    @property
    def total_samples(self) -> int:
        return sum(self.n_samples.values())


def job_classes(replies: dict[str, DataSummary]) -> tuple[tuple[str, ...], bool]:
    """The sorted union of the clients' labels (numerically when every client's are integers)."""
    labels = sorted({label for r in replies.values() for label in r.labels})
    integral = all(r.integer_labels for r in replies.values() if r.labels)
    if integral:
        labels = sorted(labels, key=int)
    return tuple(labels), integral


def keep_majority_width(job: FederatedJob, replies: dict) -> int:
    """The feature count most clients report; the others are rejected (and removed from
    ``replies``). Works on any reply with ``n_features`` (``DataSummary``, ``DataShape``)."""
    widths = [r.n_features for r in replies.values()]
    d = max(set(widths), key=widths.count)
    for client in [c for c, r in replies.items() if r.n_features != d]:
        job.reject(client, f"{replies.pop(client).n_features} features, the fleet has {d}")
    return d


def fleet_vocabulary(replies: dict, classes: tuple[str, ...] | None, regression: bool) -> tuple[tuple[str, ...], tuple]:
    """The job's label vocabulary (wire strings) and the model's classes (ints when every label
    is an integer): ``classes`` when the job fixes them, else the union of the replies' labels."""
    if regression:
        return (), ()
    vocabulary, integral = job_classes(replies) if classes is None else (tuple(classes), False)
    if classes is not None:
        integral = all(c.lstrip("-").isdigit() for c in vocabulary)
    if len(vocabulary) > MAX_CLASSES:
        raise TrainingError(
            f"the clients' labels hold {len(vocabulary)} distinct values: too many classes for "
            f"a classifier (at most {MAX_CLASSES}); continuous targets need a regression objective"
        )
    return vocabulary, tuple(int(c) for c in vocabulary) if integral else vocabulary


def describe_fleet(
    job: FederatedJob,
    feature_set_version: str,
    *,
    regression: bool,
    classes: tuple[str, ...] | None = None,
    clients: list[str] | None = None,
) -> FleetData:
    """Ask ``clients`` (default: the job's) for their ``DataSummary`` and sum the usable ones."""
    replies = job.ask(DataSummaryRequest(feature_set_version, regression), clients or job.clients, DataSummary)
    if not replies:
        raise TrainingError("no client described its data")
    d = keep_majority_width(job, replies)
    named = [r.feature_names for r in replies.values() if r.feature_names]
    vocabulary, model_classes = fleet_vocabulary(replies, classes, regression)
    index = {c: i for i, c in enumerate(vocabulary)}
    counts = np.zeros(len(vocabulary))
    for r in replies.values():
        for label, n in zip(r.labels, r.label_counts.tolist()):
            if label in index:
                counts[index[label]] += n
    present = [r for r in replies.values() if r.moments[0].sum() > 0]
    minimum = np.min([np.where(r.moments[0] > 0, r.minimum, np.inf) for r in present], axis=0) if present else None
    maximum = np.max([np.where(r.moments[0] > 0, r.maximum, -np.inf) for r in present], axis=0) if present else None
    return FleetData(
        clients=tuple(replies),
        n_samples={c: r.n_samples for c, r in replies.items()},
        n_features=d,
        feature_names=named[0] if named else tuple(f"f{j}" for j in range(d)),
        classes=tuple(vocabulary),
        model_classes=tuple(model_classes),
        label_counts=counts,
        target_sum=sum(r.target_sum for r in replies.values()),
        target_sum_squares=sum(r.target_sum_squares for r in replies.values()),
        moments=sum(r.moments for r in replies.values()),
        minimum=np.zeros(d) if minimum is None else np.where(np.isfinite(minimum), minimum, 0.0),
        maximum=np.zeros(d) if maximum is None else np.where(np.isfinite(maximum), maximum, 0.0),
    )
