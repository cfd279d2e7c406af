"""A tree ensemble plus the rule that turns its leaves into predictions.

One format serves every WheelFed algorithm:

* ``kind="boosted"`` (FedSCS-XGB): ``margin = base_score + sum of leaf values``, then ``link``.
  ``tree_output[t] = k >= 0``: tree ``t`` has scalar leaves (``value`` width 1) added to output
  ``k`` (one tree per class per round); ``tree_output[t] = -1``: its leaves are vectors of width
  ``n_outputs`` added to every output. ``link`` is ``softmax`` (multiclass, ``n_outputs`` =
  number of classes), ``sigmoid`` (binary: one margin, ``predict_proba`` gives 2 columns) or
  ``identity`` (regression).
* ``kind="forest"`` (FedForest): the average of the trees' leaf vectors: class distributions
  for classification, values for regression. ``link`` must be ``identity``.
* ``kind="single"`` (FedGA-Tree, personalised trees): one tree's leaf vector.

Forests and single trees must have ``tree_output`` all -1 and ``base_score`` all zero, so no
field is silently ignored. A model is a classifier iff ``classes`` is non-empty.

An ensemble validates itself (and every tree) when it is built and its arrays are read-only, so
an instance that exists is safe to hand to the inference engine, which is compiled once per
instance on first use.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Union

import numpy as np
from numpy.typing import ArrayLike

from .errors import ModelValidationError
from .tree import Tree, _readonly_copy, same_array

if TYPE_CHECKING:
    from .inference import CompiledEnsemble

KINDS = ("boosted", "forest", "single")
LINKS = ("softmax", "sigmoid", "identity")
MetadataValue = Union[str, int, float]
ClassLabel = Union[str, int]
_INT64 = (-(2**63), 2**63 - 1)
_NO_METADATA: Mapping[str, MetadataValue] = MappingProxyType({})


@dataclass(frozen=True, eq=False, repr=False, init=False)
class TreeEnsemble:
    """Trees + ensemble rule + the feature contract (names and pipeline version) they expect."""

    trees: tuple[Tree, ...]
    kind: str
    link: str
    n_outputs: int
    feature_names: tuple[str, ...]
    tree_output: np.ndarray  # int32 (n_trees,)
    base_score: np.ndarray  # float64 (n_outputs,)
    feature_set_version: str
    classes: tuple[ClassLabel, ...]
    metadata: dict[str, MetadataValue]

    def __init__(
        self,
        trees: Iterable[Tree],
        kind: str,
        link: str,
        n_outputs: int,
        feature_names: Iterable[str],
        tree_output: ArrayLike | None = None,  # None -> all -1
        base_score: ArrayLike | None = None,  # None -> zeros
        feature_set_version: str = "",
        classes: Iterable[ClassLabel] = (),
        metadata: Mapping[str, MetadataValue] = _NO_METADATA,
    ) -> None:
        """Copy the fields (arrays read-only, numpy scalars as Python values), fill the defaults and
        ``validate``."""
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731  (frozen)
        for name, labels in (("feature_names", feature_names), ("classes", classes)):
            if isinstance(labels, (str, bytes)):
                raise ModelValidationError("must be a sequence of labels, not a single string", field=name)
        set_("kind", kind)
        set_("link", link)
        set_("feature_set_version", feature_set_version)
        set_("n_outputs", _plain(n_outputs))
        set_("trees", tuple(trees))
        set_("feature_names", tuple(_plain(name) for name in feature_names))
        set_("classes", tuple(_plain(label) for label in classes))
        set_("metadata", {_plain(key): _plain(value) for key, value in dict(metadata).items()})
        if tree_output is None:
            tree_output = np.full(len(self.trees), -1, dtype=np.int32)
        if base_score is None and type(self.n_outputs) is int and self.n_outputs >= 0:
            base_score = np.zeros(self.n_outputs, dtype=np.float64)
        set_("tree_output", _readonly_copy(tree_output))
        set_("base_score", _readonly_copy(base_score))
        self.validate()

    # --- facts -----------------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    @property
    def n_trees(self) -> int:
        return len(self.trees)

    @property
    def is_classifier(self) -> bool:
        return len(self.classes) > 0

    # --- validation --------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ``ModelValidationError`` unless every field and every tree obeys the format."""
        if not isinstance(self.kind, str) or self.kind not in KINDS:
            raise ModelValidationError(f"kind must be one of {KINDS}, got {self.kind!r}", field="kind")
        if not isinstance(self.link, str) or self.link not in LINKS:
            raise ModelValidationError(f"link must be one of {LINKS}, got {self.link!r}", field="link")
        if type(self.n_outputs) is not int or self.n_outputs < 1:
            raise ModelValidationError(f"must be an int >= 1, got {self.n_outputs!r}", field="n_outputs")
        self._validate_contract()
        self._validate_arrays()
        self._validate_rule()
        for index, tree in enumerate(self.trees):
            if not isinstance(tree, Tree):
                raise ModelValidationError(f"expected a Tree, got {type(tree).__name__}", tree=index)
            width = 1 if self.tree_output[index] >= 0 else self.n_outputs
            tree.validate(self.n_features, width, index=index)

    def _validate_contract(self) -> None:
        names = self.feature_names
        if not all(isinstance(name, str) and name for name in names):
            raise ModelValidationError("feature names must be non-empty strings", field="feature_names")
        if len(set(names)) != len(names):
            raise ModelValidationError("feature names must be unique", field="feature_names")
        if not isinstance(self.feature_set_version, str):
            raise ModelValidationError("must be a string", field="feature_set_version")
        classes = self.classes
        if not (all(type(c) is str for c in classes) or all(type(c) is int for c in classes)):
            raise ModelValidationError("class labels must be all str or all int", field="classes")
        if len(set(classes)) != len(classes):
            raise ModelValidationError("class labels must be unique", field="classes")
        if any(type(c) is int and not _INT64[0] <= c <= _INT64[1] for c in classes):
            raise ModelValidationError("int class labels must fit in int64", field="classes")
        for key, value in self.metadata.items():
            ok = (
                type(key) is str
                and type(value) in (str, int, float)
                and not (type(value) is float and not math.isfinite(value))
                and not (type(value) is int and not _INT64[0] <= value <= _INT64[1])
            )
            if not ok:
                raise ModelValidationError(
                    f"entry {key!r}: {value!r}: keys are str, values str, int64 or finite float", field="metadata"
                )

    def _validate_arrays(self) -> None:
        checks = (("tree_output", np.int32, (self.n_trees,)), ("base_score", np.float64, (self.n_outputs,)))
        for name, dtype, shape in checks:
            array = getattr(self, name)
            if array.dtype != dtype or array.shape != shape:
                raise ModelValidationError(
                    f"expected {np.dtype(dtype)} of shape {shape}, got {array.dtype} of shape {array.shape}",
                    field=name,
                )
        bad = (self.tree_output < -1) | (self.tree_output >= self.n_outputs)
        if bad.any():
            index = int(np.flatnonzero(bad)[0])
            raise ModelValidationError(
                f"output {int(self.tree_output[index])} out of range [-1, {self.n_outputs})",
                tree=index,
                field="tree_output",
            )
        if not np.isfinite(self.base_score).all():
            raise ModelValidationError("must be finite", field="base_score")

    def _validate_rule(self) -> None:
        n_classes = len(self.classes)
        if self.kind == "boosted":
            if self.link == "softmax" and not (self.n_outputs >= 2 and n_classes == self.n_outputs):
                raise ModelValidationError(
                    f"softmax needs n_outputs >= 2 equal to the number of classes, got n_outputs="
                    f"{self.n_outputs} and {n_classes} classes",
                    field="link",
                )
            if self.link == "sigmoid" and not (self.n_outputs == 1 and n_classes == 2):
                raise ModelValidationError(
                    f"sigmoid needs n_outputs == 1 and 2 classes, got {self.n_outputs} and {n_classes}", field="link"
                )
            if self.link == "identity" and n_classes:
                raise ModelValidationError("identity (regression) models have no classes", field="classes")
            return
        if self.link != "identity":
            raise ModelValidationError(
                f"{self.kind} models average leaf vectors: link must be 'identity'", field="link"
            )
        if self.kind == "single" and self.n_trees != 1:
            raise ModelValidationError(f"a single-tree model has exactly one tree, got {self.n_trees}", field="trees")
        if self.kind == "forest" and self.n_trees < 1:
            raise ModelValidationError("a forest needs at least one tree", field="trees")
        if n_classes and not (n_classes >= 2 and n_classes == self.n_outputs):
            raise ModelValidationError(
                f"a classifier's leaf vectors hold one probability per class: n_outputs={self.n_outputs}, "
                f"{n_classes} classes",
                field="classes",
            )
        if (self.tree_output != -1).any():
            raise ModelValidationError(f"{self.kind} trees have vector leaves: must be all -1", field="tree_output")
        if (self.base_score != 0).any():
            raise ModelValidationError(f"{self.kind} models have no base score: must be all 0", field="base_score")

    # --- prediction ------------------------------------------------------------------------
    @cached_property
    def _engine(self) -> CompiledEnsemble:
        from .inference import CompiledEnsemble

        return CompiledEnsemble(self)

    def leaves(self, X: ArrayLike) -> np.ndarray:
        """Leaf node id (local to its tree) reached in every tree: (n_rows, n_trees) int32.
        A 1-D ``X`` is one row and gives (n_trees,)."""
        return self._engine.leaves(X)

    def predict_raw(self, X: ArrayLike) -> np.ndarray:
        """Output before the link: the margin (boosted), the averaged leaf vector (forest) or the
        leaf vector (single); (n_rows, n_outputs), or (n_outputs,) for a 1-D ``X``."""
        return self._engine.raw(X)

    def predict_margin(self, X: ArrayLike) -> np.ndarray:
        """Boosted models only: ``base_score`` + summed leaf values, (n_rows, n_outputs)."""
        if self.kind != "boosted":
            raise ValueError(f"predict_margin is for boosted models; this one is {self.kind!r} (use predict_raw)")
        return self._engine.raw(X)

    def predict_proba(self, X: ArrayLike) -> np.ndarray:
        """Class probabilities (n_rows, n_classes), columns ordered as ``classes``."""
        return self.proba_from_raw(self._engine.raw(X))

    def proba_from_raw(self, raw: np.ndarray) -> np.ndarray:
        """Class probabilities from ``predict_raw`` output (any engine's): the link of a boosted
        model, the averaged distributions of a forest as they are."""
        if not self.is_classifier:
            raise ValueError("predict_proba needs a classifier; this model is a regressor")
        if self.kind != "boosted":
            return raw
        if self.link == "sigmoid":
            p = _sigmoid(raw)
            return np.concatenate([1.0 - p, p], axis=-1)
        return _softmax(raw)

    def predict(self, X: ArrayLike) -> np.ndarray:
        """Class labels (from ``classes``, by the most probable class, first on ties) for
        classifiers; values for regressors, (n_rows,) if ``n_outputs == 1`` else (n_rows,
        n_outputs). A 1-D ``X`` drops the row axis."""
        if self.is_classifier:
            proba = self.predict_proba(X)
            return np.asarray(self.classes)[np.argmax(proba, axis=-1)]
        raw = self._engine.raw(X)
        return raw[..., 0] if self.n_outputs == 1 else raw

    # --- io (thin wrappers over serialization.py) ---------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        from .serialization import to_dict

        return to_dict(self)

    @classmethod
    def from_dict(cls, data: Any) -> TreeEnsemble:
        from .serialization import from_dict

        return from_dict(data)

    def to_json(self, *, indent: int | None = None) -> str:
        from .serialization import to_json

        return to_json(self, indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> TreeEnsemble:
        from .serialization import from_json

        return from_json(text)

    def to_cbor(self) -> bytes:
        from .serialization import to_cbor

        return to_cbor(self)

    @classmethod
    def from_cbor(cls, data: bytes, *, max_bytes: int | None = None) -> TreeEnsemble:
        from .serialization import from_cbor

        return from_cbor(data, max_bytes=max_bytes)

    def to_xgboost_json(self, *, round_thresholds: bool = False, feature_names: bool = False) -> bytes:
        """XGBoost model JSON for boosted models; see ``xgboost_json.to_xgboost_json``."""
        from .xgboost_json import to_xgboost_json

        return to_xgboost_json(self, round_thresholds=round_thresholds, feature_names=feature_names)

    # --- dunder ------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        """Bit-exact equality of every field (trees, arrays, labels and metadata)."""
        if not isinstance(other, TreeEnsemble):
            return NotImplemented
        scalars = ("kind", "link", "n_outputs", "feature_names", "feature_set_version")
        return (
            all(getattr(self, name) == getattr(other, name) for name in scalars)
            and [(type(c), c) for c in self.classes] == [(type(c), c) for c in other.classes]
            and _same_metadata(self.metadata, other.metadata)
            and same_array(self.tree_output, other.tree_output)
            and same_array(self.base_score, other.base_score)
            and self.trees == other.trees
        )

    __hash__ = None  # type: ignore[assignment]  # unhashable: equality compares the arrays' bytes

    def __reduce__(self) -> tuple:
        """Pickle through the constructor: re-validated, read-only, compiled engine not carried."""
        return (type(self), tuple(getattr(self, f.name) for f in fields(self)))

    def __repr__(self) -> str:
        return (
            f"TreeEnsemble(kind={self.kind!r}, link={self.link!r}, n_trees={self.n_trees}, "
            f"n_outputs={self.n_outputs}, n_features={self.n_features}, classes={self.classes!r})"
        )


def _plain(value: Any) -> Any:
    """numpy scalars (e.g. labels from ``np.unique(y)``) to the Python types the format stores."""
    if isinstance(value, (bool, np.bool_)):
        return value  # refused by validate(): a bool is not a label, name or metadata value here
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def _same_metadata(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for key, value in a.items():
        other = b[key]
        if type(value) is not type(other):
            return False
        if type(value) is float:
            if np.float64(value).tobytes() != np.float64(other).tobytes():
                return False
        elif value != other:
            return False
    return True


def _sigmoid(margin: np.ndarray) -> np.ndarray:
    """Overflow-free logistic function."""
    z = np.exp(-np.abs(margin))
    return np.where(margin >= 0, 1.0 / (1.0 + z), z / (1.0 + z))


def _softmax(margin: np.ndarray) -> np.ndarray:
    shifted = np.exp(margin - margin.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)
