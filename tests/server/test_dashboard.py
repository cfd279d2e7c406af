"""The dashboard in Debian's headless Chromium (driven by chromedriver through selenium), served
by a real ``wheelfed server`` over mosquitto and real gateway processes: the fleet table shows
the gateways that announced themselves, a job's loss curve is drawn, the page logs no console
error. A screenshot is saved in the test's folder (``dashboard.png``)."""

from __future__ import annotations

import shutil
import time

import pytest

from tests.e2e.fleet_support import GATEWAYS, PASSWORDS, start_fleet
from tests.server.server_support import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture
def browser(tmp_path):
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail("Debian's chromium and chromium-driver are not installed (deploy/run tests installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        "--window-size=1024,1366",
        f"--user-data-dir={tmp_path / 'chromium'}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def wait_until(condition, timeout_s: float = 30.0, what: str = ""):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_dashboard_shows_the_fleet_and_a_jobs_curve(tmp_path, browser) -> None:
    from selenium.webdriver.common.by import By

    with start_fleet(tmp_path, "--holdout-fraction", "0.2") as fleet:
        fleet.agg.close()  # the server is the aggregator
        server = ServerProcess(
            str(tmp_path / "server.db"), fleet.port, PASSWORDS["aggregator"], tmp_path / "server.log"
        )
        try:
            status, job = server.request(
                "POST",
                "/api/jobs",
                {"model_id": "act", "config": {"n_rounds": 3, "max_depth": 2, "protocol": "histogram"}},
            )
            assert status == 201, job
            server.wait_job(job["job_id"], lambda j: j["state"] == "completed")
            browser.get(server.url + "/")

            def fleet_rows():
                rows = browser.find_elements(By.CSS_SELECTOR, "#fleet tbody tr")
                return {r.find_elements(By.TAG_NAME, "td")[0].text: r.text for r in rows} if rows else None

            rows = wait_until(lambda: (r := fleet_rows()) and len(r) == len(GATEWAYS) and r, what="fleet rows")
            assert sorted(rows) == sorted(GATEWAYS) and all(
                "online" in text and "offline" not in text for text in rows.values()
            )
            jobs = browser.find_element(By.CSS_SELECTOR, "#jobs tbody").text
            assert job["job_id"] in jobs and "completed" in jobs and "act:v1" in jobs
            wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "#curve polyline"), what="the loss curve")
            points = browser.find_element(By.CSS_SELECTOR, "#curve polyline").get_attribute("points").split()
            assert len(points) == 3  # one per round
            browser.find_element(By.CSS_SELECTOR, "#models tbody tr").click()
            wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "#confusion"), what="the confusion matrix")
            assert "online" in browser.find_element(By.ID, "status").text
            browser.save_screenshot(str(tmp_path / "dashboard.png"))
            errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
            assert errors == []
            browser.set_window_size(800, 1280)  # a tablet in portrait: nothing needs a mouse
            browser.save_screenshot(str(tmp_path / "dashboard-tablet.png"))
        finally:
            server.terminate()
