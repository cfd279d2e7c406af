"""The dashboard as an operator reads it, in Debian's headless Chromium at 1,280 px: gateway health
flagged by colour and words (an ended sensor link, a stale gateway), every job with its algorithm,
steps, attempts (a resumed job says from which step), start, duration, bytes and a chart for every
algorithm (a completed FedForest job shows its levels, with axes), each model version with its
held-out accuracy, held-out windows, chance, local-only and per-gateway accuracy without a click,
and nothing wider than the window. The server is the in-process one (memory broker) under
uvicorn; content and layout are checked through the DOM, not pixels."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest
from fastapi.testclient import TestClient

from aggregator.server.api import create_app
from shared.protocol.envelope import Message
from shared.protocol.messages import Status
from tests.server.fleet_memory import LABELS, fleet_data, running_server, wait_job
from tests.server.test_dashboard import browser, wait_until  # noqa: F401 (the fixture)
from tests.server.test_privacy_budget_dashboard import serving

pytestmark = pytest.mark.slow

XGB = {"n_rounds": 3, "max_depth": 2, "n_bins": 16, "protocol": "histogram"}
FOREST = {"n_trees": 2, "max_depth": 3, "n_bins": 8, "protocol": "histogram"}
FEATURE_SET = "wheelfed-tifex-2+" + "0123456789abcdef" * 4  # as long as real ones


def publish_status(sim, client: str, labelled: int, link: str) -> None:
    transport = sim.transports[client]
    status = Status(
        online=True,
        n_windows=labelled + 5,
        n_labelled=labelled,
        detail={
            "labels": f"push={labelled // 2},rest={labelled - labelled // 2}",
            "link": link,
            "feature_set": FEATURE_SET,
        },
    )
    transport.publish(transport.layout.status(client), Message.create(status, sender=client), retain=True)


#: Every row of a table as the page shows it now, read in one go (the page redraws every 2 s):
#: per cell its text, class and data-health, and whether it holds a small chart.
ROWS = """
return Array.from(document.querySelectorAll('#' + arguments[0] + ' tbody tr')).map((tr) =>
  Array.from(tr.children).map((td) => ({text: td.innerText.trim(), cls: td.className,
    health: td.dataset.health || null, color: getComputedStyle(td).color,
    spark: td.querySelector('svg.spark') !== null})));
"""
CLICK = """
const row = Array.from(document.querySelectorAll('#' + arguments[0] + ' tbody tr'))
  .find((tr) => tr.children[0].textContent === arguments[1]);
