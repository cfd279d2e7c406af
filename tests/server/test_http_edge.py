"""The API's edge: the Host allow-list, tokens and the body-size limit are checked before a
route runs and before any body byte is read; every job setting has bounds in the OpenAPI
schema and they hold."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi.testclient import TestClient

from aggregator.server.api import create_app
from aggregator.server.guards import required_role
from aggregator.server.job_bounds import SETTING_BOUNDS
from tests.server.fleet_memory import fleet_data, running_server

MIB = 1024 * 1024


def call(app, method: str, path: str, headers: dict[str, str], chunks: list[bytes]) -> tuple[int, dict, int]:
    """One request straight through the ASGI app, its body in ``chunks``: the status, the
    answer's headers, and how many body bytes the app pulled from the connection."""
    pulled, answer = 0, {"status": None, "headers": {}}
    pending = list(chunks)

    async def receive():
        nonlocal pulled
        if not pending:
            return {"type": "http.disconnect"}
        chunk = pending.pop(0)
        pulled += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    async def send(message):
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
            answer["headers"] = {k.decode().lower(): v.decode() for k, v in message["headers"]}

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in {"host": "127.0.0.1:8080", **headers}.items()],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
    }
    asyncio.run(app(scope, receive, send))
    return answer["status"], answer["headers"], pulled


@pytest.fixture
def server(tmp_path):
    with running_server(
        str(tmp_path / "r.db"),
        fleet_data(n_clients=1),
        read_tokens=("r-token",),
        operator_tokens=("o-token",),
        allowed_hosts=("localhost", "127.0.0.1", "[::1]"),
    ) as (_sim, srv):
        yield srv


@pytest.mark.parametrize(
    "host, status",
    [
        ("attacker.example", 400),
        ("attacker.example:8080", 400),
        ("127.0.0.1.attacker.example", 400),
        ("127.0.0.1:8080", 200),
        ("localhost:8080", 200),
        ("[::1]:8080", 200),
        ("LOCALHOST", 200),
    ],
)
def test_only_loopback_host_names_reach_the_api_by_default(tmp_path, host, status) -> None:
    """No tokens, the default config: a DNS-rebinding page's own name is refused."""
    with running_server(
        str(tmp_path / "r.db"), fleet_data(n_clients=1), allowed_hosts=("localhost", "127.0.0.1", "[::1]")
    ) as (_sim, server):
        assert server.config.allowed_hosts == type(server.config)().allowed_hosts  # the default
        got, _, _ = call(create_app(server), "GET", "/api/gateways", {"host": host}, [b""])
        assert got == status


def test_configured_host_names_and_a_specific_listen_address_are_allowed(tmp_path) -> None:
    with running_server(
        str(tmp_path / "r.db"), fleet_data(n_clients=1), allowed_hosts=("wheelfed.clinic.lan",), listen="10.1.2.3"
    ) as (_sim, server):
        app = create_app(server)
        for host, status in (
            ("wheelfed.clinic.lan", 200),
            ("10.1.2.3:8080", 200),
            ("127.0.0.1", 400),
            ("attacker.example", 400),
        ):
            assert call(app, "GET", "/api/health", {"host": host}, [b""])[0] == status, host


