"""Export a boosted ``TreeEnsemble`` as XGBoost model JSON.

The aggregator hands finished federated boosters to XGBoost tooling this way
(``xgboost.Booster().load_model(bytearray(json_bytes))``). This module only writes JSON: it does
not import XGBoost (the aggregator and gateways need not install it); the tests check the output
against XGBoost 3.2, whose layout it follows (``version`` [3, 2, 0]; the per-class ``base_score``
vector needs XGBoost >= 3.1).

What is exported, and how
-------------------------
* ``kind="boosted"`` only. ``link`` picks the objective: ``softmax`` -> ``multi:softprob``
  (``num_class`` = ``n_outputs``), ``sigmoid`` -> ``binary:logistic``, ``identity`` ->
  ``reg:squarederror`` (``num_target`` = ``n_outputs``). Forests and single trees are refused:
  XGBoost sums trees and applies its own link, which is not an average of leaf vectors.
* Scalar leaves: ``tree_output[t] = k`` becomes ``tree_info[t] = k``; a ``tree_output = -1``
  tree with ``n_outputs == 1`` has scalar leaves too (class 0).
* Vector leaves (``tree_output = -1`` with ``n_outputs > 1``, FedSCS-XGB's
  ``multi_strategy="multi_output_tree"``) become XGBoost's multi-target trees, as its
  ``multi_strategy="multi_output_tree"`` writes them: ``size_leaf_vector`` = ``n_outputs``,
  ``base_weights`` every node's vector, ``leaf_weights`` the leaves' vectors in node order with
  each leaf's ``right_children`` entry its row there, root parent -1, ``tree_info`` 0, one tree
  per round. A model mixing vector-leaf and scalar-leaf trees is refused (XGBoost's models are
  one or the other).
* Tree order is kept (exported tree ``t`` is our tree ``t``). ``iteration_indptr`` groups
  consecutive trees into boosting rounds: a round ends just before a tree whose class already
  occurs in it, so the usual layout (tree ``t`` has class ``t % n_classes``) gives XGBoost's own
  rounds (a vector-leaf tree is a round of its own). XGBoost's prediction only uses
  ``tree_info``; the rounds matter for slicing.
* Nodes are renumbered breadth-first (root 0, children of a node consecutive: right = left + 1,
  as XGBoost lays trees out). Error messages name *our* node ids.
* Numbers: XGBoost holds every float as float32 and compares ``x < split_condition`` in float32,
  with the input rounded to float32 first. Floats are written as JSON floats (``0.0``, never
  ``0``), each the float64 spelling of a float32 value, so any JSON reader (float64 then float32,
  or straight to float32 as XGBoost does) gets the same float32.

  - Thresholds must be float32 values, or the caller must accept their rounding: a threshold
    between two float32 values is refused (``XGBoostExportError`` naming tree and node) unless
    ``round_thresholds=True``, which rounds it *up* to the next float32 ``t'``. Our engine's
    split rule compares ``float32(x)`` too (``shared.model.inference``), and for a float32 ``x``
    ``x < t`` iff ``x < t'``, so the rounded model routes every input, float32 or float64, as
    ours does. A threshold beyond the float32 range is refused either way.
  - Leaf values, ``base_weights`` (our per-node ``value``), covers (``sum_hessian``) and base
    scores are rounded to the nearest float32, as XGBoost would on loading. A value beyond the
    float32 range is refused. XGBoost then sums margins in float32, so parity with
    ``predict_margin`` is to float32 rounding: ~1e-7 relative per addition (well within 1e-6
    absolute for margins of ordinary size).
  - ``loss_changes`` are not kept by our format: written as 0.0. ``sum_hessian`` is ``cover``,
    or 0.0 where the tree has none.
* ``base_score`` (XGBoost 3.x keeps it in output space, as a string holding a vector):

  - ``multi:softprob``: our per-class ``base_score`` vector, which XGBoost adds to the
    margins as is.
  - ``reg:squarederror``: the per-target vector, likewise.
  - ``binary:logistic``: a *probability* ``p``; XGBoost adds the margin
    ``-logf(1.0f / p - 1.0f)`` computed in float32. We search the float32 values around
    ``sigmoid(base margin)`` for the ``p`` whose float32 margin (emulated exactly as XGBoost
    computes it, including its clamp of ``p`` to ``[1e-6, 1 - 1e-6]``) is nearest ours.
    Float32 probabilities are coarse near 1, so for positive margins the best ``p`` can still
    miss (margin 4: by 1.9e-6; 8: 2.3e-5), and the clamp puts margins outside about
    [-13.82, 13.75] out of reach (the clamp's end is used). When the best ``p`` misses by
    more than the float32 rounding of the margin itself (``2**-24 * max(1, |margin|)``), the
    remainder is added to every node value of tree 0, so the sum is right again; the exported
    tree 0 then differs from ours by that remainder (~1e-7 to 1e-5 for ordinary margins).
    Negative margins and those near 0 are usually hit within float32 rounding, and then the
    trees are written unchanged.
* A model without trees is written with one single-leaf tree of value 0 (class 0): XGBoost 3.2
  predicts a tree-less booster's ``base_score`` untransformed (a logistic ``p`` as the margin).
* Categorical splits are refused: XGBoost sends its category set right and *truncates*
  non-integer inputs to a category, where our format sends non-codes right, so the exported
  model would not predict identically for every input.
* ``feature_names=True`` writes our names (and ``feature_types`` ``float``) into the model;
  XGBoost then checks the names of every ``DMatrix`` it predicts on, so a plain numpy
  ``DMatrix(X)`` is refused. By default they are only kept in the learner's ``attributes``
  (``wheelfed_feature_names``), along with ``wheelfed_classes`` (JSON list: class ``k`` of
  ``multi:softprob`` is ``classes[k]``; for ``binary:logistic`` the probability is of
  ``classes[1]``) and ``wheelfed_feature_set_version``.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import ModelValidationError
from .tree import Tree

if TYPE_CHECKING:
    from .ensemble import TreeEnsemble

#: The XGBoost release whose JSON layout is written (and against which the tests check it).
XGBOOST_VERSION = (3, 2, 0)
#: ``parents`` entry of a root node in XGBoost's JSON.
ROOT_PARENT = 2147483647
OBJECTIVES = {"softmax": "multi:softprob", "sigmoid": "binary:logistic", "identity": "reg:squarederror"}
_SEARCH_STEPS = 16  # float32 neighbours of sigmoid(margin) tried on each side
_P_MIN, _P_MAX = np.float32(1e-6), np.float32(1 - 1e-6)  # XGBoost 3.2 clamps logistic base_score


class XGBoostExportError(ModelValidationError):
    """A valid ensemble that XGBoost's model JSON cannot reproduce exactly (a ``ValueError``)."""


