"""Message bodies, one module per algorithm; importing this package registers them all."""

from .generic import Ack, ErrorReply, Hello, ModelAnnouncement, Ping, Pong, Status

__all__ = ["Ack", "ErrorReply", "Hello", "ModelAnnouncement", "Ping", "Pong", "Status"]
