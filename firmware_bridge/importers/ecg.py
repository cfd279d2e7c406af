"""ECG recordings bundled with pyhrv and pyphysio as WheelFed recordings with an "ecg" sensor.

- pyhrv ``files/SampleECG.txt``: a BITalino recording (OpenSignals text format), 1000 Hz, 22 s.
  The ECG is the 10-bit ADC column named "A2" in the file's JSON header (column 6). It is
  stored as the raw ADC counts (int16, lossless) with BITalino's ECG transfer function as the
  channel scale/offset: ECG[mV] = (ADC / 2^10 - 1/2) * VCC / G * 1000 with VCC = 3.3 V and
  G = 1100, i.e. scale 0.0029296875 mV/count, offset -1.5 mV. The file's 4-bit nSeq counter is
  checked so that a continuous clock is never laid over lost samples.
- pyphysio ``test_data/medical.txt.bz2``: 2048 Hz (its info file says 1024; pyphysio's own
  loader and the beat intervals say 2048), 120 s, four tab-separated columns ECG, EDA, BVP,
  respiration. The ECG is column 0: pyphysio's ``TestData.ecg`` reads it, and it is the only
  column whose power lies mostly above 5 Hz (QRS complexes). Its values carry 3 decimals
  (amplitudes of ~1 for the R wave: mV; the file states no unit), stored losslessly as int16
  with scale 0.001 mV.

Both start at clock 0 and have no label track (the activity is not annotated).
"""

from __future__ import annotations

import bz2
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..descriptors import ChannelSpec, SensorDescriptor
from ..frames import chunk_samples
from ..recording import RecordingMetadata
from .writing import RECORDING_SUFFIX, package_file, write_recording

ECG_SENSOR_ID = 2
PYHRV_RATE_HZ = 1000.0
PYPHYSIO_RATE_HZ = 2048.0
PYPHYSIO_ECG_COLUMN = 0
_BITALINO_VCC_MV, _BITALINO_ECG_GAIN, _BITALINO_ECG_BITS = 3300.0, 1100.0, 10


def _ecg_descriptor(rate_hz: float, scale: float, offset: float) -> SensorDescriptor:
    return SensorDescriptor(ECG_SENSOR_ID, "ecg", "ecg", rate_hz, (ChannelSpec("ecg", "mV", scale, offset),), "int16")


def _write(
    out_dir: str | Path,
    name: str,
    descriptor: SensorDescriptor,
    raw: np.ndarray,
    frame_samples: int,
    source: str,
    extra: dict[str, Any],
) -> Path:
    frames = chunk_samples(descriptor.sensor_id, raw.reshape(-1, 1), descriptor.sample_rate_hz, frame_samples)
    metadata = RecordingMetadata(
        session_id=name.replace("_", "-"),
        subject=None,
        source=source,
        descriptors=(descriptor,),
        created_us=0,
        extra=extra,
    )
    return write_recording(Path(out_dir) / f"{name}{RECORDING_SUFFIX}", metadata, frames)


def read_pyhrv_sample(path: Path | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """The raw ADC counts of the ECG channel and the OpenSignals header of pyhrv's SampleECG.txt."""
    path = path or package_file("pyhrv", "files/SampleECG.txt")
    with open(path, encoding="utf-8") as f:
        f.readline()
        header = next(iter(json.loads(f.readline().lstrip("# ")).values()))
    if header.get("sampling rate") != PYHRV_RATE_HZ:
        raise ValueError(f"{path}: sampling rate {header.get('sampling rate')} Hz, expected {PYHRV_RATE_HZ}")
    column = header["column"].index(header["label"][0])
    table = np.loadtxt(path, comments="#")
    lost = (np.diff(table[:, 0]) % 16) != 1
    if lost.any():
        raise ValueError(f"{path}: the nSeq counter skips at {int(lost.sum())} places: samples were lost")
    return table[:, column].astype(np.int16), header


def read_pyphysio_medical(path: Path | None = None) -> np.ndarray:
    """The ECG column of pyphysio's medical test data, in mV (float64)."""
    path = path or package_file("pyphysio", "test_data/medical.txt.bz2")
    with bz2.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter="\t")
    return table[:, PYPHYSIO_ECG_COLUMN]


def import_pyhrv(out_dir: str | Path, *, frame_samples: int = 50) -> Path:
    raw, header = read_pyhrv_sample()
    span_mv = _BITALINO_VCC_MV / _BITALINO_ECG_GAIN  # 3.0 mV exactly: the scale and offset are exact binary fractions
    descriptor = _ecg_descriptor(PYHRV_RATE_HZ, span_mv / 2**_BITALINO_ECG_BITS, -span_mv / 2)
    extra = {
        "dataset": "pyhrv files/SampleECG.txt",
        "device": header.get("device"),
        "date": header.get("date"),
        "time": header.get("time"),
        "adc_bits": _BITALINO_ECG_BITS,
    }
    return _write(out_dir, "pyhrv_sample_ecg", descriptor, raw, frame_samples, "pyhrv:files/SampleECG.txt", extra)


def import_pyphysio(out_dir: str | Path, *, frame_samples: int = 64) -> Path:
    ecg = read_pyphysio_medical()
    raw = np.round(ecg * 1000)
    if np.abs(raw / 1000 - ecg).max() > 1e-9 or np.abs(raw).max() > np.iinfo(np.int16).max:
        raise ValueError("pyphysio ECG is not in 0.001 mV steps within int16 range: int16 storage would lose data")
    descriptor = _ecg_descriptor(PYPHYSIO_RATE_HZ, 0.001, 0.0)
    extra = {"dataset": "pyphysio test_data/medical.txt.bz2", "column": PYPHYSIO_ECG_COLUMN}
    return _write(
        out_dir,
        "pyphysio_medical_ecg",
        descriptor,
        raw.astype(np.int16),
        frame_samples,
        "pyphysio:test_data/medical.txt.bz2",
        extra,
    )


def import_all(out_dir: str | Path) -> list[Path]:
    return [import_pyhrv(out_dir), import_pyphysio(out_dir)]
