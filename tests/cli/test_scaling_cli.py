"""``wheelfed merge-worker``, ``site-aggregator`` and ``load-test``: one-line mistakes, and help
texts that name the defaults the library modules really have (the commands do not import those
modules to build their help)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aggregator.broker.mosquitto import find_free_port
from tests.cli.cli_support import assert_one_line_failure, wheelfed


def _help(*command: str) -> str:
    from edge_client.cli import build_parser

    parser = build_parser()
    for name in command:
        parser = parser._subparsers._group_actions[0].choices[name]  # type: ignore[union-attr]
    return " ".join(parser.format_help().split())


def test_the_help_names_the_library_defaults() -> None:
    from aggregator.loadtest import SECRET_ENV
    from aggregator.merge_workers import DEFAULT_GROUP, WORKER_PREFIX, MergeSettings

    merge = _help("merge-worker")
    settings = MergeSettings()
    for words in (
        f"starting with {WORKER_PREFIX} (default: {WORKER_PREFIX}1)",
        f"(default: {DEFAULT_GROUP})",
        f"at most (default: {settings.max_batch})",
        f"first reply (default: {settings.linger_s * 1000:g})",
    ):
        assert words in merge, words
    assert f"${SECRET_ENV}" in _help("load-test", "host") and f"{SECRET_ENV}=" in _help("load-test")


@pytest.mark.parametrize(
    "line, code, fragments",
    [
        ("site-aggregator --site-id site-a --members gw-1,,gw-2", 2, ("expected comma-separated gateway ids",)),
        (
            "site-aggregator --site-id site-a --members gw-1,site-a",
            2,
            ("members must not include the site itself ('site-a') or the aggregator",),
        ),
        (
            "site-aggregator --site-id site-a --members gw-1 --upstream-port {port}",
            1,
            ("upstream: could not connect to MQTT broker 127.0.0.1:{port}: connection refused",),
        ),
        (
            "site-aggregator --site-id site-a --members gw-1 --upstream-tls-cert {file}",
            2,
            ("--upstream-tls-cert and --upstream-tls-key go together, with --upstream-tls-ca",),
        ),
        ("merge-worker --worker-id worker-1", 2, ("--worker-id must start with 'merge-', got 'worker-1'",)),
        ("merge-worker --max-batch 0", 2, ("argument --max-batch: must be at least 1",)),
        ("merge-worker --port {port}", 1, ("could not connect to MQTT broker 127.0.0.1:{port}",)),
        ("load-test host --port {port} sim-00000", 2, ("$WHEELFED_SOAK_SECRET is not set",)),
    ],
)
def test_mistake_is_one_clear_line(tmp_path: Path, line: str, code: int, fragments: tuple[str, ...]) -> None:
    port = str(find_free_port())
    (tmp_path / "cert.pem").write_text("")
    filled = line.format(port=port, file=tmp_path / "cert.pem")
    run = wheelfed(*filled.split(), cwd=tmp_path, env={"WHEELFED_SOAK_SECRET": ""})
    assert_one_line_failure(run, code, *(f.format(port=port) for f in fragments))
