"""Exception types of the wire protocol.

Every way a message can be rejected has its own type, so that the receiving side can count
rejections by cause and tests can assert the precise reason. All derive from ``ProtocolError``;
everything raised while *decoding* derives from ``DecodeError``.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base class of every wire-protocol failure."""


class DecodeError(ProtocolError):
    """A received payload was rejected; nothing of it may be applied."""


class MessageTooLarge(DecodeError):
    """The payload exceeds the configured size limit (checked before any parsing)."""


class MalformedCBOR(DecodeError):
    """The bytes are not well-formed CBOR (truncated, reserved codes, bad UTF-8, ...)."""


class NestingTooDeep(DecodeError):
    """Containers are nested deeper than the decoder's depth limit."""


class IndefiniteLength(DecodeError):
    """An indefinite-length string, array or map was found; WheelFed never sends those."""


class DuplicateKey(DecodeError):
    """A map repeats a key; which value wins would be ambiguous."""


class NonStringKey(DecodeError):
    """A map key is not a text string (keys of WheelFed messages are always strings)."""


class ForbiddenTag(DecodeError):
    """A CBOR tag other than the RFC 8746 typed-array tags (bignums, dates, unknown tags...)."""


class ForbiddenValue(DecodeError):
    """A simple value WheelFed never sends (undefined, unassigned simple values)."""


class TrailingBytes(DecodeError):
    """Bytes follow the first complete CBOR item."""


class DisallowedDtype(DecodeError):
    """A typed array uses an element type outside the whitelist."""


class ArrayShapeMismatch(DecodeError):
    """A typed array's byte length does not equal prod(shape) * itemsize, or its shape is invalid."""


class SchemaError(DecodeError):
    """The CBOR was fine but the message does not match its schema; ``path`` names the field."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class UnsupportedVersion(DecodeError):
    """The envelope's protocol version is not one this build speaks."""


class UnknownMessageType(DecodeError):
    """The envelope names a message type with no registered schema."""


class ChunkError(DecodeError):
    """A chunk is inconsistent with the other chunks of its transfer or fails its integrity hash."""


class PayloadTooLarge(ProtocolError):
    """A message to be *sent* cannot be made to fit the transport's payload limit."""
