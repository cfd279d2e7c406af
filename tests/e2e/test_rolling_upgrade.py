"""Rolling upgrades: the previous release's gateway against this aggregator, over mosquitto.

The previous release's gateway is its source as released -- ``edge_client``, ``shared`` and
``firmware_bridge`` of the git tag ``v<PROTOCOL_VERSION - 1>`` -- kept beside this test in
``releases/gateway-v<N>.tar.xz``, so a clone without tags or history runs it too (made with
``git archive v1 edge_client shared firmware_bridge | xz -9e``; where the tag is present the
archive is checked against it file by file). It is unpacked into the test's tmp dir and run as its
own ``python -m edge_client.cli gateway`` with that tree first on its path, beside gateways of this
tree. A job whose requests all exist in the old version trains with the old gateway (and equals
the simulation of the same fleet); a job that needs this version's messages leaves it out in
its survey, naming the version it needs -- neither fails half-way.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

import aggregator
from aggregator.algorithms import FedForest
from aggregator.feature_sets import survey_feature_sets
from aggregator.fleet import PASSWORD_ENV, train_on_fleet
from aggregator.jobs import JobSettings
from aggregator.rounds import RoundEngine
from shared.protocol.envelope import PROTOCOL_VERSION
from tests.e2e.fleet_support import (
    FEATURE_SET,
    client_data,
    fill_store,
    gateways_on_mosquitto,
)

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

REPO = Path(__file__).resolve().parents[2]
PREVIOUS = f"v{PROTOCOL_VERSION - 1}"
ARCHIVE = Path(__file__).with_name("releases") / f"gateway-{PREVIOUS}.tar.xz"
GATEWAY_PACKAGES = ("edge_client", "shared", "firmware_bridge")
NEW_GATEWAYS = ["gw-1", "gw-2"]
OLD = "gw-old"
PASSWORDS = {"aggregator": "agg-pw", **{g: f"pw-{g}" for g in [*NEW_GATEWAYS, OLD]}}

# Run inside the old tree: the old gateway's store, written by the old tree's own store code.
_FILL_OLD_STORE = textwrap.dedent("""
    import sys
    import numpy as np
    from edge_client.store import WindowRecord, WindowStore
    path, seed, feature_set = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    X = np.load(sys.argv[4])
    y = np.load(sys.argv[5], allow_pickle=False)
    with WindowStore(path) as store:
        for i in range(X.shape[0]):
            start = i * 1_000_000
            store.add(WindowRecord("s1", start, start + 1_000_000, X[i], feature_set))
            store.label_range("s1", start, start + 1_000_000, str(y[i]))
""")


def _git_files(tag: str) -> dict[str, bytes] | None:
    """The released tree's gateway files from git, or None where this clone lacks the tag."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return None
    found = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}"],
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        return None
    tar = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", tag, *GATEWAY_PACKAGES], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}


@pytest.fixture
def previous_release(tmp_path) -> Path:
    """The previous release's gateway source, unpacked into the test's tmp dir."""
    if not ARCHIVE.exists():
        pytest.fail(
            f"{ARCHIVE} (the previous protocol version's gateway) is missing -- this test checks the "
            "previous release's gateway against this aggregator and must not pass without it"
        )
    tree = tmp_path / PREVIOUS
    with tarfile.open(ARCHIVE) as archive:
        archive.extractall(tree, filter="data")
        packed = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}
    released = _git_files(PREVIOUS)
    if released is not None:
        assert packed == released, f"{ARCHIVE.name} differs from tag {PREVIOUS}"
    return tree


