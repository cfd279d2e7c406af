"""The hardened CBOR codec: bit-exact round trips and one test per hostile-input class."""

from __future__ import annotations

import cbor2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shared.protocol import errors
from shared.protocol.arrays import DTYPE_TO_TAG
from shared.protocol.codec import dumps_value, loads_value
from shared.protocol.limits import DecodeLimits

WHITELIST = sorted({d.newbyteorder("=") if d.byteorder != "|" else d for d in DTYPE_TO_TAG}, key=str)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
arrays_ = st.sampled_from(WHITELIST).flatmap(
    lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
)
values = st.recursive(
    st.one_of(scalars, arrays_),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def assert_same(a, b) -> None:
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()  # bit-exact, NaN payloads included
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b and type(a) is type(b)


@settings(max_examples=300, deadline=None)
@given(values)
def test_round_trip_is_bit_exact(value) -> None:
    assert_same(value, loads_value(dumps_value(value)))


def test_big_endian_and_non_contiguous_arrays_arrive_as_the_same_values() -> None:
    a = np.arange(24, dtype=">i4").reshape(4, 6)[:, ::2]
    back = loads_value(dumps_value(a))
    assert back.dtype == np.dtype("<i4") and np.array_equal(a, back)


def test_arrays_are_rfc8746_typed_arrays() -> None:
    raw = cbor2.loads(dumps_value(np.zeros((2, 3), np.float32)))
    assert raw.tag == 40 and list(raw.value[0]) == [2, 3] and raw.value[1].tag == 85


def test_bool_and_object_arrays_are_refused_on_encode() -> None:
    with pytest.raises(errors.DisallowedDtype, match="bool"):
        dumps_value(np.zeros(3, bool))
    with pytest.raises(errors.DisallowedDtype):
        dumps_value(np.array([1, "a"], dtype=object))


# -- hostile input: one test per class, each asserting its own exception -------------------


def test_size_limit_is_checked_before_parsing() -> None:
    with pytest.raises(errors.MessageTooLarge, match="exceeds the limit of 10 bytes"):
        loads_value(b"\xff" * 11, max_bytes=10)  # not even valid CBOR: never parsed


def test_depth_limit() -> None:
    deep = 1
    for _ in range(10):
        deep = [deep]
    with pytest.raises(errors.NestingTooDeep):
        loads_value(cbor2.dumps(deep), limits=DecodeLimits(max_depth=5))
    assert loads_value(cbor2.dumps(deep), limits=DecodeLimits(max_depth=16)) == deep


@pytest.mark.parametrize("hexdata", ["9f01ff", "bf616101ff", "5f4101ff", "7f6161ff"])
def test_indefinite_lengths_are_refused(hexdata: str) -> None:
    with pytest.raises(errors.IndefiniteLength):
        loads_value(bytes.fromhex(hexdata))


def test_duplicate_keys_are_refused() -> None:
    with pytest.raises(errors.DuplicateKey):
        loads_value(bytes.fromhex("a2616101616102"))  # {"a": 1, "a": 2}


def test_non_string_keys_are_refused() -> None:
    with pytest.raises(errors.NonStringKey):
        loads_value(cbor2.dumps({1: 2}))


@pytest.mark.parametrize("value", [2**64, -(2**64) - 1, cbor2.CBORTag(2, b"\x01\x00")])
def test_bignums_are_refused(value) -> None:
    with pytest.raises(errors.ForbiddenTag, match="bignum"):
        loads_value(cbor2.dumps(value))


@pytest.mark.parametrize("tag", [0, 1, 4, 5, 25, 28, 30, 37, 258, 999, 55799, 100000])
def test_tags_other_than_typed_arrays_are_refused(tag: int) -> None:
    with pytest.raises(errors.ForbiddenTag, match=f"tag {tag} "):
        loads_value(cbor2.dumps(cbor2.CBORTag(tag, "x")))


def test_undefined_and_simple_values_are_refused() -> None:
    for hexdata in ["f7", "f820", "81f7"]:
        with pytest.raises(errors.ForbiddenValue):
            loads_value(bytes.fromhex(hexdata))


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(errors.TrailingBytes, match="2 bytes"):
        loads_value(cbor2.dumps({"a": 1}) + b"\x00\x00")


@pytest.mark.parametrize("inner", [87, 65, 68, 81])  # float128 LE, uint16 BE, clamped uint8, float32 BE
def test_dtype_whitelist(inner: int) -> None:
    payload = cbor2.dumps(cbor2.CBORTag(40, [[1], cbor2.CBORTag(inner, b"\x00" * 16)]))
    with pytest.raises(errors.DisallowedDtype, match=f"typed-array tag {inner} "):
        loads_value(payload)


def test_array_byte_length_must_equal_shape_times_itemsize() -> None:
    payload = cbor2.dumps(cbor2.CBORTag(40, [[2, 3], cbor2.CBORTag(85, b"\x00" * 20)]))
    with pytest.raises(errors.ArrayShapeMismatch, match="needs 24 bytes, got 20"):
        loads_value(payload)


@pytest.mark.parametrize("shape", [[-1], [1.5], ["2"], [True], [None]])
def test_array_shapes_must_be_non_negative_ints(shape) -> None:
    payload = cbor2.dumps(cbor2.CBORTag(40, [shape, cbor2.CBORTag(85, b"\x00" * 8)]))
    with pytest.raises(errors.ArrayShapeMismatch, match="non-negative integers"):
        loads_value(payload)


@pytest.mark.parametrize("shape", [[0, 2**40], [0] + [2**26] * 4, [2**27, 0, 3]])
def test_zero_sized_axis_cannot_claim_absurd_other_axes(shape) -> None:
    payload = cbor2.dumps(cbor2.CBORTag(40, [shape, cbor2.CBORTag(85, b"")]))
    with pytest.raises(errors.ArrayShapeMismatch, match="exceeds"):
        loads_value(payload)


def test_array_dimensions_are_bounded() -> None:
    payload = cbor2.dumps(cbor2.CBORTag(40, [[1] * 70, cbor2.CBORTag(85, b"\x00" * 4)]))
    with pytest.raises(errors.ArrayShapeMismatch, match="70 dimensions"):
        loads_value(payload, limits=DecodeLimits(max_depth=100))


def test_array_count_is_bounded() -> None:
    many = [np.zeros(1, np.uint8)] * 50
    with pytest.raises(errors.ArrayShapeMismatch, match="more than 10 arrays"):
        loads_value(dumps_value(many), limits=DecodeLimits(max_arrays=10))
    assert len(loads_value(dumps_value(many), limits=DecodeLimits(max_arrays=50))) == 50


def test_typed_array_outside_tag_40_is_refused() -> None:
    with pytest.raises(errors.ArrayShapeMismatch, match="shape missing"):
        loads_value(cbor2.dumps([cbor2.CBORTag(85, b"\x00" * 4)]))


@pytest.mark.parametrize(
    "data", [b"", b"\x1c", b"\x62\xff\xff", cbor2.dumps({"a": "hello"})[:-2], bytes.fromhex("5b7fffffffffffffff00")]
)
def test_malformed_cbor(data: bytes) -> None:
    with pytest.raises(errors.MalformedCBOR):
        loads_value(data)


def test_every_rejection_is_a_decode_error() -> None:
    for cls in [
        errors.MessageTooLarge,
        errors.MalformedCBOR,
        errors.NestingTooDeep,
        errors.IndefiniteLength,
        errors.DuplicateKey,
        errors.ForbiddenTag,
        errors.TrailingBytes,
        errors.DisallowedDtype,
        errors.ArrayShapeMismatch,
        errors.SchemaError,
        errors.UnsupportedVersion,
        errors.UnknownMessageType,
        errors.ChunkError,
        errors.ForbiddenValue,
        errors.NonStringKey,
    ]:
        assert issubclass(cls, errors.DecodeError)
