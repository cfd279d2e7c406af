"""WheelFed's tree-ensemble model: one format for every algorithm, a numpy-only inference engine,
and dict/JSON/CBOR io. Gateways import this with nothing but numpy installed.

See ``tree.py`` (one tree, routing rules), ``ensemble.py`` (ensemble rules), ``inference.py``
(engine and numerics) and ``serialization.py`` (wire layout).
"""

from .ensemble import KINDS, LINKS, TreeEnsemble
from .errors import ModelValidationError
from .inputs import client_index, model_inputs, uses_client_index
from .serialization import (
    FORMAT_NAME,
    FORMAT_VERSION,
    from_cbor,
    from_dict,
    from_json,
    to_cbor,
    to_dict,
    to_json,
)
from .tree import Tree, TreeBuilder

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "KINDS",
    "LINKS",
    "ModelValidationError",
    "Tree",
    "TreeBuilder",
    "TreeEnsemble",
    "client_index",
    "from_cbor",
    "from_dict",
    "from_json",
    "model_inputs",
    "to_cbor",
    "to_dict",
    "to_json",
    "uses_client_index",
]
