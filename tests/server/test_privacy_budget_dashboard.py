"""The dashboard's privacy panel in Debian's headless Chromium: per gateway the lifetime epsilon of
its most-used window and what is left under the cap, as ``/api/privacy`` computes them, and a
schedule's note when the cap made it skip. The server is the in-process one of the API tests
(memory broker), served by uvicorn on a free loopback port; the ledger is written directly."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from aggregator.privacy import rho_for_epsilon
from aggregator.privacy.ledger import LedgerEntry, iso_us
from aggregator.registry import ScheduleRecord
from aggregator.server.api import create_app
from aggregator.server.app import bind
from tests.server.fleet_memory import announce, fleet_data, running_server
from tests.server.test_dashboard import browser, wait_until  # noqa: F401 (the fixture)

pytestmark = pytest.mark.slow

T0 = 1_795_000_000_000_000


@contextmanager
def serving(server) -> Iterator[str]:
    """``server``'s API and dashboard under uvicorn on a free loopback port; its base URL."""
    import uvicorn

    sock = bind("127.0.0.1", 0)
    web = uvicorn.Server(uvicorn.Config(create_app(server), log_config=None, log_level="warning"))
    thread = threading.Thread(target=web.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: web.started, 30.0, "uvicorn")
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        web.should_exit = True
        thread.join(10)
        sock.close()


def two_jobs(registry) -> None:
    """job-a on gw-1 and gw-2, job-b on gw-1, each epsilon 4 on the windows before T0."""
    rho = rho_for_epsilon(4.0, 1e-6)
    for job, gateways in (("job-a", ("gw-1", "gw-2")), ("job-b", ("gw-1",))):
        registry.add_privacy(LedgerEntry(job, 1, gateways, None, T0, rho, 0.0, 1e-6, 4.0, "spent"))


def test_the_dashboard_shows_each_gateways_spent_and_remaining_budget(tmp_path, browser) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    clients = fleet_data(n_clients=3)
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        announce(sim, {c.client_id: 90 for c in clients})
        two_jobs(server.registry)
        server.registry.add_schedule(
            ScheduleRecord(
                "nightly",
                "act",
                "fedscs-xgb",
                {},
                60.0,
                "",
                None,
                0.01,
                0.25,
                True,
                1.0,
                0,
                1.0,
                note="skipped -- refused: the cap",
            )
        )
        expected = {b.gateway: b for b in server.runner.privacy_budgets()}
        with serving(server) as url:
            browser.get(url + "/")

            def privacy_rows():
                rows = browser.find_elements(By.CSS_SELECTOR, "#privacy tbody tr")
                return (
                    {
                        r.find_elements(By.TAG_NAME, "td")[0].text: [
                            td.text for td in r.find_elements(By.TAG_NAME, "td")
                        ]
                        for r in rows
                    }
                    if rows
                    else None
                )

            rows = wait_until(lambda: (r := privacy_rows()) and len(r) == 3 and r, what="privacy rows")
            for gateway, cells in rows.items():
                budget = expected[gateway]
                assert cells[1] == f"{budget.spent_epsilon:.2f}" and cells[2] == f"{budget.remaining_epsilon:.2f}"
            assert rows["gw-1"][3] == "2" and rows["gw-2"][3] == "1" and rows["gw-3"][3] == "0"
            assert rows["gw-1"][4] == iso_us(T0) == "2026-11-18T11:06:40Z" and rows["gw-3"][4] == "the beginning"
            assert float(rows["gw-1"][1]) > float(rows["gw-2"][1]) > 4.0 - 0.01  # two jobs compose above one
            cap = browser.find_element(By.ID, "privacy-cap").text
            assert cap == "cap: ε 10 per window over its lifetime (δ 0.000001), every private job that used it together"
            assert "skipped -- refused: the cap" in browser.find_element(By.CSS_SELECTOR, "#schedules tbody").text
            browser.save_screenshot(str(tmp_path / "privacy.png"))
            assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
