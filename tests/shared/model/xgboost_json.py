"""Test helper: an XGBoost booster's JSON (``save_raw("json")``) as a ``TreeEnsemble``.

Kept in the tests until the product grows its own importer/exporter (``shared/model/
xgboost_json.py`` in the architecture). Conversions worth knowing:

* XGBoost writes floats as shortest float32 decimals, so numbers are read back through float32
  (reading the decimal as float64 would give a threshold slightly off the float32 one).
* Numeric splits: ``x < split_condition`` goes left, as in our format.
* Categorical splits: XGBoost sends the listed categories RIGHT; our format sends the set LEFT,
  so the children are swapped and ``default_left`` flipped.
* Leaf values live in ``split_conditions`` (scalar leaves) or, for multi-output trees
  (``size_leaf_vector`` > 1), in ``leaf_weights``: the leaf's ``right_children`` entry is its
  row there (internal nodes get zero vectors here).
* ``base_score`` is in output space: the margin offset is logit(p) for ``binary:logistic`` and
  the value itself for softmax and squared error.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from shared.model import Tree, TreeEnsemble


def _f32(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).astype(np.float32).astype(np.float64)


def _tree(tree: dict[str, Any]) -> Tree:
    left = np.asarray(tree["left_children"], dtype=np.int32)
    right = np.asarray(tree["right_children"], dtype=np.int32)
    n = left.shape[0]
    leaf = left == -1
    width = int(tree["tree_param"]["size_leaf_vector"])
    default_left = np.asarray(tree["default_left"], dtype=bool)
    threshold = np.where(leaf, 0.0, _f32(tree["split_conditions"]))
    if width > 1:
        # Multi-output trees (3.x): a leaf's right_children entry indexes its row of leaf_weights.
        value = np.zeros((n, width))
        value[leaf] = _f32(tree["leaf_weights"]).reshape(-1, width)[right[leaf]]
        right = np.where(leaf, -1, right).astype(np.int32)
    else:
        value = np.where(leaf, _f32(tree["split_conditions"]), _f32(tree["base_weights"]))[:, None]
    categories: list[list[int] | None] = [None] * n
    for node, start, size in zip(tree["categories_nodes"], tree["categories_segments"], tree["categories_sizes"]):
        categories[node] = tree["categories"][start : start + size]
        left[node], right[node] = right[node], left[node]
        default_left[node] = not default_left[node]
        threshold[node] = 0.0
    return Tree.from_arrays(
        feature=np.where(leaf, -1, np.asarray(tree["split_indices"])),
        threshold=threshold,
        left=left,
        right=right,
        value=value,
        default_left=default_left,
        categories=categories if tree["categories_nodes"] else None,
        cover=_f32(tree["sum_hessian"]),
    )


def booster_to_ensemble(booster: Any, classes: tuple | None = None) -> TreeEnsemble:
    """Convert a trained ``xgboost.Booster`` (objectives softprob/softmax, logistic, squarederror)."""
    model = json.loads(booster.save_raw("json"))
    learner = model["learner"]
    params = learner["learner_model_param"]
    objective = learner["objective"]["name"]
    n_features = int(params["num_feature"])
    base = _f32([float(v) for v in params["base_score"].strip("[]").split(",")])
    gbtree = learner["gradient_booster"]["model"]
    trees = tuple(_tree(t) for t in gbtree["trees"])
    widths = [t.n_outputs for t in trees]
    if objective in ("multi:softprob", "multi:softmax"):
        n_classes = int(params["num_class"])
        link, n_outputs = "softmax", n_classes
        labels = tuple(range(n_classes)) if classes is None else classes
        base = np.broadcast_to(base, (n_classes,)).copy()
    elif objective == "binary:logistic":
        link, n_outputs, labels = "sigmoid", 1, (0, 1) if classes is None else classes
        base = np.log(base / (1.0 - base))
    elif objective == "reg:squarederror":
        n_outputs = int(params.get("num_target", "1"))
        link, labels = "identity", ()
        base = np.broadcast_to(base, (n_outputs,)).copy()
    else:
        raise NotImplementedError(objective)
    tree_output = np.array(
        [-1 if width > 1 else info for width, info in zip(widths, gbtree["tree_info"])], dtype=np.int32
    )
    return TreeEnsemble(
        trees=trees,
        kind="boosted",
        link=link,
        n_outputs=n_outputs,
        feature_names=tuple(f"f{i}" for i in range(n_features)),
        tree_output=tree_output,
        base_score=base.astype(np.float64),
        classes=labels,
        metadata={"source": "xgboost", "objective": objective},
    )
