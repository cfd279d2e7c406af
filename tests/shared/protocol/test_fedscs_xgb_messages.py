"""FedSCS-XGB's message schemas (and the generic ``DataSummary`` every job opens with) reject malformed replies with
an error naming the problem.

Each case takes a valid encoded reply, breaks one thing at the wire level (as a buggy or hostile
gateway could), and checks that decoding raises a ``SchemaError`` saying what is wrong -- the
round engine then counts a rejection and the reply never reaches the server's maths.
"""

from __future__ import annotations

import numpy as np
import pytest

from shared.protocol import errors
from shared.protocol.codec import dumps_value, loads_value
from shared.protocol.envelope import Message, decode_message, encode_message
from shared.protocol.messages import DataSummary
from shared.protocol.messages import fedscs_xgb as m
from shared.protocol.schema import to_wire
from tests.shared.protocol.test_fuzz import fedscs_xgb_examples


def example(cls):
    return next(b for b in fedscs_xgb_examples() if type(b) is cls)


def broken(body, mutate) -> bytes:
    wire = loads_value(encode_message(Message.create(body, sender="gw-1", job="j", round=3)))
    mutate(wire["body"])
    return dumps_value(wire)


def test_examples_round_trip_bit_exactly() -> None:
    for body in fedscs_xgb_examples():
        back = decode_message(encode_message(Message.create(body, sender="gw-1"))).body
        assert type(back) is type(body)
        assert dumps_value(to_wire(back)) == dumps_value(to_wire(body))


ATOM_CASES = [
    (lambda b: b.update(counts=np.array([1, -2], np.int64)), "every atom must count at least one sample"),
    (lambda b: b.update(counts=np.array([1, 2, 3], np.uint32)), "counts has 3 entries, expected 2"),
    (lambda b: b.update(hess=-np.ones((2, 3))), "hess must be >= 0"),
    (lambda b: b.update(grad=np.array([[np.nan, 0, 0], [0, 0, 0]])), "NaN or infinity"),
    (lambda b: b.update(hess=np.full((2, 3), np.inf)), "NaN or infinity"),
    (lambda b: b.update(grad=np.zeros((2, 2))), r"hess has shape \(2, 3\), grad \(2, 2\)"),
    (lambda b: b.update(keys=np.zeros((2, 2), np.int8)), "expected dtype in"),
    (lambda b: b.update(keys=np.zeros(4, np.uint8)), "expected a 2-d array"),
    (lambda b: b.update(n_samples=4), "the atoms count 3 samples, n_samples is 4"),
    (lambda b: b.update(loss_sum=-1.0), "loss_sum must be >= 0"),
    (lambda b: b.update(bins=np.zeros(2)), "body.bins: unexpected field"),
    (lambda b: b.pop("grad"), "body.grad: required field is missing"),
]


@pytest.mark.parametrize(("mutate", "reason"), ATOM_CASES)
def test_malformed_atom_replies_are_rejected(mutate, reason: str) -> None:
    with pytest.raises(errors.SchemaError, match=reason):
        decode_message(broken(example(m.XgbAtomReply), mutate))


SKETCH_CASES = [
    (lambda b: b["summary"].update(count=np.array([1, -1], np.int64)), "count must be >= 0"),
    (lambda b: b["summary"].update(total_weight=np.array([1.0])), "total_weight has 1 entries, expected 2"),
    (lambda b: b["summary"].update(points=np.full((2, 3), np.nan)), "NaN or infinity"),
    (lambda b: b.update(ddsketch=b["summary"]), "body.ddsketch.points: unexpected field"),
    (lambda b: b.pop("summary"), "exactly one of summary and ddsketch"),
    (lambda b: b["summary"].update(extra=1), "body.summary.extra: unexpected field"),
]


@pytest.mark.parametrize(("mutate", "reason"), SKETCH_CASES)
def test_malformed_sketch_replies_are_rejected(mutate, reason: str) -> None:
    body = next(b for b in fedscs_xgb_examples() if isinstance(b, m.XgbSketchReply) and b.summary is not None)
    with pytest.raises(errors.SchemaError, match=reason):
        decode_message(broken(body, mutate))


DDSKETCH_CASES = [
    (lambda b: b["ddsketch"].update(pos_offsets=np.array([0, 2, 1])), "pos_offsets must rise from 0"),
    (lambda b: b["ddsketch"].update(pos_weights=np.array([-1.0])), "pos_weights must be >= 0"),
    (lambda b: b["ddsketch"].update(count=np.ones(3, np.int64)), "count has 3 entries, expected 2"),
]


@pytest.mark.parametrize(("mutate", "reason"), DDSKETCH_CASES)
def test_malformed_ddsketch_replies_are_rejected(mutate, reason: str) -> None:
    body = next(b for b in fedscs_xgb_examples() if isinstance(b, m.XgbSketchReply) and b.ddsketch is not None)
    with pytest.raises(errors.SchemaError, match=reason):
        decode_message(broken(body, mutate))


SETUP_CASES = [
    (lambda b: b.update(moments=np.zeros((3, 3))), r"moments must have shape \(3, 2\)"),
    (lambda b: b.update(label_counts=np.array([2, -3])), "label_counts must be >= 0"),
    (lambda b: b.update(label_counts=np.array([20, 3])), "label_counts sum to more than n_samples"),
    (lambda b: b.update(labels=["a", "a"]), "labels must be unique"),
    (lambda b: b.update(feature_names=["x"]), "1 feature names for 2 features"),
    (lambda b: b.update(minimum=np.zeros(3)), r"minimum and maximum must have shape \(2,\)"),
    (lambda b: b.update(maximum=np.array([np.inf, 0.0])), "NaN or infinity"),
]


@pytest.mark.parametrize(("mutate", "reason"), SETUP_CASES)
def test_malformed_data_summaries_are_rejected(mutate, reason: str) -> None:
    with pytest.raises(errors.SchemaError, match=reason):
        decode_message(broken(example(DataSummary), mutate))


def test_requests_are_checked_too() -> None:
    request = example(m.XgbAtomRequest)
    with pytest.raises(errors.SchemaError, match="edge_offsets has 2 entries, expected 3"):
        decode_message(broken(request, lambda b: b.update(edge_offsets=np.array([0, 2]))))
    with pytest.raises(errors.SchemaError, match="NaN or infinity"):
        decode_message(broken(request, lambda b: b.update(edge_values=np.array([0.5, np.inf], np.float32))))
    with pytest.raises(errors.SchemaError, match=r"base_score must have shape \(3,\)"):
        decode_message(broken(request, lambda b: b["task"].update(base_score=np.zeros(2))))
    with pytest.raises(errors.SchemaError, match="logistic needs exactly two classes"):
        decode_message(broken(request, lambda b: b["task"].update(objective="logistic")))
    sketch = example(m.XgbSketchRequest)
    with pytest.raises(errors.SchemaError, match="a ddsketch request needs centers and scales"):
        decode_message(broken(sketch, lambda b: b.update(sketch="ddsketch")))
    assert np.array_equal(request.edges()[1], np.array([1.5], np.float32))
