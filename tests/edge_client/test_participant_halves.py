"""The participant serves the client halves it is given (the plugin list), and announces them."""

import numpy as np

from edge_client.algorithms import CLIENT_HALVES, FedForestClient
from edge_client.participant import Participant
from edge_client.training_data import ClientData
from shared.transport.memory import MemoryBroker, MemoryTransport


def _participant(**kwargs) -> Participant:
    data = ClientData("gw-1", np.zeros((4, 2), np.float32), np.array([0, 1, 0, 1]))
    return Participant(MemoryTransport(MemoryBroker(), "gw-1"), data, **kwargs)


def test_default_halves_are_every_registered_algorithm():
    participant = _participant()
    assert set(participant.halves) == {half.capability for half in CLIENT_HALVES}
    assert participant.capabilities[:3] == ("ping", "evaluate", "secure_aggregation")
    assert set(participant.capabilities[3:]) == {"fedscs_xgb", "fedforest", "fedga_tree", "vertical_forest"}


def test_a_participant_serves_only_the_halves_it_is_given():
    participant = _participant(halves=(FedForestClient,))
    assert participant.capabilities == ("ping", "evaluate", "secure_aggregation", "fedforest")
    assert isinstance(participant.halves["fedforest"], FedForestClient)
