"""Model <-> plain dict, JSON and CBOR.

The dict is the single source of the wire layout: CBOR encodes it with numpy arrays as RFC 8746
typed arrays (bit-exact; bools travel as uint8 because typed arrays have no bool type), JSON
writes the same dict with arrays as (nested) lists for humans. Python's ``json`` writes floats
with ``repr``, which round-trips float64 exactly; NaN and infinities cannot occur because
validation forbids them (and the writer refuses them).

``from_dict`` is the gate for untrusted data (models pushed over MQTT): it checks keys (none
missing, none extra), types, dtypes and shapes, builds the model and runs its full validation.
Every problem raises ``ModelValidationError``.

Layout, version 1::

    {"format": "wheelfed.tree-ensemble", "version": 1,
     "kind": str, "link": str, "n_outputs": int,
     "feature_names": [str], "feature_set_version": str, "classes": [str] | [int],
     "metadata": {str: str | int | float},
     "tree_output": int32[n_trees], "base_score": float64[n_outputs],
     "trees": [{"feature": int32[n], "threshold": float64[n], "left": int32[n], "right": int32[n],
                "default_left": uint8[n], "value": float64[n, width], "is_categorical": uint8[n],
                "cat_offsets": int64[n + 1], "cat_values": int32[m], "cover"?: float64[n]}]}
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .ensemble import TreeEnsemble
from .errors import ModelValidationError
from .tree import FIELD_DTYPES, Tree

FORMAT_NAME = "wheelfed.tree-ensemble"
FORMAT_VERSION = 1

_BOOL_FIELDS = frozenset({"default_left", "is_categorical"})
#: Wire dtype and number of dimensions of every tree array.
TREE_ARRAYS: dict[str, tuple[np.dtype, int]] = {
    name: (np.dtype(np.uint8) if name in _BOOL_FIELDS else dtype, 2 if name == "value" else 1)
    for name, dtype in FIELD_DTYPES.items()
}
_OPTIONAL_TREE_ARRAYS = frozenset({"cover"})
ENSEMBLE_ARRAYS: dict[str, tuple[np.dtype, int]] = {
    "tree_output": (np.dtype(np.int32), 1),
    "base_score": (np.dtype(np.float64), 1),
}
_ENSEMBLE_KEYS = frozenset(
    {
        "format",
        "version",
        "kind",
        "link",
        "n_outputs",
        "feature_names",
        "feature_set_version",
        "classes",
        "metadata",
        "trees",
        *ENSEMBLE_ARRAYS,
    }
)


# --- dict ------------------------------------------------------------------------------------
def to_dict(ensemble: TreeEnsemble) -> dict[str, Any]:
    """The model as a plain dict of str/int/float/list/dict values and numpy arrays."""
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "kind": ensemble.kind,
        "link": ensemble.link,
        "n_outputs": ensemble.n_outputs,
        "feature_names": list(ensemble.feature_names),
        "feature_set_version": ensemble.feature_set_version,
        "classes": list(ensemble.classes),
        "metadata": dict(ensemble.metadata),
        "tree_output": ensemble.tree_output,
        "base_score": ensemble.base_score,
        "trees": [_tree_to_dict(tree) for tree in ensemble.trees],
    }


def _tree_to_dict(tree: Tree) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name in TREE_ARRAYS:
        array = getattr(tree, name)
        if array is None:
            continue
        out[name] = array.astype(np.uint8) if name in _BOOL_FIELDS else array
    return out


def from_dict(data: Any) -> TreeEnsemble:
    """Build and fully validate a model from (untrusted) ``to_dict`` output."""
    _check_keys(data, _ENSEMBLE_KEYS, frozenset(), "model")
    if type(data["format"]) is not str or data["format"] != FORMAT_NAME:
        raise ModelValidationError(f"expected {FORMAT_NAME!r}, got {data['format']!r}", field="format")
    if type(data["version"]) is not int or data["version"] != FORMAT_VERSION:
        raise ModelValidationError(
            f"unsupported version {data['version']!r} (this reader knows {FORMAT_VERSION})", field="version"
        )
    for name in ("kind", "link", "feature_set_version"):
        _expect_type(data[name], str, name)
    _expect_type(data["n_outputs"], int, "n_outputs")
    for name in ("feature_names", "classes", "trees"):
        _expect_type(data[name], (list, tuple), name)
    _expect_type(data["metadata"], dict, "metadata")
    arrays = {name: _wire_array(data[name], dtype, ndim, name, None) for name, (dtype, ndim) in ENSEMBLE_ARRAYS.items()}
    trees = tuple(_tree_from_dict(tree, index) for index, tree in enumerate(data["trees"]))
    try:
        return TreeEnsemble(
            trees=trees,
            kind=data["kind"],
            link=data["link"],
            n_outputs=data["n_outputs"],
            feature_names=tuple(data["feature_names"]),
            tree_output=arrays["tree_output"],
            base_score=arrays["base_score"],
            feature_set_version=data["feature_set_version"],
            classes=tuple(data["classes"]),
            metadata=data["metadata"],
        )
    except ModelValidationError:
        raise
    except (TypeError, ValueError, OverflowError, IndexError) as exc:  # belt and braces for hostile data
        raise ModelValidationError(f"malformed model data: {type(exc).__name__}: {exc}") from exc


def _tree_from_dict(data: Any, index: int) -> Tree:
    _check_keys(data, frozenset(TREE_ARRAYS) - _OPTIONAL_TREE_ARRAYS, _OPTIONAL_TREE_ARRAYS, f"tree {index}")
    fields: dict[str, np.ndarray] = {}
    for name, (dtype, ndim) in TREE_ARRAYS.items():
        if name not in data:
            continue
        array = _wire_array(data[name], dtype, ndim, name, index)
        if name in _BOOL_FIELDS:
            if (array > 1).any():
                raise ModelValidationError("flags must be 0 or 1", tree=index, field=name)
            array = array.astype(np.bool_)
        fields[name] = array
    return Tree(**fields)


def _check_keys(data: Any, required: frozenset[str], optional: frozenset[str], where: str) -> None:
    if not isinstance(data, dict):
        raise ModelValidationError(f"{where} must be a dict, got {type(data).__name__}")
    keys = set(data)
    missing = sorted(required - keys)
    extra = sorted(map(str, keys - required - optional))
    if missing or extra:
        raise ModelValidationError(f"{where}: missing keys {missing}, unexpected keys {extra}")


def _expect_type(value: Any, kind: type | tuple[type, ...], name: str) -> None:
    if not isinstance(value, kind) or isinstance(value, bool):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ModelValidationError(f"expected {expected}, got {type(value).__name__}", field=name)


def _wire_array(value: Any, dtype: np.dtype, ndim: int, name: str, tree: int | None) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise ModelValidationError(f"expected a {dtype} array, got {type(value).__name__}", tree=tree, field=name)
    if value.dtype.newbyteorder("=") != dtype or value.ndim != ndim:
        raise ModelValidationError(
            f"expected a {ndim}-D {dtype} array, got {value.ndim}-D {value.dtype}", tree=tree, field=name
        )
    return value


# --- JSON ---------------------------------------------------------------------------------
def to_json(ensemble: TreeEnsemble, *, indent: int | None = None) -> str:
    """Human-readable JSON of ``to_dict``; floats round-trip bit-exactly."""
    return json.dumps(to_dict(ensemble), default=_json_default, allow_nan=False, indent=indent)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _refuse_constant(name: str) -> None:
    raise ModelValidationError(f"JSON constant {name} is not allowed in a model")


def from_json(text: str | bytes) -> TreeEnsemble:
    """Parse and fully validate a model written by ``to_json`` (or by hand)."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ModelValidationError(f"not valid JSON: {exc}") from exc
    if isinstance(data, dict):
        data = dict(data)
        for name, spec in ENSEMBLE_ARRAYS.items():
            data[name] = _json_array(data.get(name), *spec, name, None)
        if isinstance(data.get("trees"), list):
            data["trees"] = [_json_tree(tree, index) for index, tree in enumerate(data["trees"])]
    return from_dict(data)