def to_xgboost_json(ensemble: TreeEnsemble, *, round_thresholds: bool = False, feature_names: bool = False) -> bytes:
    """The ensemble as XGBoost model JSON (UTF-8 bytes) for ``Booster().load_model(bytearray(...))``.

    Only boosted ensembles with numeric-split trees, all with scalar or all with vector leaves,
    are exported; see the module docstring for the conventions. ``round_thresholds=True`` rounds thresholds that are not
    float32 values up to the next float32 (the same routes for every input, under the split rule
    of comparing ``float32(x)``); otherwise such a model raises
    ``XGBoostExportError``. ``feature_names=True`` writes the feature names into the model
    (XGBoost then requires them on every ``DMatrix``).
    """
    if ensemble.kind != "boosted":
        raise XGBoostExportError(
            f"only boosted ensembles map to XGBoost; this one is {ensemble.kind!r} (XGBoost sums "
            "trees, it does not average leaf vectors)",
            field="kind",
        )
    objective = OBJECTIVES[ensemble.link]
    n_outputs = ensemble.n_outputs
    trees = list(ensemble.trees)
    vector = _vector_leaves(ensemble)
    tree_info = [0 if vector else _tree_class(ensemble, t) for t in range(len(trees))]
    for index, tree in enumerate(trees):
        if tree.is_categorical.any():
            node = int(np.flatnonzero(tree.is_categorical)[0])
            raise XGBoostExportError(
                "categorical splits are not exported: XGBoost sends its category set right and "
                "truncates non-integer inputs to a code, so it would route some inputs differently",
                tree=index,
                node=node,
                field="is_categorical",
            )
    if not trees:  # XGBoost treats a tree-less booster as untrained (see the module docstring)
        trees, tree_info = [Tree.leaf(0.0)], [0]

    base = np.asarray(ensemble.base_score, dtype=np.float64)
    shift = 0.0  # added to every node value of tree 0 (logistic base-margin remainder)
    if objective == "binary:logistic":
        p, achieved = logistic_base_score(float(base[0]))
        remainder = float(base[0]) - achieved
        if abs(remainder) > 2.0**-24 * max(1.0, abs(float(base[0]))):
            shift = remainder
        base_values = [float(p)]
    else:
        base_values = _f32_array(base, "base_score", None, None).tolist()

    n_features = ensemble.n_features
    tree_docs = [
        _tree_json(tree, index, n_features, round_thresholds, shift if index == 0 else 0.0, vector)
        for index, tree in enumerate(trees)
    ]
    doc = {
        "learner": {
            "attributes": _attributes(ensemble),
            "feature_names": list(ensemble.feature_names) if feature_names else [],
            "feature_types": ["float"] * n_features if feature_names else [],
            "gradient_booster": {
                "model": {
                    "cats": {"enc": [], "feature_segments": [], "sorted_idx": []},
                    "gbtree_model_param": {"num_parallel_tree": "1", "num_trees": str(len(tree_docs))},
                    "iteration_indptr": list(range(len(tree_docs) + 1)) if vector else _iteration_indptr(tree_info),
                    "tree_info": tree_info,
                    "trees": tree_docs,
                },
                "name": "gbtree",
            },
            "learner_model_param": {
                "base_score": "[" + ",".join(repr(v) for v in base_values) + "]",
                "boost_from_average": "1",
                "num_class": str(n_outputs) if objective == "multi:softprob" else "0",
                "num_feature": str(n_features),
                "num_target": str(n_outputs) if objective == "reg:squarederror" else "1",
            },
            "objective": _objective(objective, n_outputs),
        },
        "version": list(XGBOOST_VERSION),
    }
    return json.dumps(doc, allow_nan=False, separators=(",", ":")).encode("utf-8")