if (row) row.click();
return row !== undefined;
"""


def rows(driver, table: str) -> dict[str, list[dict]]:
    return {r[0]["text"]: r for r in driver.execute_script(ROWS, table)}


def columns(driver, table: str) -> dict[str, int]:
    return {
        name: i
        for i, name in enumerate(
            driver.execute_script(
                "return Array.from(document.querySelectorAll('#' + arguments[0] + ' thead th'))"
                ".map((th) => th.innerText)",
                table,
            )
        )
    }


def test_an_operator_reads_the_fleet_jobs_and_models_at_a_glance(tmp_path, browser) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    clients = fleet_data(n_clients=3)
    with running_server(str(tmp_path / "r.db"), clients) as (sim, server):
        for client, link in (("gw-1", "up"), ("gw-2", "up"), ("gw-3", "ended")):
            publish_status(sim, client, 90, link)
        wait_until(lambda: len(server.tracker.online()) == 3, 10, "statuses")
        api = TestClient(create_app(server))
        xgb = api.post("/api/jobs", json={"model_id": "act", "config": XGB}).json()
        assert wait_job(server, xgb["job_id"]).state == "completed"
        evaluation = server.registry.job(xgb["job_id"]).evaluation
        server.registry.update_job(xgb["job_id"], evaluation={**evaluation, "local_only": {"accuracy": 0.7}})
        forest = api.post("/api/jobs", json={"model_id": "forest", "algorithm": "fedforest", "config": FOREST}).json()
        forest_job = wait_job(server, forest["job_id"])
        assert forest_job.state == "completed"
        # as a job of a server from before the local-only baseline recorded it
        server.registry.update_job(
            forest_job.job_id,
            evaluation={k: v for k, v in forest_job.evaluation.items() if not k.startswith("local_only")},
        )
        # a job a killed server left after step 1, finished by the next one
        server.registry.add_job("job-resumed", "fedscs-xgb", XGB, model_id="act", total=3)
        for step in (1, 2, 3):
            server.registry.complete_round("job-resumed", step, 3, 3, 3, {"train_loss": 0.7 - 0.1 * step}, 0.2, None)
        started = time.time() - 120
        server.registry.update_job(
            "job-resumed",
            state="completed",
            attempt=2,
            history=[
                {"attempt": 1, "started": started, "from_step": 0},
                {"attempt": 2, "started": started + 60, "from_step": 1, "sent_bytes": 2000, "received_bytes": 48000},
            ],
        )
        # gw-2 went quiet: the server last heard from it five minutes ago
        server.tracker.rows["gw-2"] = replace(server.tracker.rows["gw-2"], seen=time.time() - 300)
        server.tracker._heard["gw-2"] = time.time() - 300

        with serving(server) as url:
            browser.set_window_size(1280, 1000)
            browser.get(url + "/")

            fleet = wait_until(lambda: (r := rows(browser, "fleet")) and len(r) == 3 and r, what="fleet rows")
            health = {g: r[1] for g, r in fleet.items()}
            assert health["gw-1"]["health"] == "ok" and health["gw-1"]["text"] == "online"
            assert health["gw-3"]["health"] == "warn" and "sensor link ended" in health["gw-3"]["text"]
            assert "warn" in fleet["gw-3"][2]["cls"]  # the link itself, amber
            assert health["gw-2"]["health"] == "warn" and "stale" in health["gw-2"]["text"]
            assert "counts may be out of date" in health["gw-2"]["text"]
            assert health["gw-1"]["color"] != health["gw-3"]["color"] == health["gw-2"]["color"]
            assert "2 gateways need a look" in browser.find_element(By.ID, "summary").text

            jobs = wait_until(lambda: (r := rows(browser, "jobs")) and len(r) == 3 and r, what="job rows")
            column = columns(browser, "jobs")
            for job_id, row in jobs.items():
                values = [c["text"] for c in row]
                assert values[column["Started"]] not in ("", "–") and values[column["Duration"]] not in ("", "–")
                assert row[column["Progress"]]["spark"], job_id
                assert values[column["Bytes"]].endswith("B"), values
            forest_cells = [c["text"] for c in jobs[forest["job_id"]]]
            assert forest_cells[column["Algorithm"]] == "fedforest" and "levels" in forest_cells[column["Steps"]]
            resumed = [c["text"] for c in jobs["job-resumed"]]
            assert resumed[column["Attempts"]] == "2 (resumed 1×, from step 1)"
            assert resumed[column["Bytes"]] == "50.0 kB" and resumed[column["Duration"]].startswith("2 min")

            def chart(job_id: str) -> dict | None:
                found = browser.execute_script(
                    """
                    const caption = document.getElementById('curve-caption').textContent;
                    if (!caption.startsWith(arguments[0])) return null;
                    const q = (s) => Array.from(document.querySelectorAll('#curve ' + s));
                    const line = q('polyline')[0];
                    return {caption, bars: q('rect.bar').length, x_title: q('text.x-title').map((t) => t.textContent),
                            y_ticks: q('text.y-tick').length, points: line ? line.getAttribute('points') : ''};
                """,
                    job_id,
                )
                return found

            assert browser.execute_script(CLICK, "jobs", forest["job_id"])
            shown = wait_until(lambda: chart(forest["job_id"]), what="the forest's chart")
            assert "no rounds yet" not in shown["caption"] and "splits made per level" in shown["caption"]
            assert shown["bars"] == forest_job.completed > 0
            assert shown["x_title"] == ["level"] and shown["y_ticks"] == 3
            assert browser.execute_script(CLICK, "jobs", xgb["job_id"])
            shown = wait_until(lambda: chart(xgb["job_id"]), what="the boosting job's chart")
            assert "training loss per round, 3 of 3 rounds" in shown["caption"]
            assert len(shown["points"].split()) == 3

            models = wait_until(lambda: (r := rows(browser, "models")) and "act:v1" in r and r, what="model rows")
            column = columns(browser, "models")
            act = [c["text"] for c in models["act:v1"]]
            y = np.concatenate([c.y_test for c in clients])
            chance = max(float(np.mean(y == label)) for label in LABELS)
            assert act[column["Algorithm"]] == "fedscs-xgb"
            assert act[column["Held-out windows"]] == str(len(y)) and act[column["Chance"]] == f"{chance:.3f}"
            assert act[column["Local-only"]] == "0.700"
            accuracy = server.registry.record("act", 1).metrics["accuracy"]
            assert act[column["Held-out accuracy"]].startswith(f"{accuracy:.3f}")
            per_gateway = act[column["Per gateway (accuracy, windows, alone)"]]
            alone = server.registry.job(xgb["job_id"]).evaluation["local_only_per_client"]
            for client in clients:  # visible without a click
                own = f"({len(client.y_test)}, alone {alone[client.client_id]['accuracy']:.3f})"
                assert f"{client.client_id} " in per_gateway and own in per_gateway
            assert [c["text"] for c in models["forest:v1"]][column["Local-only"]] == "not recorded"

            # 1,280 px: nothing scrolls sideways, every table fits its section, the last columns are in view
            width = browser.execute_script("return document.documentElement.clientWidth")
            assert browser.execute_script("return document.documentElement.scrollWidth") <= width
            for table in browser.find_elements(By.CSS_SELECTOR, "section table"):
                section = table.find_element(By.XPATH, "./ancestor::section")
                assert table.size["width"] <= section.size["width"], table.get_attribute("id")
            for header in ("#fleet thead th:last-child", "#jobs thead th:last-child", "#models thead th:last-child"):
                edge = browser.find_element(By.CSS_SELECTOR, header)
                assert edge.location["x"] + edge.size["width"] <= width, header
            browser.save_screenshot(str(tmp_path / "dashboard-1280.png"))
            assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
