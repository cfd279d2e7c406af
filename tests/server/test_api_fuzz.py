"""Property-based tests generated from the server's own OpenAPI document (schemathesis's
strategies under hypothesis): no input the schema admits -- nor the invalid ones schemathesis
derives from it -- gets a 5xx, on any operation."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.generation import GenerationMode

from aggregator.server.api import create_app
from tests.server.fleet_memory import fleet_data, running_server

pytestmark = pytest.mark.slow  # about a minute: 25 positive and 25 negative cases per operation


def test_no_input_is_a_server_error(tmp_path) -> None:
    with running_server(str(tmp_path / "r.db"), fleet_data(n_clients=3, n=40)) as (_sim, server):
        schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(server))
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 15
        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

                @given(case=operation.as_strategy(generation_mode=mode))
                @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
                def no_server_error(case) -> None:
                    response = case.call()
                    assert response.status_code < 500, (
                        case.method,
                        case.formatted_path,
                        case.query,
                        case.body,
                        response.text,
                    )

                try:
                    no_server_error()
                except Unsatisfiable:  # an operation without parameters has no invalid input
                    assert mode is GenerationMode.NEGATIVE
