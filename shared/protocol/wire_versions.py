"""The wire fingerprint of every released protocol version, written by ``python -m shared.protocol.wire``
(shared/protocol/wire.py). Version 1 was read from the tree tagged v1. Do not edit by hand.
"""

VERSIONS = {
    "1": {
        "ack": {"fields": {"note": "str = default"}, "revision": 1},
        "alert": {
            "fields": {
                "rule": "str",
                "state": "Literal['raised', 'cleared']",
                "started_us": "int",
                "detected_us": "int",
                "message": "str",
                "detail": "dict[str, str] = default",
            },
            "revision": 1,
        },
        "chunk": {
            "fields": {
                "transfer": "str",
                "index": "int",
                "count": "int",
                "total_size": "int",
                "sha256": "bytes",
                "data": "bytes",
            },
            "revision": 1,
        },
        "data_shape": {
            "fields": {
                "feature_set_version": "str",
                "labels": "bool = default",
                "time_range": "None | {since_us: None | int = default, until_us: None | int = default} = default",
                "min_labelled": "int = default",
            },
            "revision": 1,
        },
        "data_shape_reply": {
            "fields": {
                "n_features": "int",
                "feature_names": "tuple[str, ...] = default",
                "labels": "tuple[str, ...] = default",
                "integer_labels": "bool = default",
            },
            "revision": 1,
        },
        "data_summary": {
            "fields": {
                "n_samples": "int",
                "n_features": "int",
                "moments": "ndarray[ArraySpec(dtypes=('float64',), ndim=2, finite=True)]",
                "minimum": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]",
                "maximum": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]",
                "feature_names": "tuple[str, ...] = default",
                "labels": "tuple[str, ...] = default",
                "label_counts": "ndarray[ArraySpec(dtypes=('int64', 'int32', 'uint32'), ndim=1, finite=False)] = default",
                "integer_labels": "bool = default",
                "target_sum": "float = default",
                "target_sum_squares": "float = default",
            },
            "revision": 1,
        },
        "data_summary_request": {
            "fields": {"feature_set_version": "str", "regression": "bool = default"},
            "revision": 1,
        },
        "describe": {"fields": {}, "revision": 1},
        "error": {
            "fields": {
                "code": "str",
                "message": "str",
                "request_type": "str = default",
                "feature_sets": "tuple[str, ...] = default",
            },
            "revision": 1,
        },
        "evaluate": {
            "fields": {
                "model": "bytes",
                "feature_set_version": "str",
                "split": "Literal['train', 'holdout'] = default",
                "target": "Literal['label', 'client'] = default",
                "client_index": "int = default",
                "score_bins": "int = default",
            },
            "revision": 1,
        },
        "evaluation": {
            "fields": {
                "n_samples": "int",
                "confusion": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=2, finite=False)] = default",
                "score_histogram": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=3, finite=False)] = default",
                "log_loss_sum": "float = default",
                "squared_error_sum": "float = default",
                "absolute_error_sum": "float = default",
                "target_sum": "float = default",
                "target_sum_squares": "float = default",
                "unknown_labels": "int = default",
            },
            "revision": 1,
        },
        "fedforest.histogram_reply": {
            "fields": {
                "sums": "{values: ndarray[ArraySpec(dtypes=('uint16', 'uint32', 'uint64'), ndim=1, finite=False)], shares: dict[str, bytes] = default}"
            },
            "revision": 1,
        },
        "fedforest.histograms": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], feature_set_version: str, n_features: int, n_trees: int, client_index: int, trees: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], seed: int, bootstrap: bool = default, classes: tuple[str, ...] = default, target: Literal['label', 'client'] = default, n_clients: int = default}",
                "level": "int",
                "splits": "{level: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], tree: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], node: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], feature: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], threshold: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], categorical: ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)], left: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], right: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], category_offsets: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], categories: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], default_left: ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)] = default}",
                "node_tree": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "node_id": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "feature_offsets": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "features": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "edge_values": "ndarray[ArraySpec(dtypes=('float32',), ndim=1, finite=True)]",
                "edge_offsets": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "frac_bits": "int = default",
                "value_bound": "float = default",
                "secure": "None | {neighbours: tuple[str, ...]} = default",
                "word_bits": "int = default",
                "noise": "None | {sigma: float, shares: int} = default",
                "node_shift": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)] = default",
            },
            "revision": 1,
        },
        "fedforest.level": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], feature_set_version: str, n_features: int, n_trees: int, client_index: int, trees: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], seed: int, bootstrap: bool = default, classes: tuple[str, ...] = default, target: Literal['label', 'client'] = default, n_clients: int = default}",
                "level": "int",
                "splits": "{level: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], tree: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], node: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], feature: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], threshold: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], categorical: ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)], left: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], right: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], category_offsets: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], categories: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], default_left: ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)] = default}",
                "node_tree": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "node_id": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "feature_offsets": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "features": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "sketch_size": "int = default",
                "categorical": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)] = default",
                "n_categories": "int = default",
                "top_l": "int = default",
                "node_shift": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)] = default",
            },
            "revision": 1,
        },
        "fedforest.level_reply": {
            "fields": {
                "nodes": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "summaries": "ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64', 'float64'), ndim=2, finite=True)]",
                "pairs": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "points": "ndarray[ArraySpec(dtypes=('float64',), ndim=2, finite=True)]",
                "pair_weight": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]",
                "category_pairs": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "category_summaries": "ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64', 'float64'), ndim=3, finite=True)]",
                "local_gain": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)] = default",
                "missing_pairs": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)] = default",
                "missing_summaries": "ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64', 'float64'), ndim=2, finite=True)] = default",
            },
            "revision": 1,
        },
        "fedforest.split": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], feature_set_version: str, n_features: int, n_trees: int, client_index: int, trees: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], seed: int, bootstrap: bool = default, classes: tuple[str, ...] = default, target: Literal['label', 'client'] = default, n_clients: int = default}",
                "level": "int",
                "offsets": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "thresholds": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]",
                "evaluation": "Literal['exact', 'avgimp'] = default",
            },
            "revision": 1,
        },
        "fedforest.split_reply": {
            "fields": {
                "candidates": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "left": "ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64', 'float64'), ndim=2, finite=True)]",
                "local_gain": "ndarray[ArraySpec(dtypes=('float32', 'float64'), ndim=1, finite=True)] = default",
                "left_count": "ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64', 'float64'), ndim=1, finite=True)] = default",
            },
            "revision": 1,
        },
        "fedga_tree.depth": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], feature_set_version: str, seed: int, classes: tuple[str, ...] = default, integer_classes: bool = default, cv_folds: int = default, d_min: int = default, d_max: int = default, train_ratio: float = default, epsilon: None | float = default, phi_star: float = default, theta_star: float = default, mu_star: float = default}"
            },
            "revision": 1,
        },
        "fedga_tree.depth_reply": {"fields": {"depth": "int", "noisy_count": "float"}, "revision": 1},
        "fedga_tree.finish": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], feature_set_version: str, seed: int, classes: tuple[str, ...] = default, integer_classes: bool = default, cv_folds: int = default, d_min: int = default, d_max: int = default, train_ratio: float = default, epsilon: None | float = default, phi_star: float = default, theta_star: float = default, mu_star: float = default}",
                "depth": "int",
                "population": "ndarray[ArraySpec(dtypes=('int8', 'int16', 'int32', 'int64'), ndim=2, finite=False)]",
                "full_data": "bool = default",
            },
            "revision": 1,
        },
        "fedga_tree.finish_reply": {"fields": {"model": "bytes", "chosen": "int", "fitness": "float"}, "revision": 1},
        "fedga_tree.generation": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], feature_set_version: str, seed: int, classes: tuple[str, ...] = default, integer_classes: bool = default, cv_folds: int = default, d_min: int = default, d_max: int = default, train_ratio: float = default, epsilon: None | float = default, phi_star: float = default, theta_star: float = default, mu_star: float = default}",
                "depth": "int",
                "generation": "int",
                "population": "ndarray[ArraySpec(dtypes=('int8', 'int16', 'int32', 'int64'), ndim=2, finite=False)]",
                "full_data": "bool = default",
                "join": "bool = default",
            },
            "revision": 1,
        },
        "fedga_tree.generation_reply": {
            "fields": {
                "fitness": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]",
                "structure": "ndarray[ArraySpec(dtypes=('int8', 'int16', 'int32', 'int64'), ndim=1, finite=False)] = default",
                "structure_fitness": "float = default",
                "noisy_count": "float = default",
            },
            "revision": 1,
        },
        "fedga_tree.structure": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], feature_set_version: str, seed: int, classes: tuple[str, ...] = default, integer_classes: bool = default, cv_folds: int = default, d_min: int = default, d_max: int = default, train_ratio: float = default, epsilon: None | float = default, phi_star: float = default, theta_star: float = default, mu_star: float = default}",
                "depth": "int",
            },
            "revision": 1,
        },
        "fedga_tree.structure_reply": {
            "fields": {
                "structure": "ndarray[ArraySpec(dtypes=('int8', 'int16', 'int32', 'int64'), ndim=1, finite=False)]",
                "noisy_count": "float",
                "vote_full_data": "bool = default",
                "vote_elitism": "bool = default",
            },
            "revision": 1,
        },
        "fedscs_xgb.atom_reply": {
            "fields": {
                "n_trees": "int",
                "n_samples": "int",
                "loss_sum": "float",
                "keys": "ndarray[ArraySpec(dtypes=('uint8', 'uint16'), ndim=2, finite=False)]",
                "counts": "ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64'), ndim=1, finite=False)]",
                "grad": "ndarray[ArraySpec(dtypes=('float64',), ndim=2, finite=True)]",
                "hess": "ndarray[ArraySpec(dtypes=('float64',), ndim=2, finite=True)]",
            },
            "revision": 1,
        },
        "fedscs_xgb.atoms": {
            "fields": {
                "task": "{objective: Literal['softmax', 'logistic', 'squared_error'], feature_set_version: str, n_features: int, base_score: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], classes: tuple[str, ...] = default, multi_strategy: Literal['one_output_per_tree', 'multi_output_tree'] = default}",
                "model": "{first_tree: int = default, trees: bytes = default}",
                "edge_values": "ndarray[ArraySpec(dtypes=('float32',), ndim=1, finite=True)]",
                "edge_offsets": "ndarray[ArraySpec(dtypes=('int64',), ndim=1, finite=False)]",
            },
            "revision": 1,
        },
        "fedscs_xgb.histogram_reply": {
            "fields": {
                "n_trees": "int",
                "sums": "{values: ndarray[ArraySpec(dtypes=('uint16', 'uint32', 'uint64'), ndim=1, finite=False)], shares: dict[str, bytes] = default}",
            },
            "revision": 1,
        },
        "fedscs_xgb.histograms": {
            "fields": {
                "task": "{objective: Literal['softmax', 'logistic', 'squared_error'], feature_set_version: str, n_features: int, base_score: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], classes: tuple[str, ...] = default, multi_strategy: Literal['one_output_per_tree', 'multi_output_tree'] = default}",
                "model": "{first_tree: int = default, trees: bytes = default}",
                "edge_values": "ndarray[ArraySpec(dtypes=('float32',), ndim=1, finite=True)]",
                "edge_offsets": "ndarray[ArraySpec(dtypes=('int64',), ndim=1, finite=False)]",
                "splits": "{tree: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], node: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], feature: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], bin: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], default_left: ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)], left: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], right: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]}",
                "node_tree": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "node_id": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "frac_bits": "int",
                "gradient_bound": "float",
                "with_loss": "bool = default",
                "secure": "None | {neighbours: tuple[str, ...]} = default",
                "noise": "None | {sigma: float, shares: int} = default",
            },
            "revision": 1,
        },
        "fedscs_xgb.sketch": {
            "fields": {
                "task": "{objective: Literal['softmax', 'logistic', 'squared_error'], feature_set_version: str, n_features: int, base_score: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], classes: tuple[str, ...] = default, multi_strategy: Literal['one_output_per_tree', 'multi_output_tree'] = default}",
                "model": "{first_tree: int = default, trees: bytes = default}",
                "sketch": "Literal['summary', 'ddsketch'] = default",
                "summary_size": "int = default",
                "ddsketch_alpha": "float = default",
                "centers": "None | ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)] = default",
                "scales": "None | ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)] = default",
            },
            "revision": 1,
        },
        "fedscs_xgb.sketch_reply": {
            "fields": {
                "n_trees": "int",
                "summary": "None | {points: ndarray[ArraySpec(dtypes=('float32', 'float64'), ndim=2, finite=True)], total_weight: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], count: ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64'), ndim=1, finite=False)], n_missing: ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64'), ndim=1, finite=False)], missing_weight: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]} = default",
                "ddsketch": "None | {alpha: float, pos_keys: ndarray[ArraySpec(dtypes=('int32',), ndim=1, finite=False)], pos_weights: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], pos_offsets: ndarray[ArraySpec(dtypes=('int64',), ndim=1, finite=False)], neg_keys: ndarray[ArraySpec(dtypes=('int32',), ndim=1, finite=False)], neg_weights: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], neg_offsets: ndarray[ArraySpec(dtypes=('int64',), ndim=1, finite=False)], zero_weight: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], count: ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64'), ndim=1, finite=False)], n_missing: ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64'), ndim=1, finite=False)], missing_weight: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]} = default",
            },
            "revision": 1,
        },
        "fleet_counts": {
            "fields": {
                "feature_set_version": "str",
                "regression": "bool",
                "classes": "tuple[str, ...] = default",
                "frac_bits": "int = default",
                "secure": "None | {neighbours: tuple[str, ...]} = default",
                "noise": "None | {sigma: float, shares: int} = default",
                "shift": "float = default",
            },
            "revision": 1,
        },
        "fleet_sum": {
            "fields": {
                "sums": "{values: ndarray[ArraySpec(dtypes=('uint16', 'uint32', 'uint64'), ndim=1, finite=False)], shares: dict[str, bytes] = default}"
            },
            "revision": 1,
        },
        "grid_counts": {
            "fields": {
                "feature_set_version": "str",
                "feature": "ndarray[ArraySpec(dtypes=('uint8', 'int32', 'int64', 'uint32'), ndim=1, finite=False)]",
                "prefix": "ndarray[ArraySpec(dtypes=('uint8', 'int32', 'int64', 'uint32'), ndim=1, finite=False)]",
                "bits": "ndarray[ArraySpec(dtypes=('uint8', 'int32', 'int64', 'uint32'), ndim=1, finite=False)]",
                "step": "ndarray[ArraySpec(dtypes=('uint8', 'int32', 'int64', 'uint32'), ndim=1, finite=False)]",
                "secure": "None | {neighbours: tuple[str, ...]} = default",
                "noise": "None | {sigma: float, shares: int} = default",
                "word_bits": "int = default",
                "target": "bool = default",
            },
            "revision": 1,
        },
        "hello": {
            "fields": {
                "software_version": "str",
                "feature_set_version": "str = default",
                "n_features": "int = default",
                "capabilities": "tuple[str, ...] = default",
            },
            "revision": 1,
        },
        "model_announcement": {
            "fields": {
                "model_id": "str",
                "version": "int",
                "algorithm": "str",
                "feature_set_version": "str",
                "sha256": "bytes",
                "size": "int",
                "kind": "Literal['boosted', 'forest', 'single'] = default",
                "target": "str = default",
            },
            "revision": 1,
        },
        "model_push": {"fields": {"bundle": "bytes"}, "revision": 1},
        "model_rollback": {
            "fields": {
                "reason": "str = default",
                "model_id": "str = default",
                "version": "int = default",
                "replaces_model_id": "str = default",
                "replaces_version": "int = default",
                "client": "str = default",
                "issued_ns": "int = default",
                "key_id": "str = default",
                "signature": "bytes = default",
            },
            "revision": 1,
        },
        "model_status": {
            "fields": {
                "state": "Literal['active', 'rejected', 'unchanged']",
                "active_model_id": "str = default",
                "active_version": "int = default",
                "previous_version": "int = default",
                "reason": "str = default",
            },
            "revision": 1,
        },
        "ping": {"fields": {"payload": "bytes = default", "delay_s": "float = default"}, "revision": 1},
        "pong": {"fields": {"payload": "bytes = default"}, "revision": 1},
        "predictions": {
            "fields": {
                "model_id": "str",
                "model_version": "int",
                "classes": "tuple[str, ...]",
                "window_end_us": "ndarray[ArraySpec(dtypes=('int64',), ndim=1, finite=False)]",
                "predicted": "ndarray[ArraySpec(dtypes=('int16', 'int32'), ndim=1, finite=False)]",
                "probability": "ndarray[ArraySpec(dtypes=('float32',), ndim=1, finite=True)]",
                "latency_ms": "ndarray[ArraySpec(dtypes=('float32',), ndim=1, finite=True)]",
            },
            "revision": 1,
        },
        "secagg.confirm": {"fields": {"confirmations": "dict[str, bytes]"}, "revision": 1},
        "secagg.confirmations": {"fields": {"confirmations": "dict[str, bytes]"}, "revision": 1},
        "secagg.join": {
            "fields": {
                "roster": "dict[str, {cipher: bytes, mask: bytes}]",
                "neighbours": "tuple[str, ...]",
                "threshold": "int",
            },
            "revision": 1,
        },
        "secagg.keys": {"fields": {}, "revision": 1},
        "secagg.public_keys": {"fields": {"keys": "{cipher: bytes, mask: bytes}"}, "revision": 1},
        "secagg.unmask": {
            "fields": {
                "label": "str",
                "survivors": "tuple[str, ...]",
                "dropped": "tuple[str, ...]",
                "shares": "dict[str, bytes]",
            },
            "revision": 1,
        },
        "secagg.unmask_reply": {
            "fields": {"self_mask": "dict[str, bytes]", "pair_seeds": "dict[str, dict[str, bytes]]"},
            "revision": 1,
        },
        "status": {
            "fields": {
                "online": "bool",
                "active_model": "str = default",
                "n_windows": "int = default",
                "n_labelled": "int = default",
                "detail": "dict[str, str] = default",
            },
            "revision": 1,
        },
        "vertical_forest.abort": {"fields": {"reason": "str"}, "revision": 1},
        "vertical_forest.align": {
            "fields": {
                "feature_set_version": "str = default",
                "hop_us": "int = default",
                "tolerance_us": "int = default",
                "task": "Literal['classification', 'regression'] = default",
                "live_model": "str = default",
            },
            "revision": 1,
        },
        "vertical_forest.align_reply": {
            "fields": {
                "digests": "ndarray[ArraySpec(dtypes=('uint8',), ndim=2, finite=False)]",
                "off_grid": "int",
                "n_features": "int",
                "has_labels": "bool",
                "classes": "tuple[str, ...] = default",
            },
            "revision": 1,
        },
        "vertical_forest.deploy": {
            "fields": {
                "manifest": "{model_id: str, version: int, job: str, parties: tuple[str, ...], label_holder: str, task: Literal['classification', 'regression'], classes: tuple[str, ...], forest_digest: bytes, party_digests: tuple[bytes, ...], issued_ns: int, key_id: str, signature: bytes = default}"
            },
            "revision": 1,
        },
        "vertical_forest.directions": {
            "fields": {
                "model_job": "str",
                "keep": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "tree": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "node": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "offsets": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "rows": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
            },
            "revision": 1,
        },
        "vertical_forest.directions_reply": {
            "fields": {"go_left": "ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)]"},
            "revision": 1,
        },
        "vertical_forest.finish": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], party: int, n_parties: int, n_trees: int, n_classes: int, min_samples_split: int, min_samples_leaf: int, feature_set_version: str = default}",
                "level": "int",
                "partitions": "tuple[{owner: int, tree: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], node: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], sealed: bytes}, ...]",
            },
            "revision": 1,
        },
        "vertical_forest.finish_reply": {
            "fields": {
                "leaf_tree": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "leaf_node": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "values": "ndarray[ArraySpec(dtypes=('float64',), ndim=2, finite=True)]",
                "cover": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]",
                "digest": "bytes = default",
            },
            "revision": 1,
        },
        "vertical_forest.level": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], party: int, n_parties: int, n_trees: int, n_classes: int, min_samples_split: int, min_samples_leaf: int, feature_set_version: str = default}",
                "level": "int",
                "partitions": "tuple[{owner: int, tree: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], node: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], sealed: bytes}, ...]",
                "node_tree": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "node_id": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "feature_offsets": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "features": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "sealed_labels": "bytes = default",
            },
            "revision": 1,
        },
        "vertical_forest.level_reply": {
            "fields": {
                "has_split": "ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)]",
                "gain": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]",
                "feature": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
            },
            "revision": 1,
        },
        "vertical_forest.partition": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], party: int, n_parties: int, n_trees: int, n_classes: int, min_samples_split: int, min_samples_leaf: int, feature_set_version: str = default}",
                "level": "int",
                "node_tree": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "node_id": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
            },
            "revision": 1,
        },
        "vertical_forest.partition_reply": {"fields": {"sealed": "bytes"}, "revision": 1},
        "vertical_forest.result": {
            "fields": {
                "values": "ndarray[ArraySpec(dtypes=('float64',), ndim=2, finite=True)]",
                "classes": "tuple[str, ...] = default",
            },
            "revision": 1,
        },
        "vertical_forest.route": {
            "fields": {
                "model_job": "str",
                "keep": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
            },
            "revision": 1,
        },
        "vertical_forest.route_reply": {
            "fields": {"leaves": "ndarray[ArraySpec(dtypes=('uint8',), ndim=2, finite=False)]", "n_leaves": "int"},
            "revision": 1,
        },
        "vertical_forest.setup": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], party: int, n_parties: int, n_trees: int, n_classes: int, min_samples_split: int, min_samples_leaf: int, feature_set_version: str = default}",
                "keep": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "bootstrap": "ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32'), ndim=2, finite=False)]",
            },
            "revision": 1,
        },
        "vertical_forest.setup_reply": {"fields": {"n_rows": "int", "sealed_labels": "bytes = default"}, "revision": 1},
    },
    "2": {
        "ack": {"fields": {"note": "str = default"}, "revision": 1},
        "alert": {
            "fields": {
                "rule": "str",
                "state": "Literal['raised', 'cleared']",
                "started_us": "int",
                "detected_us": "int",
                "message": "str",
                "detail": "dict[str, str] = default",
            },
            "revision": 1,
        },
        "chunk": {
            "fields": {
                "transfer": "str",
                "index": "int",
                "count": "int",
                "total_size": "int",
                "sha256": "bytes",
                "data": "bytes",
            },
            "revision": 1,
        },
        "data_shape": {
            "fields": {
                "feature_set_version": "str",
                "labels": "bool = default",
                "time_range": "None | {since_us: None | int = default, until_us: None | int = default} = default",
                "min_labelled": "int = default",
                "capabilities": "tuple[str, ...] = default",
            },
            "revision": 1,
        },
        "data_shape_reply": {
            "fields": {
                "n_features": "int",
                "feature_names": "tuple[str, ...] = default",
                "labels": "tuple[str, ...] = default",
                "integer_labels": "bool = default",
            },
            "revision": 1,
        },
        "data_summary": {
            "fields": {
                "n_samples": "int",
                "n_features": "int",
                "moments": "ndarray[ArraySpec(dtypes=('float64',), ndim=2, finite=True)]",
                "minimum": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]",
                "maximum": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]",
                "feature_names": "tuple[str, ...] = default",
                "labels": "tuple[str, ...] = default",
                "label_counts": "ndarray[ArraySpec(dtypes=('int64', 'int32', 'uint32'), ndim=1, finite=False)] = default",
                "integer_labels": "bool = default",
                "target_sum": "float = default",
                "target_sum_squares": "float = default",
            },
            "revision": 1,
        },
        "data_summary_request": {
            "fields": {"feature_set_version": "str", "regression": "bool = default"},
            "revision": 1,
        },
        "describe": {"fields": {}, "revision": 1},
        "error": {
            "fields": {
                "code": "str",
                "message": "str",
                "request_type": "str = default",
                "feature_sets": "tuple[str, ...] = default",
            },
            "revision": 1,
        },
        "evaluate": {
            "fields": {
                "model": "bytes",
                "feature_set_version": "str",
                "split": "Literal['train', 'holdout'] = default",
                "target": "Literal['label', 'client'] = default",
                "client_index": "int = default",
                "score_bins": "int = default",
            },
            "revision": 1,
        },
        "evaluate.local_baseline": {
            "fields": {
                "feature_set_version": "str",
                "classes": "tuple[str, ...] = default",
                "regression": "bool = default",
                "max_depth": "int = default",
                "cv_folds": "int = default",
                "seed": "int = default",
                "score_bins": "int = default",
            },
            "revision": 1,
        },
        "evaluation": {
            "fields": {
                "n_samples": "int",
                "confusion": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=2, finite=False)] = default",
                "score_histogram": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=3, finite=False)] = default",
                "log_loss_sum": "float = default",
                "squared_error_sum": "float = default",
                "absolute_error_sum": "float = default",
                "target_sum": "float = default",
                "target_sum_squares": "float = default",
                "unknown_labels": "int = default",
            },
            "revision": 1,
        },
        "fedforest.dp_histograms": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], feature_set_version: str, n_features: int, n_trees: int, client_index: int, trees: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], seed: int, bootstrap: bool = default, classes: tuple[str, ...] = default, target: Literal['label', 'client'] = default, n_clients: int = default}",
                "features": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "edge_values": "ndarray[ArraySpec(dtypes=('float32',), ndim=1, finite=True)]",
                "edge_offsets": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "noise": "{mu: float, shares: int, scale: int = default}",
                "secure": "None | {neighbours: tuple[str, ...]} = default",
                "word_bits": "int = default",
                "target_clip": "None | {centre: float, half_width: float} = default",
            },
            "revision": 1,
        },
        "fedforest.dp_leaves": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], feature_set_version: str, n_features: int, n_trees: int, client_index: int, trees: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], seed: int, bootstrap: bool = default, classes: tuple[str, ...] = default, target: Literal['label', 'client'] = default, n_clients: int = default}",
                "splits": "{level: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], tree: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], node: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], feature: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], threshold: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], categorical: ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)], left: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], right: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], category_offsets: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], categories: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], default_left: ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)] = default}",
                "leaf_tree": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "leaf_id": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "noise": "{mu: float, shares: int, scale: int = default}",
                "secure": "None | {neighbours: tuple[str, ...]} = default",
                "word_bits": "int = default",
                "target_clip": "None | {centre: float, half_width: float} = default",
            },
            "revision": 1,
        },
        "fedforest.histogram_reply": {
            "fields": {
                "sums": "{values: ndarray[ArraySpec(dtypes=('uint16', 'uint32', 'uint64'), ndim=1, finite=False)], shares: dict[str, bytes] = default}"
            },
            "revision": 1,
        },
        "fedforest.histograms": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], feature_set_version: str, n_features: int, n_trees: int, client_index: int, trees: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], seed: int, bootstrap: bool = default, classes: tuple[str, ...] = default, target: Literal['label', 'client'] = default, n_clients: int = default}",
                "level": "int",
                "splits": "{level: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], tree: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], node: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], feature: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], threshold: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], categorical: ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)], left: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], right: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], category_offsets: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], categories: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], default_left: ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)] = default}",
                "node_tree": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "node_id": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "feature_offsets": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "features": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "edge_values": "ndarray[ArraySpec(dtypes=('float32',), ndim=1, finite=True)]",
                "edge_offsets": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "frac_bits": "int = default",
                "value_bound": "float = default",
                "secure": "None | {neighbours: tuple[str, ...]} = default",
                "word_bits": "int = default",
                "noise": "None | {mu: float, shares: int, scale: int = default} = default",
                "node_shift": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)] = default",
            },
            "revision": 1,
        },
        "fedforest.level": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], feature_set_version: str, n_features: int, n_trees: int, client_index: int, trees: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], seed: int, bootstrap: bool = default, classes: tuple[str, ...] = default, target: Literal['label', 'client'] = default, n_clients: int = default}",
                "level": "int",
                "splits": "{level: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], tree: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], node: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], feature: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], threshold: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], categorical: ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)], left: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], right: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], category_offsets: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], categories: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], default_left: ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)] = default}",
                "node_tree": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "node_id": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "feature_offsets": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "features": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "sketch_size": "int = default",
                "categorical": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)] = default",
                "n_categories": "int = default",
                "top_l": "int = default",
                "node_shift": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)] = default",
            },
            "revision": 1,
        },
        "fedforest.level_reply": {
            "fields": {
                "nodes": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "summaries": "ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64', 'float64'), ndim=2, finite=True)]",
                "pairs": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "points": "ndarray[ArraySpec(dtypes=('float64',), ndim=2, finite=True)]",
                "pair_weight": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]",
                "category_pairs": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "category_summaries": "ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64', 'float64'), ndim=3, finite=True)]",
                "local_gain": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)] = default",
                "missing_pairs": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)] = default",
                "missing_summaries": "ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64', 'float64'), ndim=2, finite=True)] = default",
            },
            "revision": 1,
        },
        "fedforest.split": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], feature_set_version: str, n_features: int, n_trees: int, client_index: int, trees: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], seed: int, bootstrap: bool = default, classes: tuple[str, ...] = default, target: Literal['label', 'client'] = default, n_clients: int = default}",
                "level": "int",
                "offsets": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "thresholds": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]",
                "evaluation": "Literal['exact', 'avgimp'] = default",
            },
            "revision": 1,
        },
        "fedforest.split_reply": {
            "fields": {
                "candidates": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "left": "ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64', 'float64'), ndim=2, finite=True)]",
                "local_gain": "ndarray[ArraySpec(dtypes=('float32', 'float64'), ndim=1, finite=True)] = default",
                "left_count": "ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64', 'float64'), ndim=1, finite=True)] = default",
            },
            "revision": 1,
        },
        "fedga_tree.depth": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], feature_set_version: str, seed: int, classes: tuple[str, ...] = default, integer_classes: bool = default, cv_folds: int = default, d_min: int = default, d_max: int = default, train_ratio: float = default, epsilon: None | float = default, phi_star: float = default, theta_star: float = default, mu_star: float = default}"
            },
            "revision": 1,
        },
        "fedga_tree.depth_reply": {"fields": {"depth": "int", "noisy_count": "float"}, "revision": 1},
        "fedga_tree.finish": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], feature_set_version: str, seed: int, classes: tuple[str, ...] = default, integer_classes: bool = default, cv_folds: int = default, d_min: int = default, d_max: int = default, train_ratio: float = default, epsilon: None | float = default, phi_star: float = default, theta_star: float = default, mu_star: float = default}",
                "depth": "int",
                "population": "ndarray[ArraySpec(dtypes=('int8', 'int16', 'int32', 'int64'), ndim=2, finite=False)]",
                "full_data": "bool = default",
            },
            "revision": 1,
        },
        "fedga_tree.finish_reply": {"fields": {"model": "bytes", "chosen": "int", "fitness": "float"}, "revision": 1},
        "fedga_tree.generation": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], feature_set_version: str, seed: int, classes: tuple[str, ...] = default, integer_classes: bool = default, cv_folds: int = default, d_min: int = default, d_max: int = default, train_ratio: float = default, epsilon: None | float = default, phi_star: float = default, theta_star: float = default, mu_star: float = default}",
                "depth": "int",
                "generation": "int",
                "population": "ndarray[ArraySpec(dtypes=('int8', 'int16', 'int32', 'int64'), ndim=2, finite=False)]",
                "full_data": "bool = default",
                "join": "bool = default",
            },
            "revision": 1,
        },
        "fedga_tree.generation_reply": {
            "fields": {
                "fitness": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]",
                "structure": "ndarray[ArraySpec(dtypes=('int8', 'int16', 'int32', 'int64'), ndim=1, finite=False)] = default",
                "structure_fitness": "float = default",
                "noisy_count": "float = default",
            },
            "revision": 1,
        },
        "fedga_tree.structure": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], feature_set_version: str, seed: int, classes: tuple[str, ...] = default, integer_classes: bool = default, cv_folds: int = default, d_min: int = default, d_max: int = default, train_ratio: float = default, epsilon: None | float = default, phi_star: float = default, theta_star: float = default, mu_star: float = default}",
                "depth": "int",
            },
            "revision": 1,
        },
        "fedga_tree.structure_reply": {
            "fields": {
                "structure": "ndarray[ArraySpec(dtypes=('int8', 'int16', 'int32', 'int64'), ndim=1, finite=False)]",
                "noisy_count": "float",
                "vote_full_data": "bool = default",
                "vote_elitism": "bool = default",
            },
            "revision": 1,
        },
        "fedscs_xgb.atom_reply": {
            "fields": {
                "n_trees": "int",
                "n_samples": "int",
                "loss_sum": "float",
                "keys": "ndarray[ArraySpec(dtypes=('uint8', 'uint16'), ndim=2, finite=False)]",
                "counts": "ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64'), ndim=1, finite=False)]",
                "grad": "ndarray[ArraySpec(dtypes=('float64',), ndim=2, finite=True)]",
                "hess": "ndarray[ArraySpec(dtypes=('float64',), ndim=2, finite=True)]",
            },
            "revision": 1,
        },
        "fedscs_xgb.atoms": {
            "fields": {
                "task": "{objective: Literal['softmax', 'logistic', 'squared_error'], feature_set_version: str, n_features: int, base_score: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], classes: tuple[str, ...] = default, multi_strategy: Literal['one_output_per_tree', 'multi_output_tree'] = default}",
                "model": "{first_tree: int = default, trees: bytes = default}",
                "edge_values": "ndarray[ArraySpec(dtypes=('float32',), ndim=1, finite=True)]",
                "edge_offsets": "ndarray[ArraySpec(dtypes=('int64',), ndim=1, finite=False)]",
            },
            "revision": 1,
        },
        "fedscs_xgb.histogram_reply": {
            "fields": {
                "n_trees": "int",
                "sums": "{values: ndarray[ArraySpec(dtypes=('uint16', 'uint32', 'uint64'), ndim=1, finite=False)], shares: dict[str, bytes] = default}",
            },
            "revision": 1,
        },
        "fedscs_xgb.histograms": {
            "fields": {
                "task": "{objective: Literal['softmax', 'logistic', 'squared_error'], feature_set_version: str, n_features: int, base_score: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], classes: tuple[str, ...] = default, multi_strategy: Literal['one_output_per_tree', 'multi_output_tree'] = default}",
                "model": "{first_tree: int = default, trees: bytes = default}",
                "edge_values": "ndarray[ArraySpec(dtypes=('float32',), ndim=1, finite=True)]",
                "edge_offsets": "ndarray[ArraySpec(dtypes=('int64',), ndim=1, finite=False)]",
                "splits": "{tree: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], node: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], feature: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], bin: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], default_left: ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)], left: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], right: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]}",
                "node_tree": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "node_id": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "frac_bits": "int",
                "gradient_bound": "float",
                "with_loss": "bool = default",
                "secure": "None | {neighbours: tuple[str, ...]} = default",
                "noise": "None | {mu: float, shares: int, scale: int = default} = default",
            },
            "revision": 1,
        },
        "fedscs_xgb.private_leaves": {
            "fields": {
                "task": "{objective: Literal['softmax', 'logistic', 'squared_error'], feature_set_version: str, n_features: int, base_score: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], classes: tuple[str, ...] = default, multi_strategy: Literal['one_output_per_tree', 'multi_output_tree'] = default}",
                "model": "{first_tree: int = default, trees: bytes = default}",
                "round": "{features: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], edge_values: ndarray[ArraySpec(dtypes=('float32',), ndim=1, finite=True)], edge_offsets: ndarray[ArraySpec(dtypes=('int64',), ndim=1, finite=False)]}",
                "splits": "{tree: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], node: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], feature: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], bin: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], default_left: ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)], left: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], right: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]}",
                "leaves": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "lattice": "{scale: int, grad_bound: float, hess_bound: float, grad_scale: None | float = default}",
                "noise": "{mu: float, shares: int, scale: int = default}",
                "secure": "None | {neighbours: tuple[str, ...]} = default",
                "word_bits": "int = default",
            },
            "revision": 1,
        },
        "fedscs_xgb.private_level": {
            "fields": {
                "task": "{objective: Literal['softmax', 'logistic', 'squared_error'], feature_set_version: str, n_features: int, base_score: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], classes: tuple[str, ...] = default, multi_strategy: Literal['one_output_per_tree', 'multi_output_tree'] = default}",
                "model": "{first_tree: int = default, trees: bytes = default}",
                "round": "{features: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], edge_values: ndarray[ArraySpec(dtypes=('float32',), ndim=1, finite=True)], edge_offsets: ndarray[ArraySpec(dtypes=('int64',), ndim=1, finite=False)]}",
                "splits": "{tree: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], node: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], feature: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], bin: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], default_left: ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)], left: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], right: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]}",
                "node_id": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "lattice": "{scale: int, grad_bound: float, hess_bound: float, grad_scale: None | float = default}",
                "noise": "{mu: float, shares: int, scale: int = default}",
                "secure": "None | {neighbours: tuple[str, ...]} = default",
                "word_bits": "int = default",
            },
            "revision": 1,
        },
        "fedscs_xgb.sketch": {
            "fields": {
                "task": "{objective: Literal['softmax', 'logistic', 'squared_error'], feature_set_version: str, n_features: int, base_score: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], classes: tuple[str, ...] = default, multi_strategy: Literal['one_output_per_tree', 'multi_output_tree'] = default}",
                "model": "{first_tree: int = default, trees: bytes = default}",
                "sketch": "Literal['summary', 'ddsketch'] = default",
                "summary_size": "int = default",
                "ddsketch_alpha": "float = default",
                "centers": "None | ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)] = default",
                "scales": "None | ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)] = default",
            },
            "revision": 1,
        },
        "fedscs_xgb.sketch_reply": {
            "fields": {
                "n_trees": "int",
                "summary": "None | {points: ndarray[ArraySpec(dtypes=('float32', 'float64'), ndim=2, finite=True)], total_weight: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], count: ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64'), ndim=1, finite=False)], n_missing: ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64'), ndim=1, finite=False)], missing_weight: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]} = default",
                "ddsketch": "None | {alpha: float, pos_keys: ndarray[ArraySpec(dtypes=('int32',), ndim=1, finite=False)], pos_weights: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], pos_offsets: ndarray[ArraySpec(dtypes=('int64',), ndim=1, finite=False)], neg_keys: ndarray[ArraySpec(dtypes=('int32',), ndim=1, finite=False)], neg_weights: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], neg_offsets: ndarray[ArraySpec(dtypes=('int64',), ndim=1, finite=False)], zero_weight: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)], count: ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64'), ndim=1, finite=False)], n_missing: ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32', 'int32', 'int64'), ndim=1, finite=False)], missing_weight: ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]} = default",
            },
            "revision": 1,
        },
        "fleet_counts": {
            "fields": {
                "feature_set_version": "str",
                "regression": "bool",
                "classes": "tuple[str, ...] = default",
                "frac_bits": "int = default",
                "secure": "None | {neighbours: tuple[str, ...]} = default",
                "noise": "None | {mu: float, shares: int, scale: int = default} = default",
                "shift": "float = default",
            },
            "revision": 1,
        },
        "fleet_sum": {
            "fields": {
                "sums": "{values: ndarray[ArraySpec(dtypes=('uint16', 'uint32', 'uint64'), ndim=1, finite=False)], shares: dict[str, bytes] = default}"
            },
            "revision": 1,
        },
        "grid_counts": {
            "fields": {
                "feature_set_version": "str",
                "feature": "ndarray[ArraySpec(dtypes=('uint8', 'int32', 'int64', 'uint32'), ndim=1, finite=False)]",
                "prefix": "ndarray[ArraySpec(dtypes=('uint8', 'int32', 'int64', 'uint32'), ndim=1, finite=False)]",
                "bits": "ndarray[ArraySpec(dtypes=('uint8', 'int32', 'int64', 'uint32'), ndim=1, finite=False)]",
                "step": "ndarray[ArraySpec(dtypes=('uint8', 'int32', 'int64', 'uint32'), ndim=1, finite=False)]",
                "secure": "None | {neighbours: tuple[str, ...]} = default",
                "noise": "None | {mu: float, shares: int, scale: int = default} = default",
                "word_bits": "int = default",
                "target": "bool = default",
            },
            "revision": 1,
        },
        "hello": {
            "fields": {
                "software_version": "str",
                "feature_set_version": "str = default",
                "n_features": "int = default",
                "capabilities": "tuple[str, ...] = default",
            },
            "revision": 1,
        },
        "model_announcement": {
            "fields": {
                "model_id": "str",
                "version": "int",
                "algorithm": "str",
                "feature_set_version": "str",
                "sha256": "bytes",
                "size": "int",
                "kind": "Literal['boosted', 'forest', 'single'] = default",
                "target": "str = default",
            },
            "revision": 1,
        },
        "model_push": {"fields": {"bundle": "bytes"}, "revision": 1},
        "model_rollback": {
            "fields": {
                "reason": "str = default",
                "model_id": "str = default",
                "version": "int = default",
                "replaces_model_id": "str = default",
                "replaces_version": "int = default",
                "client": "str = default",
                "issued_ns": "int = default",
                "key_id": "str = default",
                "signature": "bytes = default",
            },
            "revision": 1,
        },
        "model_status": {
            "fields": {
                "state": "Literal['active', 'rejected', 'unchanged']",
                "active_model_id": "str = default",
                "active_version": "int = default",
                "previous_version": "int = default",
                "reason": "str = default",
            },
            "revision": 1,
        },
        "ping": {"fields": {"payload": "bytes = default", "delay_s": "float = default"}, "revision": 1},
        "pong": {"fields": {"payload": "bytes = default"}, "revision": 1},
        "predictions": {
            "fields": {
                "model_id": "str",
                "model_version": "int",
                "classes": "tuple[str, ...]",
                "window_end_us": "ndarray[ArraySpec(dtypes=('int64',), ndim=1, finite=False)]",
                "predicted": "ndarray[ArraySpec(dtypes=('int16', 'int32'), ndim=1, finite=False)]",
                "probability": "ndarray[ArraySpec(dtypes=('float32',), ndim=1, finite=True)]",
                "latency_ms": "ndarray[ArraySpec(dtypes=('float32',), ndim=1, finite=True)]",
            },
            "revision": 1,
        },
        "secagg.confirm": {"fields": {"confirmations": "dict[str, bytes]"}, "revision": 1},
        "secagg.confirmations": {"fields": {"confirmations": "dict[str, bytes]"}, "revision": 1},
        "secagg.join": {
            "fields": {
                "roster": "dict[str, {cipher: bytes, mask: bytes}]",
                "neighbours": "tuple[str, ...]",
                "threshold": "int",
            },
            "revision": 1,
        },
        "secagg.keys": {"fields": {}, "revision": 1},
        "secagg.public_keys": {"fields": {"keys": "{cipher: bytes, mask: bytes}"}, "revision": 1},
        "secagg.unmask": {
            "fields": {
                "label": "str",
                "survivors": "tuple[str, ...]",
                "dropped": "tuple[str, ...]",
                "shares": "dict[str, bytes]",
            },
            "revision": 2,
        },
        "secagg.unmask_reply": {
            "fields": {
                "self_mask": "dict[str, bytes]",
                "pair_seeds": "dict[str, dict[str, bytes]]",
                "complaints": "dict[str, bytes] = default",
            },
            "revision": 2,
        },
        "status": {
            "fields": {
                "online": "bool",
                "active_model": "str = default",
                "n_windows": "int = default",
                "n_labelled": "int = default",
                "detail": "dict[str, str] = default",
            },
            "revision": 1,
        },
        "vertical_forest.abort": {"fields": {"reason": "str"}, "revision": 1},
        "vertical_forest.align": {
            "fields": {
                "feature_set_version": "str = default",
                "hop_us": "int = default",
                "tolerance_us": "int = default",
                "task": "Literal['classification', 'regression'] = default",
                "live_model": "str = default",
            },
            "revision": 1,
        },
        "vertical_forest.align_reply": {
            "fields": {
                "digests": "ndarray[ArraySpec(dtypes=('uint8',), ndim=2, finite=False)]",
                "off_grid": "int",
                "n_features": "int",
                "has_labels": "bool",
                "classes": "tuple[str, ...] = default",
            },
            "revision": 1,
        },
        "vertical_forest.deploy": {
            "fields": {
                "manifest": "{model_id: str, version: int, job: str, parties: tuple[str, ...], label_holder: str, task: Literal['classification', 'regression'], classes: tuple[str, ...], forest_digest: bytes, party_digests: tuple[bytes, ...], issued_ns: int, key_id: str, signature: bytes = default}"
            },
            "revision": 1,
        },
        "vertical_forest.directions": {
            "fields": {
                "model_job": "str",
                "keep": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "tree": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "node": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "offsets": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "rows": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
            },
            "revision": 1,
        },
        "vertical_forest.directions_reply": {
            "fields": {"go_left": "ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)]"},
            "revision": 1,
        },
        "vertical_forest.finish": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], party: int, n_parties: int, n_trees: int, n_classes: int, min_samples_split: int, min_samples_leaf: int, feature_set_version: str = default}",
                "level": "int",
                "partitions": "tuple[{owner: int, tree: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], node: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], sealed: bytes}, ...]",
            },
            "revision": 1,
        },
        "vertical_forest.finish_reply": {
            "fields": {
                "leaf_tree": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "leaf_node": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "values": "ndarray[ArraySpec(dtypes=('float64',), ndim=2, finite=True)]",
                "cover": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]",
                "digest": "bytes = default",
            },
            "revision": 1,
        },
        "vertical_forest.level": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], party: int, n_parties: int, n_trees: int, n_classes: int, min_samples_split: int, min_samples_leaf: int, feature_set_version: str = default}",
                "level": "int",
                "partitions": "tuple[{owner: int, tree: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], node: ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)], sealed: bytes}, ...]",
                "node_tree": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "node_id": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "feature_offsets": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "features": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "sealed_labels": "bytes = default",
            },
            "revision": 1,
        },
        "vertical_forest.level_reply": {
            "fields": {
                "has_split": "ndarray[ArraySpec(dtypes=('uint8',), ndim=1, finite=False)]",
                "gain": "ndarray[ArraySpec(dtypes=('float64',), ndim=1, finite=True)]",
                "feature": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
            },
            "revision": 1,
        },
        "vertical_forest.partition": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], party: int, n_parties: int, n_trees: int, n_classes: int, min_samples_split: int, min_samples_leaf: int, feature_set_version: str = default}",
                "level": "int",
                "node_tree": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "node_id": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
            },
            "revision": 1,
        },
        "vertical_forest.partition_reply": {"fields": {"sealed": "bytes"}, "revision": 1},
        "vertical_forest.result": {
            "fields": {
                "values": "ndarray[ArraySpec(dtypes=('float64',), ndim=2, finite=True)]",
                "classes": "tuple[str, ...] = default",
            },
            "revision": 1,
        },
        "vertical_forest.route": {
            "fields": {
                "model_job": "str",
                "keep": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
            },
            "revision": 1,
        },
        "vertical_forest.route_reply": {
            "fields": {"leaves": "ndarray[ArraySpec(dtypes=('uint8',), ndim=2, finite=False)]", "n_leaves": "int"},
            "revision": 1,
        },
        "vertical_forest.setup": {
            "fields": {
                "task": "{task: Literal['classification', 'regression'], criterion: Literal['gini', 'entropy', 'mse'], party: int, n_parties: int, n_trees: int, n_classes: int, min_samples_split: int, min_samples_leaf: int, feature_set_version: str = default}",
                "keep": "ndarray[ArraySpec(dtypes=('int32', 'int64'), ndim=1, finite=False)]",
                "bootstrap": "ndarray[ArraySpec(dtypes=('uint8', 'uint16', 'uint32'), ndim=2, finite=False)]",
            },
            "revision": 1,
        },
        "vertical_forest.setup_reply": {"fields": {"n_rows": "int", "sealed_labels": "bytes = default"}, "revision": 1},
    },
}