def _json_tree(tree: Any, index: int) -> Any:
    if not isinstance(tree, dict):
        return tree
    return {
        key: (_json_array(value, *TREE_ARRAYS[key], key, index) if key in TREE_ARRAYS else value)
        for key, value in tree.items()
    }


def _json_array(value: Any, dtype: np.dtype, ndim: int, name: str, tree: int | None) -> Any:
    """A JSON list as an array of exactly ``dtype``, refusing values that would change."""
    if not isinstance(value, list):
        return value  # from_dict reports the wrong type
    try:
        array = np.array(value)
    except (ValueError, OverflowError) as exc:
        raise ModelValidationError(f"not a rectangular numeric list: {exc}", tree=tree, field=name) from exc
    if array.size == 0:
        return np.zeros(array.shape if array.ndim == ndim else (0,) * ndim, dtype=dtype)
    allowed = "iu" if dtype.kind in "iu" else "iuf"
    if array.dtype.kind not in allowed:
        raise ModelValidationError(f"expected {dtype} numbers, got {array.dtype} values", tree=tree, field=name)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if array.min() < info.min or array.max() > info.max:
            raise ModelValidationError(f"values outside the {dtype} range", tree=tree, field=name)
    return array.astype(dtype)


# --- CBOR -----------------------------------------------------------------------------------
def to_cbor(ensemble: TreeEnsemble) -> bytes:
    """CBOR bytes of ``to_dict`` via WheelFed's codec (arrays as RFC 8746 typed arrays)."""
    from shared.protocol.codec import dumps_value

    return dumps_value(to_dict(ensemble))


#: A model is ~9 arrays per tree: a message's default cap of 4096 arrays would stop at ~450 trees
#: (a 100-round, 7-class boosted model has 700). Models may hold this many arrays instead.
MODEL_MAX_ARRAYS = 1 << 18


def from_cbor(data: bytes, *, max_bytes: int | None = None) -> TreeEnsemble:
    """Decode (with the codec's hardening; ``max_bytes`` overrides its size limit) and fully
    validate a model. Codec errors (``shared.protocol.errors.DecodeError``) propagate as is."""
    from shared.protocol.codec import loads_value
    from shared.protocol.limits import DecodeLimits

    return from_dict(loads_value(data, limits=DecodeLimits(max_arrays=MODEL_MAX_ARRAYS), max_bytes=max_bytes))
