"""Inference engines on the gateway: the numpy engine always, the TFLite engine when a LiteRT
interpreter (and the compiler's flatbuffers/tflite packages) are installed and it is faster.

Both take the model's input matrix (``shared.model.model_inputs``) as float32 values -- the
TFLite engine compares in float32, so the gateway feeds both the same float32 features and
they then agree bit for bit on the leaves (``shared/model/tflite.py``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Literal

import numpy as np

from shared.model import TreeEnsemble

log = logging.getLogger(__name__)

__all__ = ["Engine", "choose_engine"]

EnginePreference = Literal["auto", "numpy", "tflite"]


@dataclass(frozen=True)
class Engine:
    """``raw(X)``: the model's ``predict_raw`` for float32-valued inputs."""

    name: str
    raw: Callable[[np.ndarray], np.ndarray]
    single_row_us: float = float("nan")


def _numpy(model: TreeEnsemble) -> Engine:
    return Engine("numpy", model.predict_raw)


def _tflite(model: TreeEnsemble) -> Engine:
    from shared.model.tflite import TfliteEngine, compile_tflite

    engine = TfliteEngine(compile_tflite(model))
    return Engine("tflite", engine.raw)


def _single_row_us(engine: Engine, row: np.ndarray, repeats: int = 50) -> float:
    engine.raw(row)  # warm up
    started = time.perf_counter()
    for _ in range(repeats):
        engine.raw(row)
    return (time.perf_counter() - started) / repeats * 1e6


def choose_engine(model: TreeEnsemble, n_inputs: int, preference: EnginePreference = "auto") -> Engine:
    """The engine to run ``model`` with: ``"numpy"``, ``"tflite"`` (error if unavailable), or
    ``"auto"``: TFLite if it can be built here and is faster on a single row, else numpy."""
    numpy_engine = _numpy(model)
    if preference == "numpy":
        return numpy_engine
    try:
        tflite_engine = _tflite(model)
    except ImportError as exc:
        if preference == "tflite":
            raise
        log.info("TFLite engine unavailable; using numpy", extra={"reason": str(exc)})
        return numpy_engine
    row = np.zeros((1, n_inputs), dtype=np.float32)
    timed = [Engine(e.name, e.raw, _single_row_us(e, row)) for e in (numpy_engine, tflite_engine)]
    if preference == "tflite":
        return timed[1]
    best = min(timed, key=lambda e: e.single_row_us)
    log.info("inference engine chosen", extra={e.name + "_us": round(e.single_row_us, 1) for e in timed})
    return best
