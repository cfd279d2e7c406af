"""Message bodies, one module per algorithm; importing this package registers them all."""

from .generic import Ack, Describe, ErrorReply, Hello, ModelAnnouncement, Ping, Pong, Status

__all__ = ["Ack", "Describe", "ErrorReply", "Hello", "ModelAnnouncement", "Ping", "Pong", "Status"]
