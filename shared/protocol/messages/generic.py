"""Messages every participant speaks, whatever the algorithm.

Algorithm-specific bodies live beside this module, one module per algorithm, named after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np

from ..envelope import message_type
from ..schema import ArraySpec

_F64_1D = ArraySpec(("float64",), ndim=1, finite=True)

#: The most windows a gateway's status may count: 10**9 windows of a 2 s step are 63 years of
#: recording, so a larger count is a lie (or a fault), not data.
MAX_WINDOW_COUNT = 10**9


@message_type("hello")
@dataclass(frozen=True)
class Hello:
    """A gateway introduces itself: what it runs and which features it produces."""

    software_version: str
    feature_set_version: str = ""
    n_features: int = 0
    capabilities: tuple[str, ...] = ()


@message_type("describe")
@dataclass(frozen=True)
class Describe:
    """Asks a gateway to answer with its ``Hello``."""


@message_type("status")
@dataclass(frozen=True)
class Status:
    """Presence and health; published retained (and as the MQTT last will with online=False).

    ``n_windows`` windows stored, ``n_labelled`` of them labelled: each between 0 and
    :data:`MAX_WINDOW_COUNT`, and no more labelled than stored (a status saying otherwise is
    refused at decode).

    Examples
    --------
    >>> Status(online=True, n_windows=10, n_labelled=4).n_labelled
    4
    >>> Status(online=True, n_windows=10, n_labelled=-5)
    Traceback (most recent call last):
    ValueError: n_labelled must lie in [0, n_windows=10], got -5
    """

    online: bool
    active_model: str = ""
    n_windows: int = 0
    n_labelled: int = 0
    detail: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.n_windows <= MAX_WINDOW_COUNT:
            raise ValueError(f"n_windows must lie in [0, {MAX_WINDOW_COUNT}], got {self.n_windows}")
        if not 0 <= self.n_labelled <= self.n_windows:
            raise ValueError(f"n_labelled must lie in [0, n_windows={self.n_windows}], got {self.n_labelled}")


@message_type("error")
@dataclass(frozen=True)
class ErrorReply:
    """The request named by ``re`` failed on the receiver: ``code`` is machine-readable
    (``feature_set_mismatch``, ``no_labelled_windows``, ``no_holdout_windows``, ``resync``, ...),
    ``message`` says why in words that quote no sensor value or label (it reaches the aggregator's
    log and its operator's terminal).

    ``feature_sets``: with ``feature_set_mismatch``, the feature sets this gateway does hold
    labelled windows of -- what the aggregator needs to pick the version most of the fleet can
    train on. The versions are the ones ``Hello`` announces anyway (a digest of the sensor
    layout); no counts travel with them.
    """

    code: str
    message: str
    request_type: str = ""
    feature_sets: tuple[str, ...] = ()


@message_type("ack")
@dataclass(frozen=True)
class Ack:
    """The request named by ``re`` was received and applied (for requests with no data reply)."""

    note: str = ""


@message_type("ping")
@dataclass(frozen=True)
class Ping:
    """Asks a participant to answer with a ``Pong``; used for liveness and latency checks."""

    payload: bytes = b""
    delay_s: float = 0.0


@message_type("pong")
@dataclass(frozen=True)
class Pong:
    payload: bytes = b""


@message_type("model_announcement")
@dataclass(frozen=True)
class ModelAnnouncement:
    """A model version is available: what it is, and how to check the bytes that follow."""

    model_id: str
    version: int
    algorithm: str
    feature_set_version: str
    sha256: bytes
    size: int
    kind: Literal["boosted", "forest", "single"] = "boosted"
    target: str = ""  # a client id for a personalised model, "" for the whole fleet

    def __post_init__(self) -> None:
        if len(self.sha256) != 32:
            raise ValueError(f"sha256 must be 32 bytes, got {len(self.sha256)}")
        if self.size < 0 or self.version < 0:
            raise ValueError("size and version must be >= 0")


@message_type("data_summary_request")
@dataclass(frozen=True)
class DataSummaryRequest:
    """Opens a training job: the client snapshots its labelled windows of ``feature_set_version``
    and describes them with additive statistics (``regression``: targets are real numbers)."""

    feature_set_version: str
    regression: bool = False


@message_type("data_summary")
@dataclass(frozen=True)
class DataSummary:
    """What the server learns of a client's data before training, and nothing more:

    sizes; per-feature ``moments`` ``[W, Σx, Σx²]`` (3, d) and the ``minimum``/``maximum``
    non-missing value (0 where a feature has none; FedForest's fixed-width histogram baseline
    needs them -- they are two actual values per feature, say so in reviews); the label
    vocabulary with ``label_counts`` (classification; ``integer_labels``: every label is an
    integer) or ``target_sum``/``target_sum_squares`` (regression); column ``feature_names``.
    """

    n_samples: int
    n_features: int
    moments: Annotated[np.ndarray, ArraySpec(("float64",), ndim=2, finite=True)]
    minimum: Annotated[np.ndarray, _F64_1D]
    maximum: Annotated[np.ndarray, _F64_1D]
    feature_names: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    label_counts: Annotated[np.ndarray, ArraySpec(("int64", "int32", "uint32"), ndim=1)] = field(
        default_factory=lambda: np.zeros(0, np.int64)
    )
    integer_labels: bool = False
    target_sum: float = 0.0
    target_sum_squares: float = 0.0

    def __post_init__(self) -> None:
        if self.n_samples < 0 or self.n_features < 0:
            raise ValueError("n_samples and n_features must be >= 0")
        d = self.n_features
        if self.moments.shape != (3, d):
            raise ValueError(f"moments must have shape (3, {d}), got {self.moments.shape}")
        if self.minimum.shape != (d,) or self.maximum.shape != (d,):
            raise ValueError(f"minimum and maximum must have shape ({d},)")
        if self.feature_names and len(self.feature_names) != d:
            raise ValueError(f"{len(self.feature_names)} feature names for {d} features")
        if self.label_counts.shape != (len(self.labels),):
            raise ValueError(f"label_counts has {self.label_counts.shape[0]} entries, expected {len(self.labels)}")
        if self.label_counts.size and self.label_counts.min() < 0:
            raise ValueError("label_counts must be >= 0")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError("labels must be unique")
        if int(self.label_counts.sum()) > self.n_samples:
            raise ValueError("label_counts sum to more than n_samples")