# --- base score ----------------------------------------------------------------------------------
def xgboost_logistic_margin(p: np.ndarray) -> np.ndarray:
    """The margin XGBoost 3.2 adds for a ``binary:logistic`` base_score ``p`` (float32 array):
    ``p`` clamped to ``[1e-6, 1 - 1e-6]`` (as float32), then ``-logf(1.0f / p - 1.0f)``, every
    step in float32 (logf correctly rounded). Checked against XGBoost in the tests."""
    p = np.clip(np.asarray(p, dtype=np.float32), _P_MIN, _P_MAX)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        q = np.float32(1.0) / p - np.float32(1.0)
        return (-np.log(q.astype(np.float64))).astype(np.float32)


def logistic_base_score(margin: float) -> tuple[np.float32, float]:
    """The float32 probability whose XGBoost margin is nearest ``margin``, and that margin.
    Searches the float32 neighbours of ``sigmoid(margin)`` inside XGBoost's clamp
    ``[1e-6, 1 - 1e-6]`` (the clamp's ends serve margins beyond it)."""
    if margin >= 0:
        target = 1.0 / (1.0 + math.exp(-margin))
    else:
        e = math.exp(margin)
        target = e / (1.0 + e)
    centre = np.array([target], dtype=np.float32).view(np.int32)[0]
    steps = np.arange(-_SEARCH_STEPS, _SEARCH_STEPS + 1)
    steps = steps[np.argsort(np.abs(steps), kind="stable")]  # ties go to the nearest neighbour
    bits = np.clip(centre.astype(np.int64) + steps, 0, np.iinfo(np.int32).max).astype(np.int32)
    candidates = np.append(bits.view(np.float32), [_P_MIN, _P_MAX]).astype(np.float32)
    candidates = candidates[(candidates >= _P_MIN) & (candidates <= _P_MAX)]
    achieved = xgboost_logistic_margin(candidates).astype(np.float64)
    error = np.where(np.isfinite(achieved), np.abs(achieved - margin), np.inf)
    best = int(np.argmin(error))
    return candidates[best], float(achieved[best])


