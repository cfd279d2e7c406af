"""Streaming preprocessing on the gateway: low-pass, resample onto the absolute 20 Hz grid, window.

Per sensor (``sensor_stream.py``): causal Butterworth low-pass with carried state
(``filters.py``), then a stateful polyphase resampler whose outputs sit on the common clock's grid
``k * 50 000 us`` with the FIR delay compensated (``resample.py``). Across sensors
(``windows.py``): 4 s windows every 2 s anchored on that grid, emitted as soon as every sensor has
delivered them, skipped across gaps. The output for a given input is bit-identical whatever the
chunking — frames of 1 or 10 000 samples, live or replayed.
"""

from .config import PipelineConfig
from .filters import StreamingLowPass, lowpass_sos
from .resample import StreamResampler, kernel_weights, resample_ratio
from .sensor_stream import SensorStats
from .windows import PipelineStats, Window, WindowAssembler, windows_from_arrays

__all__ = [
    "PipelineConfig",
    "PipelineStats",
    "SensorStats",
    "StreamResampler",
    "StreamingLowPass",
    "Window",
    "WindowAssembler",
    "kernel_weights",
    "lowpass_sos",
    "resample_ratio",
    "windows_from_arrays",
]
