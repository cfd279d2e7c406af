"""dict / JSON / CBOR round trips are bit-exact, and from_dict refuses every malformed input."""

from __future__ import annotations

import copy
import importlib.util
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.model import (
    FORMAT_NAME,
    ModelValidationError,
    TreeBuilder,
    TreeEnsemble,
    from_cbor,
    from_dict,
    from_json,
    to_cbor,
    to_dict,
    to_json,
)
from tests.shared.model.strategies import X_VALUES, ensembles

WIRE_DTYPES = {
    np.dtype(d)
    for d in ("uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16", "float32", "float64")
}
codec_missing = (
    importlib.util.find_spec("shared.protocol") is None or importlib.util.find_spec("shared.protocol.codec") is None
)


def assert_identical(a: TreeEnsemble, b: TreeEnsemble, X: np.ndarray) -> None:
    assert a == b  # bit-exact, dtypes included
    for ta, tb in zip(a.trees, b.trees):
        for name in (
            "feature",
            "threshold",
            "left",
            "right",
            "default_left",
            "value",
            "is_categorical",
            "cat_offsets",
            "cat_values",
        ):
            x, y = getattr(ta, name), getattr(tb, name)
            assert x.dtype == y.dtype and np.array_equal(x, y) and x.tobytes() == y.tobytes()
    assert [type(c) for c in a.classes] == [type(c) for c in b.classes]
    np.testing.assert_array_equal(a.predict_raw(X), b.predict_raw(X))
    np.testing.assert_array_equal(a.leaves(X), b.leaves(X))


def probe(model: TreeEnsemble) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.choice(np.array(X_VALUES), size=(20, model.n_features))


def walk_arrays(obj: Any):
    if isinstance(obj, np.ndarray):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from walk_arrays(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from walk_arrays(value)


@settings(max_examples=120, deadline=None)
@given(ensembles())
def test_dict_and_json_round_trips_are_bit_exact(model: TreeEnsemble) -> None:
    data = to_dict(model)
    assert all(array.dtype in WIRE_DTYPES for array in walk_arrays(data))
    assert_identical(model, from_dict(data), probe(model))
    text = to_json(model)
    json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}"))
    assert_identical(model, from_json(text), probe(model))
    assert_identical(model, TreeEnsemble.from_json(model.to_json(indent=1)), probe(model))


@pytest.mark.skipif(codec_missing, reason="shared.protocol.codec is not importable yet")
@settings(max_examples=40, deadline=None)
@given(ensembles())
def test_cbor_round_trip_is_bit_exact(model: TreeEnsemble) -> None:
    assert_identical(model, from_cbor(to_cbor(model)), probe(model))
    assert_identical(model, TreeEnsemble.from_cbor(model.to_cbor()), probe(model))


@pytest.mark.skipif(codec_missing, reason="shared.protocol.codec is not importable yet")
def test_cbor_size_limit_and_hostile_content() -> None:
    from shared.protocol.codec import dumps_value
    from shared.protocol.errors import DecodeError

    model = sample_model()
    data = to_cbor(model)
    with pytest.raises(DecodeError):
        from_cbor(data, max_bytes=len(data) - 1)
    assert from_cbor(data, max_bytes=len(data)) == model
    hostile = to_dict(model)
    hostile["trees"][0] = dict(hostile["trees"][0], left=np.array([1, 0, -1, -1, -1], dtype=np.int32))
    with pytest.raises(ModelValidationError, match="root is a child"):
        from_cbor(dumps_value(hostile))


def sample_model() -> TreeEnsemble:
    builder = TreeBuilder([0.0, 0.0, 0.0], root_cover=3.0)
    builder.split(
        0, 0, 0.1, left_value=[0.1, 0.2, 0.7], right_value=[-0.0, 1e-300, 1.0], left_cover=1.0, right_cover=2.0
    )
    builder.split(
        1,
        1,
        categories=[0, 4],
        left_value=[1 / 3, 2 / 3, 0.0],
        right_value=[0.5, 0.25, 0.25],
        left_cover=0.5,
        right_cover=0.5,
    )
    tree = builder.build()
    return TreeEnsemble(
        trees=(tree, tree),
        kind="forest",
        link="identity",
        n_outputs=3,
        feature_names=("acc_mean", "side"),
        feature_set_version="fs-3",
        classes=("rest", "push", "turn"),
        metadata={"round": 4, "eta": 0.1, "algo": "fedforest"},
    )