# --- trees ---------------------------------------------------------------------------------------
def _vector_leaves(ensemble: TreeEnsemble) -> bool:
    """Whether the trees have vector leaves (all of them; a mixture is refused)."""
    vector = (np.asarray(ensemble.tree_output) == -1) & (ensemble.n_outputs > 1)
    if vector.any() and not vector.all():
        raise XGBoostExportError(
            f"mixes vector-leaf trees (tree_output -1, {ensemble.n_outputs} outputs) with scalar-leaf ones; "
            "an XGBoost model holds one kind",
            tree=int(np.flatnonzero(~vector)[0]),
            field="tree_output",
        )
    return bool(vector.any())


def _tree_class(ensemble: TreeEnsemble, index: int) -> int:
    output = int(ensemble.tree_output[index])
    return output if output >= 0 else 0


def breadth_first_order(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Old node ids in breadth-first order, each node's children adjacent (left, right)."""
    order = [np.zeros(1, dtype=np.int64)]
    frontier = order[0]
    while frontier.size:
        inner = frontier[left[frontier] >= 0]
        frontier = np.stack([left[inner], right[inner]], axis=1).ravel().astype(np.int64)
        order.append(frontier)
    return np.concatenate(order)


def _tree_json(
    tree: Tree, index: int, n_features: int, round_thresholds: bool, shift: float, vector: bool
) -> dict[str, Any]:
    n = tree.n_nodes
    order = breadth_first_order(tree.left, tree.right)  # order[new] = old
    new_id = np.empty(n, dtype=np.int64)
    new_id[order] = np.arange(n)
    old_left, old_right = tree.left[order].astype(np.int64), tree.right[order].astype(np.int64)
    internal = old_left >= 0
    left = np.where(internal, new_id[np.maximum(old_left, 0)], -1)
    right = np.where(internal, new_id[np.maximum(old_right, 0)], -1)
    parents = np.full(n, ROOT_PARENT, dtype=np.int64)
    parents[left[internal]] = np.flatnonzero(internal)
    parents[right[internal]] = np.flatnonzero(internal)

    thresholds = _f32_thresholds(tree.threshold[order], internal, order, index, round_thresholds)
    cover = np.zeros(n) if tree.cover is None else _f32_array(tree.cover[order], "cover", index, order)
    doc: dict[str, Any] = {
        "categories": [],
        "categories_nodes": [],
        "categories_segments": [],
        "categories_sizes": [],
        "default_left": (tree.default_left[order] & internal).astype(int).tolist(),
        "id": index,
        "left_children": left.tolist(),
        "loss_changes": [0.0] * n,
        "split_indices": np.where(internal, tree.feature[order], 0).tolist(),
        "split_type": [0] * n,
        "sum_hessian": cover.tolist(),
        "tree_param": {
            "num_deleted": "0",
            "num_feature": str(n_features),
            "num_nodes": str(n),
            "size_leaf_vector": str(tree.n_outputs if vector else 1),
        },
    }
    if not vector:
        values = _f32_array(tree.value[order, 0] + shift, "value", index, order)
        return doc | {
            "base_weights": values.tolist(),
            "parents": parents.tolist(),
            "right_children": right.tolist(),
            "split_conditions": np.where(internal, thresholds, values).tolist(),
        }
    # XGBoost's multi-target layout (module docstring): a leaf's right child is its leaf row.
    width = tree.n_outputs
    values = _f32_array(tree.value[order].ravel(), "value", index, np.repeat(order, width)).reshape(n, width)
    leaves = np.flatnonzero(~internal)
    leaf_row = np.zeros(n, dtype=np.int64)
    leaf_row[leaves] = np.arange(leaves.shape[0])
    return doc | {
        "base_weights": values.ravel().tolist(),
        "leaf_weights": values[leaves].ravel().tolist(),
        "parents": np.where(parents == ROOT_PARENT, -1, parents).tolist(),
        "right_children": np.where(internal, right, leaf_row).tolist(),
        "split_conditions": np.where(internal, thresholds, 0.0).tolist(),
    }


def _f32_array(values: np.ndarray, name: str, tree: int | None, order: np.ndarray | None) -> np.ndarray:
    """Nearest float32 values (as float64), refusing values beyond the float32 range."""
    with np.errstate(over="ignore"):
        rounded = np.asarray(values, dtype=np.float64).astype(np.float32).astype(np.float64)
    bad = ~np.isfinite(rounded)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        node = None if order is None else int(order[j])
        where = f"entry {j}: " if order is None else ""
        raise XGBoostExportError(
            f"{where}{float(np.asarray(values)[j])!r} is beyond the float32 range XGBoost stores",
            tree=tree,
            node=node,
            field=name,
        )
    return rounded


def _f32_thresholds(
    threshold: np.ndarray, internal: np.ndarray, order: np.ndarray, index: int, round_up: bool
) -> np.ndarray:
    """Split thresholds as float32 values (leaf entries: 0.0); see the module docstring."""
    threshold = np.where(internal, threshold, 0.0)
    with np.errstate(over="ignore"):
        nearest = threshold.astype(np.float32)
        below = np.where(nearest.astype(np.float64) > threshold, np.nextafter(nearest, np.float32(-np.inf)), nearest)
        up = np.where(nearest.astype(np.float64) < threshold, np.nextafter(nearest, np.float32(np.inf)), nearest)
    beyond = ~np.isfinite(up)
    if beyond.any():
        j = int(np.flatnonzero(beyond)[0])
        raise XGBoostExportError(
            f"threshold {float(threshold[j])!r} is beyond the float32 range XGBoost stores",
            tree=index,
            node=int(order[j]),
            field="threshold",
        )
    inexact = up.astype(np.float64) != threshold
    if inexact.any() and not round_up:
        j = int(np.flatnonzero(inexact)[0])
        raise XGBoostExportError(
            f"threshold {float(threshold[j])!r} is not a float32 value (neighbours {float(below[j])!r} and "
            f"{float(up[j])!r}); XGBoost compares in float32, so some inputs would take another branch. "
            "Build the model with float32 thresholds, or pass round_thresholds=True (rounds up: the same "
            "routes for every input, compared as float32)",
            tree=index,
            node=int(order[j]),
            field="threshold",
        )
    return up.astype(np.float64)


# --- model level ---------------------------------------------------------------------------------
def _iteration_indptr(tree_info: list[int]) -> list[int]:
    """Round boundaries: a new round starts at a tree whose class the current round already has."""
    indptr = [0]
    seen: set[int] = set()
    for position, cls in enumerate(tree_info):
        if cls in seen:
            indptr.append(position)
            seen = set()
        seen.add(cls)
    indptr.append(len(tree_info))
    return indptr


def _objective(name: str, n_outputs: int) -> dict[str, Any]:
    if name == "multi:softprob":
        return {"name": name, "softmax_multiclass_param": {"num_class": str(n_outputs)}}
    return {"name": name, "reg_loss_param": {"scale_pos_weight": "1"}}


def _attributes(ensemble: TreeEnsemble) -> dict[str, str]:
    attributes = {"wheelfed_feature_names": json.dumps(list(ensemble.feature_names))}
    if ensemble.classes:
        attributes["wheelfed_classes"] = json.dumps(list(ensemble.classes))
    if ensemble.feature_set_version:
        attributes["wheelfed_feature_set_version"] = ensemble.feature_set_version
    return attributes
