"""Brute-force reference predictions: one row, one tree, one node at a time, in plain Python.

Written straight from the routing rules in ``shared/model/tree.py`` and the ensemble rules in
``shared/model/ensemble.py``, sharing no code with the vectorised engine.
"""

from __future__ import annotations

import math

import numpy as np

from shared.model import Tree, TreeEnsemble


def route(tree: Tree, row: np.ndarray) -> int:
    node = 0
    while tree.left[node] != -1:
        x = float(row[tree.feature[node]])
        if math.isnan(x):
            go_left = bool(tree.default_left[node])
        elif tree.is_categorical[node]:
            is_code = math.isfinite(x) and x >= 0 and x.is_integer() and x <= 2**31 - 1
            go_left = is_code and int(x) in set(tree.categories(node).tolist())
        else:
            go_left = x < float(tree.threshold[node])
        node = int(tree.left[node] if go_left else tree.right[node])
    return node


def leaves(ensemble: TreeEnsemble, X: np.ndarray) -> np.ndarray:
    return np.array([[route(tree, row) for tree in ensemble.trees] for row in X], dtype=np.int64).reshape(
        len(X), ensemble.n_trees
    )


def raw(ensemble: TreeEnsemble, X: np.ndarray) -> np.ndarray:
    out = np.zeros((len(X), ensemble.n_outputs))
    for i, row in enumerate(X):
        total = [0.0] * ensemble.n_outputs
        for tree, output in zip(ensemble.trees, ensemble.tree_output):
            leaf = tree.value[route(tree, row)]
            if output >= 0:
                total[output] += float(leaf[0])
            else:
                for k in range(ensemble.n_outputs):
                    total[k] += float(leaf[k])
        for k in range(ensemble.n_outputs):
            if ensemble.kind == "boosted":
                out[i, k] = float(ensemble.base_score[k]) + total[k]
            elif ensemble.kind == "forest":
                out[i, k] = total[k] / ensemble.n_trees
            else:
                out[i, k] = total[k]
    return out


def proba(ensemble: TreeEnsemble, X: np.ndarray) -> np.ndarray:
    margin = raw(ensemble, X)
    if ensemble.kind != "boosted":
        return margin
    rows = []
    for m in margin:
        if ensemble.link == "sigmoid":
            p = 1.0 / (1.0 + math.exp(-m[0])) if m[0] >= 0 else math.exp(m[0]) / (1.0 + math.exp(m[0]))
            rows.append([1.0 - p, p])
        else:
            top = max(m)
            e = [math.exp(v - top) for v in m]
            rows.append([v / sum(e) for v in e])
    return np.array(rows).reshape(len(X), -1)