def _old_env(tree: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1", **extra)


def _old_store(tree: Path, tmp_path: Path, seed: int) -> Path:
    """The labelled windows ``fill_store(path, seed)`` writes, stored by the old tree's code."""
    import numpy as np

    from edge_client.store import WindowStore
    from edge_client.training_data import StoreTrainingData

    reference = tmp_path / "reference.db"
    fill_store(reference, seed)
    with WindowStore(reference) as store:
        data = StoreTrainingData(store).labelled(FEATURE_SET)
    np.save(tmp_path / "X.npy", data.X)
    np.save(tmp_path / "y.npy", np.asarray(data.y).astype(str))
    path = tmp_path / f"{OLD}.db"
    subprocess.run(
        [
            sys.executable,
            "-c",
            _FILL_OLD_STORE,
            str(path),
            str(seed),
            FEATURE_SET,
            str(tmp_path / "X.npy"),
            str(tmp_path / "y.npy"),
        ],
        cwd=tree,
        env=_old_env(tree),
        check=True,
        capture_output=True,
        timeout=60,
    )
    return path


def _start_old_gateway(tree: Path, port: int, store: Path, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "edge_client.cli",
                "gateway",
                "--client-id",
                OLD,
                "--port",
                str(port),
                "--protocol",
                "5",
                "--store",
                str(store),
                "--stats-every",
                "0",
            ],
            cwd=tree,
            env=_old_env(tree, **{PASSWORD_ENV: PASSWORDS[OLD]}),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_the_previous_release_s_gateway_trains_or_is_left_out_with_the_version_it_needs(
    tmp_path, previous_release, caplog
) -> None:
    tree = previous_release
    old_version = subprocess.run(
        [sys.executable, "-c", "from shared.protocol.envelope import PROTOCOL_VERSION;print(PROTOCOL_VERSION)"],
        cwd=tree,
        env=_old_env(tree),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert old_version == str(PROTOCOL_VERSION - 1), f"tag {PREVIOUS} speaks protocol {old_version}"
    stores = {g: tmp_path / f"{g}.db" for g in NEW_GATEWAYS}
    for i, path in enumerate(stores.values()):
        fill_store(path, i)
    stores[OLD] = _old_store(tree, tmp_path, seed=2)

    with gateways_on_mosquitto(tmp_path, PASSWORDS) as fleet:
        old = _start_old_gateway(tree, fleet.port, stores[OLD], tmp_path / f"{OLD}.log")
        try:
            engine = RoundEngine(fleet.agg)
            for g in NEW_GATEWAYS:
                fleet.processes.start(g, "--store", str(stores[g]))
            everyone = [*NEW_GATEWAYS, OLD]
            fleet.presence.wait(everyone, online=True, timeout_s=45)
            fleet.presence.close()

            # A job that needs this version's messages: the old gateway is left out by the survey.
            private = FedForest(n_trees=2, max_depth=2, feature_set_version=FEATURE_SET)  # the private default
            choice = survey_feature_sets(engine, "job-private", everyone, FEATURE_SET, deadline_s=20, algorithm=private)
            assert choice.clients == tuple(NEW_GATEWAYS)
            why = choice.left_out[OLD]
            assert f"speaks protocol version {PROTOCOL_VERSION - 1}, this job needs {PROTOCOL_VERSION}" in why
            assert "fedforest.dp_histograms" in why and "update the gateway" in why
            assert engine.peer_versions == {OLD: PROTOCOL_VERSION - 1, **{g: PROTOCOL_VERSION for g in NEW_GATEWAYS}}
            behind = [r.getMessage() for r in caplog.records if "one behind this aggregator" in r.getMessage()]
            assert len(behind) == 1 and OLD in behind[0]

            # A job whose requests the old version has: it trains with the old gateway, in its version.
            plain = FedForest(
                n_trees=2, max_depth=3, protocol="histogram", secure_aggregation=False, feature_set_version=FEATURE_SET
            )
            model, job = train_on_fleet(
                plain, fleet.agg, clients=everyone, seed=5, engine=engine, settings=JobSettings(deadline_s=30)
            )
            assert job.clients == sorted(everyone) and not job.rejected
            assert model == aggregator.simulate(plain, client_data(stores), seed=5)
        finally:
            old.terminate()
            try:
                old.wait(10)
            except subprocess.TimeoutExpired:
                old.kill()
    log = (tmp_path / f"{OLD}.log").read_text(errors="replace")
    assert "Traceback" not in log, log[-2000:]
