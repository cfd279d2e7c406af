"""Deploying a vertical Federated Forest in the simulation: the signed
manifest, each party's stored partial trees, reload after a restart, the refusals, the master's
model file, and live prediction whose stored results equal the model's own prediction."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aggregator.algorithms.vertical_forest import VerticalFederatedForest, deploy_to_parties, predict_on_parties
from aggregator.algorithms.vertical_forest_model import VerticalForestModel
from aggregator.jobs import FederatedJob, JobSettings, TrainingError
from aggregator.simulate import Simulation
from edge_client.algorithms.vertical_forest import PartySetup, VerticalForestClient
from edge_client.store import WindowRecord, WindowStore
from edge_client.training_data import PartyData, StoreTrainingData
from shared.signing import BadSignature, SigningKey
from shared.vertical_manifest import forest_digest, partial_digest, verify_manifest
from shared.vertical_party_key import new_party_key

PARTIES = ("gw-a", "gw-b")
HOP = 2_000_000
SIGNER = SigningKey(bytes(range(32)))
OTHER = SigningKey(bytes(range(1, 33)))


def _fill(store: WindowStore, X: np.ndarray, rows: range, version: str, labels: np.ndarray | None) -> None:
    for i in rows:
        store.add(WindowRecord("s1", i * HOP, (i + 1) * HOP, X[i], version))
        if labels is not None:
            store.label_range("s1", i * HOP, (i + 1) * HOP, str(labels[i]))


@pytest.fixture
def fleet(tmp_path):
    """Two parties (gw-a holds labels) trained on the first 120 windows of their stores."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 4))
    y = np.where(X[:, 0] - X[:, 3] > 0, "push", "sit")
    stores = {p: WindowStore(tmp_path / f"{p}.db") for p in PARTIES}
    _fill(stores["gw-a"], X[:, :2], range(120), "va", y)
    _fill(stores["gw-b"], X[:, 2:], range(120), "vb", None)
    key = new_party_key()
    parties = []
    for p in PARTIES:
        w = StoreTrainingData(stores[p]).party_windows("")
        parties.append(PartyData(p, w.X, w.y, party_key=key, sessions=w.sessions, start_us=w.start_us))
    sim = Simulation(parties)
    for p in PARTIES:
        sim.participants[p].halves["vertical_forest"].configure(
            PartySetup(p, tmp_path / f"{p}-models", (SIGNER.verify_key,), stores[p])
        )
    config = VerticalFederatedForest(n_trees=4, max_depth=4, min_samples_leaf=3)
    model = config.run_in(sim, seed=1, job_id="train-1")
    yield sim, model, stores, X, key, tmp_path
    for s in stores.values():
        s.close()


def _job(sim, name):
    return FederatedJob(sim.engine, list(PARTIES), job_id=name, settings=JobSettings(deadline_s=10))


def _half(sim, p) -> VerticalForestClient:
    return sim.participants[p].halves["vertical_forest"]


def test_deploy_signs_a_manifest_each_party_checks_and_keeps_across_a_restart(fleet):
    sim, model, stores, X, key, tmp = fleet
    deployed = deploy_to_parties(_job(sim, "deploy-1"), model, SIGNER, model_id="activity-vf", version=1)
    m = deployed.manifest
    assert verify_manifest(m, SIGNER.verify_key) == SIGNER.verify_key
    assert m.parties == PARTIES and m.label_holder == "gw-a" and m.job == "train-1"
    assert m.forest_digest == forest_digest(model.trees, model.n_features)
    for i, p in enumerate(PARTIES):
        assert m.party_digests[i] == partial_digest("train-1", model.partial[i])
        assert (tmp / f"{p}-models" / "vertical" / "activity-vf.cbor").is_file()
    # a restarted party (a new half on the same folder) reloads the very same partial trees
    for i, p in enumerate(PARTIES):
        fresh = VerticalForestClient(PartyData(p, np.zeros((1, 1)), None, party_key=key))
        fresh.configure(PartySetup(p, tmp / f"{p}-models", (SIGNER.verify_key,), stores[p]))
        assert fresh.deployed["activity-vf"].manifest == m
        assert partial_digest("train-1", fresh.deployed["activity-vf"].trees) == m.party_digests[i]
    # redeploying the same manifest is "unchanged"; the master's file round-trips and is checked
    assert (
        deploy_to_parties(_job(sim, "deploy-2"), model, SIGNER, model_id="activity-vf", version=2).manifest.version == 2
    )
    data = deployed.to_bytes()
    back = VerticalForestModel.from_bytes(data, [SIGNER.verify_key])
    assert back.manifest == m and forest_digest(back.trees, back.n_features) == m.forest_digest
    with pytest.raises(BadSignature, match="trusts only"):
        VerticalForestModel.from_bytes(data, [OTHER.verify_key])
    tampered = dataclasses.replace(
        deployed, trees=(dataclasses.replace(model.trees[0], values=model.trees[0].values * 0), *model.trees[1:])
    )
    tampered = dataclasses.replace(tampered, manifest=m)
    with pytest.raises(ValueError, match="do not match its signed manifest"):
        VerticalForestModel.from_bytes(tampered.to_bytes(), [SIGNER.verify_key])


