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
    ``max_array_elements`` bounds a single typed array's element count (a shape like
    [2**40] with a matching byte string cannot exist below the size limit, but a shape with
    a zero-size axis can claim absurd other axes — the element bound keeps shapes honest).
    """

    max_message_bytes: int = 64 * MIB
    max_depth: int = 16
    max_array_elements: int = 64 * MIB

    def __post_init__(self) -> None:
        for name in ("max_message_bytes", "max_depth", "max_array_elements"):
            if getattr(self, name) <= 0:
                raise ValueError(f"DecodeLimits.{name} must be positive, got {getattr(self, name)}")


DEFAULT_LIMITS = DecodeLimits()

#: Largest MQTT payload a WheelFed sender publishes (some managed brokers cap at 128 KiB).
DEFAULT_MAX_PAYLOAD = 256 * KIB
