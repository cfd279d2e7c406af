"""Resource limits applied to everything received from the network."""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class DecodeLimits:
    """How much a single received message may cost the receiver.

    ``max_message_bytes`` bounds a whole (reassembled) message and is checked before parsing;
    ``max_depth`` bounds container nesting (protects the decoder's stack);
    ``max_array_elements`` bounds one typed array's element count, counting only non-zero axes
    (an empty array's shape could otherwise claim absurd other axes);
    ``max_ndim`` bounds its dimensions (numpy itself stops at 32 on numpy 1.26);
    ``max_arrays`` bounds the number of arrays per message: each costs ~100 bytes of Python
    objects, so thousands of one-element arrays would amplify a message's size 30-fold.
    """

    max_message_bytes: int = 64 * MIB
    max_depth: int = 16
    max_array_elements: int = 64 * MIB
    max_ndim: int = 8
    max_arrays: int = 4096

    def __post_init__(self) -> None:
        for name in ("max_message_bytes", "max_depth", "max_array_elements", "max_ndim", "max_arrays"):
            if getattr(self, name) <= 0:
                raise ValueError(f"DecodeLimits.{name} must be positive, got {getattr(self, name)}")


DEFAULT_LIMITS = DecodeLimits()

#: Largest MQTT payload a WheelFed sender publishes (some managed brokers cap at 128 KiB).
DEFAULT_MAX_PAYLOAD = 256 * KIB