def test_a_party_refuses_a_foreign_signature_a_downgrade_and_a_wrong_digest(fleet):
    sim, model, stores, X, key, tmp = fleet
    with pytest.raises(TrainingError, match="gw-a: .*bad_signature.*gw-b: .*bad_signature|trusts only"):
        deploy_to_parties(_job(sim, "d-1"), model, OTHER, model_id="vf", version=1)
    deploy_to_parties(_job(sim, "d-2"), model, SIGNER, model_id="vf", version=3)
    with pytest.raises(TrainingError, match="downgrade"):
        deploy_to_parties(_job(sim, "d-3"), model, SIGNER, model_id="vf", version=2)
    swapped = dataclasses.replace(model, party_digests=model.party_digests[::-1])
    with pytest.raises(TrainingError, match="digest_mismatch"):
        deploy_to_parties(_job(sim, "d-4"), swapped, SIGNER, model_id="vf", version=4)
    assert all(_half(sim, p).deployed["vf"].manifest.version == 3 for p in PARTIES)
    for p in PARTIES:  # what is on disk is still v3
        fresh = VerticalForestClient(PartyData(p, np.zeros((1, 1)), None, party_key=key))
        fresh.configure(PartySetup(p, tmp / f"{p}-models", (SIGNER.verify_key,)))
        assert fresh.deployed["vf"].manifest.version == 3


def test_a_refusal_by_one_party_says_what_the_others_now_hold_and_that_a_rerun_needs_a_higher_version(fleet):
    sim, model, stores, X, key, tmp = fleet
    _half(sim, "gw-b").configure(PartySetup("gw-b", tmp / "gw-b-models", ()))  # no --trust: it cannot verify
    with pytest.raises(
        TrainingError,
        match=r"^deploying vf v1: party gw-b did not keep it \(gw-b: .*no_trusted_key"
        r".*\); gw-a now holds vf v1, so deploying again needs a version above 1$",
    ):
        deploy_to_parties(_job(sim, "d-1"), model, SIGNER, model_id="vf", version=1)
    assert _half(sim, "gw-a").deployed["vf"].manifest.version == 1 and "vf" not in _half(sim, "gw-b").deployed
    with pytest.raises(TrainingError, match="no party holds vf v2, so deploying again needs a version above 2"):
        deploy_to_parties(_job(sim, "d-2"), model, OTHER, model_id="vf", version=2)


def test_live_prediction_stores_the_models_prediction_on_every_party_and_only_new_windows(fleet):
    sim, model, stores, X, key, tmp = fleet
    deployed = deploy_to_parties(_job(sim, "deploy"), model, SIGNER, model_id="vf", version=1)
    first = predict_on_parties(_job(sim, "live-1"), deployed, live=True)
    assert first.alignment.common == 120
    for p in PARTIES:
        got = stores[p].predictions()
        assert len(got) == 120 and {r.model for r in got} == {"vf:v1"}
        np.testing.assert_array_equal([r.label for r in got], model.predict([X[:120, :2], X[:120, 2:]]))
        np.testing.assert_allclose(
            np.stack([r.probabilities for r in got]), model.predict_proba([X[:120, :2], X[:120, 2:]]), rtol=1e-6
        )
    # new windows arrive (gw-b misses one): the next run predicts exactly the new common ones
    _fill(stores["gw-a"], X[:, :2], range(120, 150), "va", None)
    _fill(stores["gw-b"], X[:, 2:], [i for i in range(120, 150) if i != 130], "vb", None)
    second = predict_on_parties(_job(sim, "live-2"), deployed, live=True)
    assert second.alignment.common == 29 and second.alignment.missing == (1, 0)
    rows = [i for i in range(120, 150) if i != 130]
    np.testing.assert_array_equal(second.predictions, model.predict([X[rows, :2], X[rows, 2:]]))
    for p in PARTIES:
        assert len(stores[p].predictions()) == 149
    assert predict_on_parties(_job(sim, "live-3"), deployed, live=True).alignment.common == 0


