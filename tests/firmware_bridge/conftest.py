"""The bundled datasets imported once per test session (about 2 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from firmware_bridge.importers import ecg, seglearn_watch


@pytest.fixture(scope="session")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    out = tmp_path_factory.mktemp("imported")
    return {"seglearn": seglearn_watch.import_all(out), "ecg": ecg.import_all(out)}
