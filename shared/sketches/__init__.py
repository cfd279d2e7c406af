"""Where FedSCS-XGB's bin edges and FedForest's candidate thresholds come from.

* **Fleet-summed grid** (``grid.py``; the private protocols' default): every client counts its
  values in the buckets of a hierarchical float32 grid, the server reads the edges off the
  *summed* counts (secure aggregation) and refines the buckets where the quantiles lie. Only
  counts leave a gateway; rank error ``<= 1/(4B)`` on the recordings and outlier-heavy data.

The papers' per-client sketches (protocols ``atoms`` / ``sketches``, kept for reproduction)
send values of the client's data -- quantile points are actual feature values:

* **Weighted quantile summary + CDF mixture** (``summary.py``, ``mixture.py``). Each
  client sends M+1 exact weighted quantiles per feature and its total weight; the server mixes
  the clients' piecewise-linear CDFs by total weight and inverts at ``b/B``. Rank error
  ``<= 1/M`` however heterogeneous the clients are (FedForest Theorem 3.1, weights included),
  which is the rank accuracy FedSCS-XGB's assumption A2 asks for. Serves both algorithms.
* **DDSketch** (``ddsketch.py``), the FedSCS-XGB paper's choice: relative *value* accuracy,
  exactly mergeable, correct weighted ranks here; needs ``Standardization`` for features whose
  spread is small next to their magnitude.
* ``rank_error`` (``accuracy.py``) measures either against exact weighted quantiles
  (``weighted.py``); ``bin_ids`` (``edges.py``) turns edges into the atoms' bin ids
  (XGBoost semantics: ``x < edge`` goes left, NaN has its own id ``len(edges) + 1``).

Typical round (per feature f)::

    client:  s = summarize_columns(X, hessian_sums, m)        # list, one per feature
    server:  edges = merge_edges_columns(all_clients_s, B)    # list of float32 arrays
    client:  ids = bin_ids(X, edges)                          # uint8/uint16 (n, d)

Everything is pure numpy; only numpy/scipy/stdlib are imported (gateway-safe).
"""

from .accuracy import exact_edges, rank_error, target_rank_errors
from .ddsketch import DDSketch, ddsketch_edges, ddsketches_from_columns, ddsketches_to_columns, merge_all
from .edges import bin_dtype, bin_ids, finalize_edges, missing_bin_id, pack_edges, validate_edges
from .errors import SketchError
from .grid import (
    GridPlan,
    GridRefinement,
    float32_keys,
    grid_counts,
    grid_edges,
    grid_refine,
    initial_plan,
    key_values,
)
from .mixture import (
    batched_mixture_quantiles,
    compress,
    merge_edges,
    merge_edges_columns,
    mixture_cdf,
    mixture_quantiles,
)
from .standardization import Standardization, weighted_moments
from .summary import (
    WeightedSummary,
    summaries_from_arrays,
    summaries_to_arrays,
    summarize,
    summarize_columns,
)
from .weighted import exact_weighted_quantiles, weighted_cdf

__all__ = [
    "DDSketch",
    "SketchError",
    "Standardization",
    "WeightedSummary",
    "batched_mixture_quantiles",
    "bin_dtype",
    "bin_ids",
    "compress",
    "ddsketch_edges",
    "ddsketches_from_columns",
    "ddsketches_to_columns",
    "exact_edges",
    "exact_weighted_quantiles",
    "finalize_edges",
    "merge_all",
    "merge_edges",
    "merge_edges_columns",
    "missing_bin_id",
    "mixture_cdf",
    "mixture_quantiles",
    "rank_error",
    "summaries_from_arrays",
    "summaries_to_arrays",
    "summarize",
    "summarize_columns",
    "target_rank_errors",
    "pack_edges",
    "validate_edges",
    "weighted_cdf",
    "weighted_moments",
    "GridPlan",
    "GridRefinement",
    "float32_keys",
    "grid_counts",
    "grid_edges",
    "grid_refine",
    "initial_plan",
    "key_values",
]