def test_live_prediction_with_a_party_missing_is_an_error(fleet):
    sim, model, stores, X, key, tmp = fleet
    deployed = deploy_to_parties(_job(sim, "deploy"), model, SIGNER, model_id="vf", version=1)
    sim.transports["gw-b"].drop()
    with pytest.raises(TrainingError, match="gw-b"):
        predict_on_parties(
            FederatedJob(sim.engine, list(PARTIES), job_id="live-x", settings=JobSettings(deadline_s=1)),
            deployed,
            live=True,
        )
    assert stores["gw-a"].predictions() == []
    with pytest.raises(ValueError, match="deployed model"):
        predict_on_parties(_job(sim, "live-y"), model, live=True)


def test_a_tampered_or_foreign_stored_model_is_not_loaded_at_start(fleet, caplog):
    sim, model, stores, X, key, tmp = fleet
    deploy_to_parties(_job(sim, "deploy"), model, SIGNER, model_id="vf", version=1)
    path = tmp / "gw-b-models" / "vertical" / "vf.cbor"
    data = bytearray(path.read_bytes())
    owned = np.concatenate([t.threshold[t.owned] for t in model.partial[1]])
    assert owned.size, "gw-b owns splits: its thresholds are in the file"
    at = data.find(owned[0].tobytes())
    assert at > 0
    data[at : at + 8] = np.float64(1e6).tobytes()  # a threshold changed on disk
    path.write_bytes(bytes(data))
    fresh = VerticalForestClient(PartyData("gw-b", np.zeros((1, 1)), None, party_key=key))
    fresh.configure(PartySetup("gw-b", tmp / "gw-b-models", (SIGNER.verify_key,)))
    assert "vf" not in fresh.deployed and "stored vertical model not loaded" in caplog.text
    untrusting = VerticalForestClient(PartyData("gw-a", np.zeros((1, 1)), None, party_key=key))
    untrusting.configure(PartySetup("gw-a", tmp / "gw-a-models", (OTHER.verify_key,)))
    assert untrusting.deployed == {}
    for p in PARTIES:  # a gateway started without --trust
        _half(sim, p).configure(PartySetup(p, tmp / f"{p}-models", ()))
    with pytest.raises(TrainingError, match="no_trusted_key"):
        deploy_to_parties(_job(sim, "deploy-2"), model, SIGNER, model_id="vf", version=2)


def test_the_model_file_keeps_the_alignment_grid_and_a_wrong_label_holder_fails_the_job(fleet):
    sim, model, stores, X, key, tmp = fleet
    config = VerticalFederatedForest(n_trees=2, max_depth=2, hop_us=HOP, tolerance_us=HOP // 4)
    gridded = config.run_in(sim, seed=2, job_id="grid")
    deployed = deploy_to_parties(_job(sim, "deploy"), gridded, SIGNER, model_id="vf-grid", version=1)
    back = VerticalForestModel.from_bytes(deployed.to_bytes(), SIGNER.verify_key)
    assert (back.metadata.hop_us, back.metadata.tolerance_us) == (HOP, HOP // 4)
    assert back.metadata.job == "grid" and back.metadata.label_holder == "gw-a"
    with pytest.raises(TrainingError, match="the labels are on gw-a, not on gw-b"):
        dataclasses.replace(config, label_holder="gw-b").run_in(sim, seed=2, job_id="wrong-holder")
    assert all("wrong-holder" not in _half(sim, p).forests and not _half(sim, p).jobs for p in PARTIES)


def test_a_live_result_failing_part_way_through_storing_leaves_nothing_and_the_rerun_stores_each_window_once(fleet):
    """Storing a live result fails after 50 of 120 predictions on every party (an injected SQLite
    error): the predictions and the model's mark are one transaction, so nothing is kept, and
    the next run predicts the same windows again -- each stored exactly once, none lost."""
    sim, model, stores, X, key, tmp = fleet
    deployed = deploy_to_parties(_job(sim, "deploy"), model, SIGNER, model_id="vf", version=1)
    for p in PARTIES:
        stores[p]._writer.execute("""CREATE TEMP TRIGGER fail_after_50 BEFORE INSERT ON predictions
            WHEN (SELECT count(*) FROM predictions) >= 50 BEGIN SELECT RAISE(ABORT, 'injected'); END""")
    with pytest.raises(TrainingError, match="sharing the prediction"):
        predict_on_parties(_job(sim, "live-1"), deployed, live=True)
    for p in PARTIES:
        assert stores[p].predictions() == []
        stores[p]._writer.execute("DROP TRIGGER temp.fail_after_50")
    assert predict_on_parties(_job(sim, "live-2"), deployed, live=True).alignment.common == 120
    for p in PARTIES:
        got = stores[p].predictions()
        assert len(got) == 120 and len({r.window_id for r in got}) == 120
        np.testing.assert_array_equal([r.label for r in got], model.predict([X[:120, :2], X[:120, 2:]]))
    assert predict_on_parties(_job(sim, "live-3"), deployed, live=True).alignment.common == 0
