"""Streaming preprocessing on the gateway: resample onto the absolute 20 Hz grid, low-pass, window.

Per sensor (``sensor_stream.py``): a stateful polyphase resampler whose Kaiser-windowed-sinc FIR
is the anti-aliasing filter and whose outputs sit on the common clock's grid ``k * 50 000 us``
with the FIR delay compensated (``resample.py``), then a causal 5th-order Butterworth low-pass
with carried state on those 20 Hz samples (``filters.py``). Across sensors (``windows.py``): 4 s
windows every 2 s anchored on that grid, emitted as soon as every sensor has delivered them,
skipped across gaps. The output for a given input is bit-identical whatever the chunking —
frames of 1 or 10 000 samples, live or replayed.

NumPy only: the gateway's memory budget (80 MB RSS) cannot afford SciPy (``import scipy.signal``
alone is ~108 MB). That is why the Butterworth runs after the resampler, at 20 Hz, rather than
before it at the sensor's rate as in FedSCS-XGB: a recursive filter in numpy is a Python loop
over time steps, affordable at 20 steps per second, not at 250-2048. The deviation from the
paper's order and its measured size are documented in ``filters.py``.
"""

from .config import PipelineConfig
from .filters import StreamingLowPass, butter_lowpass_sos, lowpass_sos, stage_sos
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
    "butter_lowpass_sos",
    "kernel_weights",
    "lowpass_sos",
    "resample_ratio",
    "stage_sos",
    "windows_from_arrays",
]
