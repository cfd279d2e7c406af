"""Hardened CBOR encoding and decoding of plain values (dicts, lists, scalars, numpy arrays).

Decoding treats every byte as hostile. In order: the size limit is checked before parsing; the
CBOR is parsed with indefinite lengths, duplicate keys, non-string keys and every tag but RFC 8746
typed arrays refused and with a depth limit; trailing bytes after the first item are refused;
arrays must have whitelisted dtypes and exactly prod(shape) * itemsize bytes. Each failure raises
its own ``DecodeError`` subclass (see ``errors.py``). Message-level schemas live in ``envelope.py``.
"""

from __future__ import annotations

import io
from typing import Any

import cbor2
import numpy as np

from . import arrays
from .errors import (
    DecodeError,
    DuplicateKey,
    ForbiddenTag,
    ForbiddenValue,
    IndefiniteLength,
    MalformedCBOR,
    MessageTooLarge,
    NestingTooDeep,
    NonStringKey,
    TrailingBytes,
)
from .limits import DEFAULT_LIMITS, DecodeLimits


def _encode_default(encoder: cbor2.CBOREncoder, value: Any) -> None:
    if isinstance(value, np.ndarray):
        encoder.encode(arrays.array_to_tag(value))
    elif isinstance(value, np.generic):
        encoder.encode(value.item())
    else:
        raise TypeError(f"cannot encode {type(value).__name__} in a WheelFed message")


def dumps_value(obj: Any) -> bytes:
    """Encode ``obj`` (str-keyed dicts, lists, tuples, scalars, bytes, numpy arrays) as CBOR."""
    try:
        return cbor2.dumps(obj, default=_encode_default)
    except cbor2.CBOREncodeError as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, DecodeError):  # DisallowedDtype raised inside the hook
            raise cause from None
        raise TypeError(str(exc)) from exc


def _forbidden_builtin_tag(tag: int):
    what = "bignum " if tag in (2, 3) else ""

    def refuse(*_args: object) -> None:
        if tag in arrays.TYPED_ARRAY_TAGS:
            raise arrays.refuse_typed_array_tag(tag)
        raise ForbiddenTag(f"CBOR {what}tag {tag} is not allowed (only RFC 8746 typed arrays are)")

    return refuse


# cbor2 decodes some tags itself (dates, bignums, decimals, shared refs, sets, IP addresses, ...)
# before any hook sees them; overriding the whole low range (and the self-describe tag) routes
# every one of them to a refusal. Tags it does not know reach ``tag_hook`` and are refused there.
_REFUSE_BUILTIN_TAGS = {
    tag: _forbidden_builtin_tag(tag) for tag in [*range(0, 1024), 55799] if tag not in arrays.ALLOWED_TAGS
}

# cbor2 reports these conditions with these phrases; each maps to its own exception type.
_CBOR2_PHRASES: tuple[tuple[str, type[DecodeError]], ...] = (
    ("indefinite length", IndefiniteLength),
    ("Duplicate map key", DuplicateKey),
    ("nesting depth", NestingTooDeep),
    ("map key must be", NonStringKey),
)


def _classify(exc: cbor2.CBORError) -> DecodeError:
    chain: BaseException | None = exc
    while chain is not None:  # our own hooks' exceptions arrive wrapped by cbor2
        if isinstance(chain, DecodeError):
            return chain
        chain = chain.__cause__ or chain.__context__
    text = str(exc)
    for phrase, kind in _CBOR2_PHRASES:
        if phrase in text:
            return kind(text)
    return MalformedCBOR(text)


def _check_values(obj: Any) -> None:
    """Refuse values cbor2 accepts but WheelFed never sends (undefined, simple values, stray typed bytes)."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in item:
                if not isinstance(key, str):  # cbor2's strict mode still admits byte-string keys
                    raise NonStringKey(f"map key {key!r} is not a text string")
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif item is cbor2.undefined or isinstance(item, cbor2.CBORSimpleValue):
            raise ForbiddenValue(f"CBOR simple value {item!r} is not allowed")
        else:
            arrays.reject_stray_typed_bytes(item)


def loads_value(data: bytes, *, limits: DecodeLimits = DEFAULT_LIMITS, max_bytes: int | None = None) -> Any:
    """Decode one CBOR item from untrusted ``data`` with every check in the module docstring.

    ``max_bytes`` overrides ``limits.max_message_bytes`` (e.g. a single MQTT payload).
    """
    limit = limits.max_message_bytes if max_bytes is None else max_bytes
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MalformedCBOR(f"expected bytes, got {type(data).__name__}")
    if len(data) > limit:
        raise MessageTooLarge(f"message of {len(data)} bytes exceeds the limit of {limit} bytes")
    if len(data) == 0:
        raise MalformedCBOR("empty payload")
    stream = io.BytesIO(bytes(data))
    decoder = cbor2.CBORDecoder(
        stream,
        tag_hook=arrays.ArrayCounter(limits),
        semantic_decoders=_REFUSE_BUILTIN_TAGS,
        max_depth=limits.max_depth,
        allow_indefinite=False,
        allow_duplicate_keys=False,
        strict_hashable_types=True,
    )
    try:
        obj = decoder.decode()
    except cbor2.CBORError as exc:  # cbor2 wraps whatever our hooks raise
        raise _classify(exc) from exc
    except (ValueError, TypeError, OverflowError, MemoryError, RecursionError) as exc:
        raise MalformedCBOR(f"{type(exc).__name__}: {exc}") from exc
    if stream.tell() != len(data):
        raise TrailingBytes(f"{len(data) - stream.tell()} bytes follow the CBOR item")
    _check_values([obj])
    return obj
