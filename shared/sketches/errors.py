"""The one exception type of the sketches package.

Sketches arrive from the network (a gateway's summary of its features) as well as from local
callers, so every rejection — bad inputs, malformed wire data, incompatible sketches — is a
``ValueError`` subclass that a round engine can catch in one place and attribute to a client.
"""

from __future__ import annotations


class SketchError(ValueError):
    """Inputs, a summary or a sketch break the sketches' rules; the message says how to fix it."""
