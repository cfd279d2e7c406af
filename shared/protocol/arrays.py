"""numpy arrays as RFC 8746 typed arrays: bit-exact, little-endian, whitelisted dtypes.

An array travels as ``tag 40 [shape, tag T (bytes)]`` where tag 40 is RFC 8746's
"multi-dimensional array, row-major order" and ``T`` is the typed-array tag of the element type
(little-endian variants). Standard tags mean any CBOR tool can read our messages; bools and
object arrays have no tag and are refused, so callers convert bools to uint8 explicitly.
"""

from __future__ import annotations

import math

import cbor2
import numpy as np

from .errors import ArrayShapeMismatch, DisallowedDtype, ForbiddenTag
from .limits import DecodeLimits

MULTI_DIM_TAG = 40

#: RFC 8746 §2.1 little-endian typed-array tags for the whitelisted dtypes.
DTYPE_TO_TAG: dict[np.dtype, int] = {
    np.dtype("uint8"): 64,
    np.dtype("<u2"): 69,
    np.dtype("<u4"): 70,
    np.dtype("<u8"): 71,
    np.dtype("int8"): 72,
    np.dtype("<i2"): 77,
    np.dtype("<i4"): 78,
    np.dtype("<i8"): 79,
    np.dtype("<f2"): 84,
    np.dtype("<f4"): 85,
    np.dtype("<f8"): 86,
}
TAG_TO_DTYPE: dict[int, np.dtype] = {tag: dtype for dtype, tag in DTYPE_TO_TAG.items()}
ALLOWED_TAGS = frozenset(TAG_TO_DTYPE) | {MULTI_DIM_TAG}
#: RFC 8746 typed-array tags (64..87): the ones outside the whitelist are dtype refusals.
TYPED_ARRAY_TAGS = range(64, 88)


def array_to_tag(array: np.ndarray) -> cbor2.CBORTag:
    """Encode ``array`` as tag 40 [shape, typed array]; refuses dtypes outside the whitelist."""
    little = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    tag = DTYPE_TO_TAG.get(np.dtype(little))
    if tag is None:
        raise DisallowedDtype(
            f"cannot send a numpy array of dtype {array.dtype}: allowed are "
            f"{sorted(str(d) for d in DTYPE_TO_TAG)} (convert bools to uint8)"
        )
    data = np.ascontiguousarray(array, dtype=little).tobytes()
    return cbor2.CBORTag(MULTI_DIM_TAG, [list(array.shape), cbor2.CBORTag(tag, data)])


class _TypedBytes:
    """Intermediate result of an inner typed-array tag, resolved by its enclosing tag 40."""

    __slots__ = ("dtype", "data")

    def __init__(self, dtype: np.dtype, data: bytes) -> None:
        self.dtype = dtype
        self.data = data


def refuse_typed_array_tag(tag: int) -> DisallowedDtype:
    return DisallowedDtype(
        f"typed-array tag {tag} carries an element type outside the whitelist "
        f"(allowed tags: {sorted(TAG_TO_DTYPE)}: little-endian u/int 8-64, float 16-64)"
    )


class ArrayCounter:
    """Counts the arrays of one message against ``limits.max_arrays``."""

    def __init__(self, limits: DecodeLimits) -> None:
        self.limits = limits
        self.count = 0

    def __call__(self, tag: cbor2.CBORTag, _immutable: bool = False) -> object:
        if tag.tag == MULTI_DIM_TAG:
            self.count += 1
            if self.count > self.limits.max_arrays:
                raise ArrayShapeMismatch(f"message holds more than {self.limits.max_arrays} arrays")
        return decode_tag(tag, self.limits)


def decode_tag(tag: cbor2.CBORTag, limits: DecodeLimits) -> object:
    """``tag_hook`` body: turns whitelisted tags into arrays, rejects every other tag."""
    if tag.tag in TYPED_ARRAY_TAGS and tag.tag not in TAG_TO_DTYPE:
        raise refuse_typed_array_tag(tag.tag)
    if tag.tag in TAG_TO_DTYPE:
        if not isinstance(tag.value, bytes):
            raise ArrayShapeMismatch(f"typed-array tag {tag.tag} must wrap a byte string")
        return _TypedBytes(TAG_TO_DTYPE[tag.tag], tag.value)
    if tag.tag == MULTI_DIM_TAG:
        return _multi_dim(tag.value, limits)
    raise ForbiddenTag(f"CBOR tag {tag.tag} is not allowed (only RFC 8746 typed arrays are)")


def _multi_dim(value: object, limits: DecodeLimits) -> np.ndarray:
    if not (isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[0], (list, tuple))):
        raise ArrayShapeMismatch("tag 40 must wrap [shape, typed array]")
    shape, typed = value
    if not isinstance(typed, _TypedBytes):
        raise ArrayShapeMismatch("tag 40 must hold a typed array (RFC 8746 tag 64..86)")
    if not all(type(n) is int and n >= 0 for n in shape):
        raise ArrayShapeMismatch(f"array shape must be non-negative integers, got {shape!r}")
    if len(shape) > limits.max_ndim:
        raise ArrayShapeMismatch(f"array has {len(shape)} dimensions, limit {limits.max_ndim}")
    if math.prod(n for n in shape if n) > limits.max_array_elements:
        raise ArrayShapeMismatch(f"array shape {list(shape)} exceeds {limits.max_array_elements} elements")
    count = math.prod(shape)
    itemsize = typed.dtype.itemsize
    if count * itemsize != len(typed.data):
        raise ArrayShapeMismatch(
            f"array of shape {shape} and dtype {typed.dtype} needs {count * itemsize} bytes, got {len(typed.data)}"
        )
    return np.frombuffer(typed.data, dtype=typed.dtype).reshape(shape)


def reject_stray_typed_bytes(obj: object) -> None:
    """A typed-array tag outside tag 40 carries no shape; we never send one, so refuse it."""
    if isinstance(obj, _TypedBytes):
        raise ArrayShapeMismatch("typed-array tag outside tag 40 (shape missing)")
