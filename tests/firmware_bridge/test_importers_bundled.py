"""Importers of the bundled real datasets: subjects, series, samples, clocks, labels, scaling."""

from __future__ import annotations

import bz2
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from scipy.signal import welch

from firmware_bridge.frames import SampleFrame, to_physical
from firmware_bridge.importers import ecg, seglearn_watch
from firmware_bridge.recording import Recording


def physical(rec: Recording, sensor_id: int) -> tuple[np.ndarray, list[SampleFrame]]:
    frames = rec.sample_frames(sensor_id)
    return np.concatenate([to_physical(f, rec.descriptors[sensor_id]) for f in frames]), frames


def assert_continuous_clock(frames: list[SampleFrame], rate_hz: float, t0_us: int = 0) -> None:
    starts = np.cumsum([0] + [f.samples.shape[0] for f in frames[:-1]])
    assert [f.timestamp_us for f in frames] == [t0_us + round(i * 1e6 / rate_hz) for i in starts]
    assert [f.seq for f in frames] == list(range(len(frames)))


def test_seglearn_gives_one_recording_per_subject_with_every_series(imported: dict[str, list[Path]]) -> None:
    data = seglearn_watch.load_dataset()
    paths = imported["seglearn"]
    assert [p.name for p in paths] == [f"seglearn_watch_s{s:02d}.wfrec" for s in range(1, 11)]
    total = 0
    for subject, path in enumerate(paths, start=1):
        rec = Recording.load(path)
        index = np.flatnonzero(np.asarray(data["subject"]) == subject)
        assert len(index) == 14 and rec.metadata.subject == f"seglearn-{subject:02d}"
        x = np.concatenate([data["X"][i] for i in index])
        values, frames = physical(rec, seglearn_watch.WATCH_SENSOR_ID)
        np.testing.assert_array_equal(values, x.astype(np.float32))  # float32 is the only rounding
        assert np.abs(values - x).max() < 1e-6
        assert max(f.samples.shape[0] for f in frames) == 25
        assert_continuous_clock(frames, 50.0)
        # One label interval per series, back to back, with the exercise name, covering its samples.
        labels = [str(data["y_labels"][data["y"][i]]) for i in index]
        assert [a.label for a in rec.annotations] == labels
        lengths = [len(data["X"][i]) for i in index]
        bounds = np.cumsum([0] + lengths) * 20_000
        assert [(a.start_us, a.end_us) for a in rec.annotations] == list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))
        assert {f.timestamp_us for f in frames} >= set(bounds[:-1].tolist())  # frames never straddle two series
        assert [s["side"] for s in rec.metadata.extra["series"]] == [int(data["side"][i]) for i in index]
        total += len(values)
    assert total == 244_102  # 1.36 h at 50 Hz


def test_pyhrv_ecg_keeps_the_adc_counts_and_the_bitalino_transfer_function(imported: dict[str, list[Path]]) -> None:
    rec = Recording.load(imported["ecg"][0])
    table = np.loadtxt(bundled_file("pyhrv", "files/SampleECG.txt"), comments="#")
    values, frames = physical(rec, ecg.ECG_SENSOR_ID)
    d = rec.descriptors[ecg.ECG_SENSOR_ID]
    assert (d.kind, d.sample_rate_hz, d.sample_format) == ("ecg", 1000.0, "int16")
    np.testing.assert_array_equal(np.concatenate([f.samples[:, 0] for f in frames]), table[:, 5])
    np.testing.assert_allclose(values[:, 0], (table[:, 5] / 1024 - 0.5) * 3.3 / 1100 * 1000, rtol=0, atol=1e-12)
    assert len(values) == 22_350 and rec.annotations == []
    assert_continuous_clock(frames, 1000.0)


def test_pyphysio_ecg_is_column_0_at_2048_hz_stored_losslessly(imported: dict[str, list[Path]]) -> None:
    rec = Recording.load(imported["ecg"][1])
    with bz2.open(bundled_file("pyphysio", "test_data/medical.txt.bz2"), "rt") as f:
        table = np.loadtxt(f, delimiter="\t")
    # Column 0 is the only one whose power lies mostly above 5 Hz: QRS complexes.
    share = []
    for column in table.T:
        freq, power = welch(column - column.mean(), fs=2048, nperseg=4096)
        share.append(power[freq > 5].sum() / power.sum())
    assert int(np.argmax(share)) == ecg.PYPHYSIO_ECG_COLUMN and share[0] > 0.5 > max(share[1:])
    values, frames = physical(rec, ecg.ECG_SENSOR_ID)
    assert rec.descriptors[ecg.ECG_SENSOR_ID].sample_rate_hz == 2048.0
    assert len(values) == 245_760  # 120 s
    np.testing.assert_allclose(values[:, 0], table[:, 0], rtol=0, atol=1e-12)
    assert_continuous_clock(frames, 2048.0)
    assert frames[-1].timestamp_us == round((245_760 - 64) * 1e6 / 2048)


def test_an_import_is_reproducible_byte_for_byte(tmp_path: Path, imported: dict[str, list[Path]]) -> None:
    again = ecg.import_pyhrv(tmp_path)
    assert again.read_bytes() == imported["ecg"][0].read_bytes()
    assert not list(tmp_path.glob("*.part"))


def test_a_missing_package_is_reported_with_the_install_command() -> None:
    with pytest.raises(FileNotFoundError, match="pip install --no-deps no_such_pkg_wf"):
        from firmware_bridge.importers.writing import package_file

        package_file("no_such_pkg_wf", "data.txt")


def bundled_file(package: str, relative: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations
    return Path(list(spec.submodule_search_locations)[0]) / relative