def test_dict_layout() -> None:
    data = to_dict(sample_model())
    assert data["format"] == FORMAT_NAME and data["version"] == 1
    tree = data["trees"][0]
    assert set(tree) == {
        "feature",
        "threshold",
        "left",
        "right",
        "default_left",
        "value",
        "is_categorical",
        "cat_offsets",
        "cat_values",
        "cover",
    }
    assert tree["default_left"].dtype == np.uint8 and tree["value"].shape == (5, 3)
    no_cover = {k: v for k, v in tree.items() if k != "cover"}
    assert "cover" not in to_dict(TreeEnsemble.from_dict({**data, "trees": [no_cover, no_cover]}))["trees"][0]
    json.loads(to_json(sample_model()))  # plain JSON


def mutate(data: dict, path: tuple, value: Any) -> dict:
    data = copy.deepcopy(data)
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        if isinstance(target, dict):
            target.pop(path[-1], None)
        else:
            del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


DELETE = object()
I32 = np.int32

BAD_DICTS = {
    "not a dict": ((), [1, 2], "model must be a dict"),
    "missing key": (("kind",), DELETE, r"missing keys \['kind'\]"),
    "extra key": (("extra",), 1, r"unexpected keys \['extra'\]"),
    "format": (("format",), "xgboost", "expected 'wheelfed.tree-ensemble'"),
    "format array": (("format",), np.zeros(2), "expected 'wheelfed.tree-ensemble'"),
    "version": (("version",), 2, "unsupported version 2"),
    "version bool": (("version",), True, "unsupported version True"),
    "version str": (("version",), "1", "unsupported version '1'"),
    "kind type": (("kind",), 3, "field 'kind': expected str, got int"),
    "n_outputs bool": (("n_outputs",), True, "field 'n_outputs': expected int, got bool"),
    "n_outputs float": (("n_outputs",), 3.0, "expected int, got float"),
    "feature names str": (("feature_names",), "ab", "expected list or tuple"),
    "feature names ints": (("feature_names",), [1, 2], "non-empty strings"),
    "classes nested": (("classes",), [["a"], ["b"], ["c"]], "all str or all int"),
    "metadata list": (("metadata",), [], "expected dict"),
    "metadata nested": (("metadata",), {"a": {"b": 1}}, "metadata"),
    "trees dict": (("trees",), {}, "expected list or tuple"),
    "tree not dict": (("trees", 0), [1], "tree 0 must be a dict"),
    "tree missing key": (("trees", 1, "left"), DELETE, r"tree 1: missing keys \['left'\]"),
    "tree extra key": (("trees", 0, "gain"), np.zeros(5), r"unexpected keys \['gain'\]"),
    "tree list not array": (("trees", 0, "left"), [1, 3, -1, -1, -1], "expected a int32 array, got list"),
    "tree dtype": (("trees", 0, "left"), np.array([1, 3, -1, -1, -1]), "expected a 1-D int32 array, got 1-D int64"),
    "tree bool array": (
        ("trees", 0, "default_left"),
        np.zeros(5, dtype=bool),
        "expected a 1-D uint8 array, got 1-D bool",
    ),
    "tree flag 2": (("trees", 0, "default_left"), np.array([0, 2, 0, 0, 0], dtype=np.uint8), "flags must be 0 or 1"),
    "tree 2-D value flat": (("trees", 0, "value"), np.zeros(15), "expected a 2-D float64 array, got 1-D"),
    "tree float32 threshold": (("trees", 0, "threshold"), np.zeros(5, dtype=np.float32), "expected a 1-D float64"),
    "tree cycle": (("trees", 0, "left"), np.array([1, 0, -1, -1, -1], dtype=I32), "root is a child of node 1"),
    "tree short": (("trees", 0, "right"), np.array([2, 4, -1, -1], dtype=I32), r"shape is \(4,\), expected \(5,\)"),
    "tree nan value": (("trees", 0, "value"), np.full((5, 3), np.nan), "not finite"),
    "tree categories": (("trees", 0, "cat_values"), np.array([4, 0], dtype=I32), "sorted and unique"),
    "tree_output dtype": (
        ("tree_output",),
        np.array([-1, -1], dtype=np.int64),
        "field 'tree_output': expected a 1-D int32",
    ),
    "base_score list": (("base_score",), [0.0, 0.0, 0.0], "field 'base_score': expected a float64 array, got list"),
    "base_score shape": (("base_score",), np.zeros(2), r"expected float64 of shape \(3,\)"),
}


