"""Server halves of the training algorithms, each with its configuration dataclass (the public
API: ``FedSCSXGB(...)``); the maths they share lives in ``shared/``."""

from .fedforest import FedForest
from .fedga_tree import FedGATree
from .fedscs_xgb import FedSCSXGB
from .vertical_forest import VerticalFederatedForest

__all__ = ["FedForest", "FedGATree", "FedSCSXGB", "VerticalFederatedForest"]