def test_a_request_without_a_valid_token_is_refused_before_its_body_is_read(server) -> None:
    app = create_app(server)
    body = json.dumps({"model_id": "act", "config": {"pad": "x" * 100}, "clients": ["gw-1"] * (9 * MIB // 8)}).encode()
    chunks = [body[i : i + 64 * 1024] for i in range(0, len(body), 64 * 1024)]
    for headers, status in (
        ({}, 401),
        ({"authorization": "Bearer nope"}, 401),
        ({"authorization": "Bearer caf\u00e9"}, 401),  # non-ASCII: was a 500
        ({"authorization": "Bearer r-token"}, 403),
    ):
        got, answer, pulled = call(app, "POST", "/api/jobs", {"content-type": "application/json", **headers}, chunks)
        assert (got, pulled) == (status, 0), headers
        assert (status == 401) == answer.get("www-authenticate", "").startswith("Bearer")


def test_a_body_over_the_limit_is_a_413_whether_announced_or_streamed(tmp_path) -> None:
    with running_server(
        str(tmp_path / "r.db"), fleet_data(n_clients=1), max_request_bytes=64 * 1024, allowed_hosts=("127.0.0.1",)
    ) as (_sim, server):
        app = create_app(server)
        big = b"[" + b"1," * 60_000 + b"1]"
        chunks = [big[i : i + 16 * 1024] for i in range(0, len(big), 16 * 1024)]
        announced = {"content-type": "application/json", "content-length": str(len(big))}
        assert call(app, "POST", "/api/rollback", announced, chunks)[::2] == (413, 0)
        status, _, pulled = call(app, "POST", "/api/rollback", {"content-type": "application/json"}, chunks)
        assert status == 413 and pulled <= 64 * 1024 + 16 * 1024  # stopped within one chunk of the limit
        assert call(app, "POST", "/api/rollback", {"content-length": "-3"}, [b""])[0] == 400
        small = json.dumps({"clients": ["gw-1"]}).encode()
        assert call(app, "POST", "/api/rollback", {"content-type": "application/json"}, [small])[0] == 409  # no key


def test_the_openapi_roles_are_the_ones_the_guards_check(server) -> None:
    document = TestClient(create_app(server), base_url="http://127.0.0.1").get("/openapi.json").json()
    schemes = document["components"]["securitySchemes"]
    assert {name: s["scheme"] for name, s in schemes.items()} == {"read": "bearer", "operator": "bearer"}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            shown = [name for requirement in operation.get("security", []) for name in requirement]
            expected = required_role(method.upper(), path.replace("{", "").replace("}", ""))
            assert shown == ([expected] if expected else []), (method, path)


@pytest.mark.parametrize(
    "config, named",
    [
        ({"n_rounds": 10**12}, "config.n_rounds must be an integer in [1, 10000]"),
        ({"n_rounds": 0}, "config.n_rounds must be an integer in [1, 10000]"),
        ({"max_depth": 1.5}, "config.max_depth must be an integer in [1, 32]"),
        ({"learning_rate": 1e300}, "config.learning_rate must be a finite number"),
        ({"classes": ["x" * 300]}, "config.classes[0] must have at most 200 characters"),
        ({"categorical_features": list(range(20_000))}, "config.categorical_features must have at most 10000 items"),
    ],
)
def test_unbounded_job_settings_are_refused(server, config, named) -> None:
    api = TestClient(create_app(server), base_url="http://127.0.0.1", headers={"Authorization": "Bearer o-token"})
    for path, body in (
        ("/api/jobs", {"model_id": "act", "config": config}),
        ("/api/schedules", {"schedule_id": "s", "model_id": "act", "every_s": 60, "config": config}),
    ):
        response = api.post(path, json=body)
        assert response.status_code == 422 and named in response.text, (path, response.text)
    assert server.registry.jobs() == [] and server.registry.schedules() == []


def test_every_bounded_setting_is_in_the_openapi_schema(server) -> None:
    schemas = (
        TestClient(create_app(server), base_url="http://127.0.0.1").get("/openapi.json").json()["components"]["schemas"]
    )
    for model in ("JobIn", "ScheduleIn"):
        shown = schemas[model]["properties"]["config"]["properties"]
        assert {n: (p["minimum"], p["maximum"]) for n, p in shown.items()} == {
            n: (b.low, b.high) for n, b in SETTING_BOUNDS.items()
        }
    assert schemas["JobIn"]["properties"]["clients"]["anyOf"][0]["maxItems"] == 100_000


def test_the_edge_settings_come_from_the_environment_and_are_checked() -> None:
    from aggregator.server.config import LOOPBACK_HOSTS, ServerConfig

    assert ServerConfig().allowed_hosts == LOOPBACK_HOSTS == ("localhost", "127.0.0.1", "[::1]")
    config = ServerConfig.load(
        environ={
            "WHEELFED_ALLOWED_HOSTS": "wheelfed.clinic.lan, 10.0.0.5",
            "WHEELFED_MAX_REQUEST_BYTES": "4096",
            "WHEELFED_MAX_WINDOWS_PER_S": "2.5",
        }
    )
    assert (config.allowed_hosts, config.max_request_bytes, config.max_windows_per_s) == (
        ("wheelfed.clinic.lan", "10.0.0.5"),
        4096,
        2.5,
    )
    for bad, named in (
        ({"allowed_hosts": ()}, "allowed_hosts"),
        ({"max_request_bytes": 0}, "max_request_bytes"),
        ({"max_windows_per_s": -1.0}, "max_windows_per_s"),
    ):
        with pytest.raises(ValueError, match=named):
            ServerConfig(**bad)