@pytest.mark.parametrize("case", list(BAD_DICTS), ids=list(BAD_DICTS))
def test_from_dict_refuses_malformed_data(case: str) -> None:
    path, value, message = BAD_DICTS[case]
    data = value if not path else mutate(to_dict(sample_model()), path, value)
    with pytest.raises(ModelValidationError, match=message):
        from_dict(data)


def test_from_dict_accepts_big_endian_and_read_only_arrays() -> None:
    data = to_dict(sample_model())
    data["base_score"] = np.zeros(3, dtype=">f8")
    tree = dict(data["trees"][0])
    tree["threshold"] = np.frombuffer(tree["threshold"].tobytes(), dtype=np.float64)  # read-only
    data["trees"] = [tree, tree]
    assert from_dict(data) == sample_model()


JUNK = st.sampled_from(
    [
        None,
        0,
        -1,
        2**80,
        1.5,
        float("nan"),
        "x",
        "",
        [],
        [1],
        {},
        {"a": 1},
        True,
        b"bytes",
        np.zeros(0),
        np.zeros(5, dtype=np.int32),
        np.zeros((5, 3)),
        np.ones(6, dtype=np.int64),
        np.full(5, -7, dtype=np.int32),
        np.array([np.inf]),
        np.zeros(5, dtype=np.uint8),
    ]
)


def _paths(data: dict) -> list[tuple]:
    paths: list[tuple] = [(key,) for key in data]
    trees = data.get("trees")
    for i, tree in enumerate(trees if isinstance(trees, list) else []):
        paths += [("trees", i)] + ([("trees", i, key) for key in tree] if isinstance(tree, dict) else [])
    return paths + [("unknown",)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_from_dict_never_fails_any_other_way(data: st.DataObject) -> None:
    original = to_dict(sample_model())
    model_dict = original
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(model_dict)))
        model_dict = mutate(model_dict, path, data.draw(JUNK | st.just(DELETE)))
    try:
        model = from_dict(model_dict)
    except ModelValidationError:
        return
    model.predict(probe(model))  # whatever got through must be usable


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not valid JSON"),
        ('{"a": NaN}', "JSON constant NaN"),
        ('[1, 2]', "model must be a dict"),
    ],
)
def test_from_json_refuses_bad_text(text: str, message: str) -> None:
    with pytest.raises(ModelValidationError, match=message):
        from_json(text)


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("trees", 0, "left"), [1.0, 3, -1, -1, -1], "expected int32 numbers, got float64"),
        (("trees", 0, "left"), [1, 3, -1, -1, 2**40], "outside the int32 range"),
        (("trees", 0, "left"), [1, 3, -1, -1, 2**70], "expected int32 numbers, got object"),
        (("trees", 0, "threshold"), [0.1, "x", 0, 0, 0], "expected float64 numbers"),
        (("trees", 0, "threshold"), [123456.5, 0, 0, 0, 0], "not finite"),  # written as 1e400 -> inf
        (("trees", 0, "value"), [[0, 0, 0], [0, 0]], "rectangular"),
        (("trees", 0, "default_left"), [True, False, False, False, False], "expected uint8 numbers, got bool"),
        (("tree_output",), "none", "expected a int32 array, got str"),
    ],
)
def test_from_json_checks_numbers(path: tuple, value: Any, message: str) -> None:
    data = json.loads(to_json(sample_model()))
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ModelValidationError, match=message):
        from_json(json.dumps(data).replace("123456.5", "1e400"))


def test_json_integers_in_float_fields_are_accepted() -> None:
    data = json.loads(to_json(sample_model()))
    data["trees"][0]["threshold"] = [0, 0, 0, 0, 0]
    assert from_json(json.dumps(data)).trees[0].threshold.dtype == np.float64
