"""The console in a real browser against local mode: sign in, watch runs appear in a job's
timeline, pause and resume (and a 412 when the job changed underneath), redrive a dead
letter, and data shown as text only."""

from __future__ import annotations

import functools
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from .helpers import KEY, TENANT, screenshot, wait_until

pytestmark = pytest.mark.browser

XSS_NAME = "<img src=x onerror=alert(1)>"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def instant(seconds_from_now: float = 0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds_from_now)).strftime("%Y-%m-%dT%H:%M:%SZ")


def one(driver: Any, selector: str) -> Any:
    return driver.find_element(By.CSS_SELECTOR, selector)


def every(driver: Any, selector: str) -> list[Any]:
    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def shown_notice(driver: Any) -> tuple[str, str] | None:
    """The notice's (kind, text) once one is shown; None before."""
    kind, text = notice(driver)
    return (kind, text) if kind else None


def notice(driver: Any) -> tuple[str, str]:
    element = driver.find_element(By.ID, "notice")
    return (element.get_attribute("data-kind") or "", element.text) if element.is_displayed() else ("", "")


def row_of(driver: Any, attribute: str, value: str) -> Any:
    for row in every(driver, f"tr[{attribute}]"):
        if row.get_attribute(attribute) == value:
            return row
    return None


def test_sign_in_keeps_the_key_out_of_urls_and_a_wrong_key_is_refused(
    browser: Any, console_url: str, output_dir: Path
) -> None:
    browser.get(console_url)
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    form = wait_until(browser, lambda: browser.find_element(By.ID, "key"), "the sign-in form")
    screenshot(browser, output_dir, "sign-in")
    form.send_keys("not-a-key")
    browser.find_element(By.CSS_SELECTOR, "#key-form button[type=submit]").click()
    error = wait_until(browser, lambda: browser.find_element(By.ID, "key-error").text, "the refusal")
    assert "401" in error
    assert browser.execute_script("return sessionStorage.length") == 0
    browser.find_element(By.ID, "key").send_keys(KEY)
    browser.find_element(By.CSS_SELECTOR, "#key-form button[type=submit]").click()
    wait_until(browser, lambda: browser.find_element(By.ID, "main").is_displayed(), "the jobs page")
    assert browser.execute_script("return sessionStorage.getItem('jobsched.apiKey')") == KEY
    assert KEY not in browser.current_url
    # Every request the page made: the key only ever in a header, never in a URL.
    urls = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert urls and not [url for url in urls if KEY in url]


def test_a_new_jobs_runs_appear_in_its_timeline(
    signed_in: Any, client: Any, console_url: str, output_dir: Path
) -> None:
    driver = signed_in
    job = client.create_job({"name": unique("every-2s"), "type": "demo.hello", "every": 2})
    try:
        row = wait_until(driver, lambda: row_of(driver, "data-job-id", job["jobId"]), "the job in the list")
        assert "every 2s" in row.text and "ACTIVE" in row.text
        screenshot(driver, output_dir, "jobs")
        row.find_element(By.LINK_TEXT, job["name"]).click()
        lane = wait_until(
            driver,
            lambda: driver.find_element(
                By.CSS_SELECTOR, "svg.timeline g.lane[data-state=SUCCEEDED] rect.attempt.outcome-succeeded"
            ),
            "a succeeded run in the timeline",
        )
        assert lane is not None
        fire_times = every(driver, "[data-test=fire-times] li")
        assert len(fire_times) == 5
        runs = every(driver, "[data-test=runs] tbody tr")
        assert any(r.get_attribute("data-state") == "SUCCEEDED" for r in runs)
        # The runs made ahead of their instant are folded under the history, not mixed in it.
        upcoming = one(driver, "[data-test=upcoming]")
        assert upcoming.get_attribute("open") is None
        assert upcoming.find_elements(By.CSS_SELECTOR, "tbody tr")
        # A few more runs, so the timeline has something to show.
        wait_until(
            driver,
            lambda: len(every(driver, "svg.timeline g.lane[data-state=SUCCEEDED]")) >= 3,
            "three succeeded runs in the timeline",
        )
        screenshot(driver, output_dir, "job")
        one(driver, "svg.timeline").screenshot(str(output_dir / "timeline.png"))
        # A lane opens its run: attempts, transitions and the result.
        one(driver, "svg.timeline g.lane[data-state=SUCCEEDED]").click()
        wait_until(driver, lambda: one(driver, "[data-test=result]"), "the run page")
        transitions = one(driver, "[data-test=transitions]").text
        assert "LEASED" in transitions and "SUCCEEDED" in transitions and "worker" in transitions
        assert every(driver, "[data-test=attempts] tbody tr")
        assert "hello from" in one(driver, "[data-test=result]").text
        screenshot(driver, output_dir, "run")
    finally:
        client.cancel_job(job["jobId"])


def test_pause_and_resume_send_if_match_and_a_412_is_explained(
    signed_in: Any, client: Any, console_url: str, output_dir: Path
) -> None:
    driver = signed_in
    job = client.create_job({"name": unique("pausable"), "type": "demo.hello", "every": 60})
    job_id = job["jobId"]
    try:
        # Read once, no timer: the page shows version 1 while the API moves on.
        driver.get(f"{console_url}#/jobs/{job_id}?refresh=off")
        wait_until(driver, lambda: one(driver, "[data-test=pause]"), "the pause button")
        client.pause(job_id)
        client.resume(job_id)  # version 3 now; the page still shows 1
        one(driver, "[data-test=pause]").click()
        kind, text = wait_until(driver, lambda: shown_notice(driver), "the 412 notice")
        assert kind == "conflict"
        assert "someone else changed this job" in text and "version 1" in text and "version 3" in text
        assert client.get_job(job_id)["state"] == "ACTIVE"  # nothing happened
        screenshot(driver, output_dir, "job-412")
        # The page was re-read with the current version: now the pause goes through.
        wait_until(driver, lambda: "version 3" in one(driver, ".page-head").text, "v3")
        one(driver, "[data-test=pause]").click()
        wait_until(driver, lambda: client.get_job(job_id)["state"] == "PAUSED", "the job to be paused")
        resume = wait_until(driver, lambda: one(driver, "[data-test=resume]"), "resume")
        resume.click()
        wait_until(driver, lambda: client.get_job(job_id)["state"] == "ACTIVE", "the job to be resumed")
        assert client.get_job(job_id)["version"] == 5
    finally:
        client.cancel_job(job_id)


def test_a_dead_letter_is_redriven_from_the_console_with_its_reason(
    signed_in: Any, client: Any, console_url: str, output_dir: Path
) -> None:
    driver = signed_in
    window = 8  # demo.flaky fails every call until this long after the run's scheduled time
    job = client.create_job(
        {
            "name": unique("dies"),
            "type": "demo.flaky",
            "runAt": instant(0),
            "payload": {"failForSeconds": window},
            "maxAttempts": 1,
        }
    )

    def dead() -> list[dict[str, Any]]:
        runs = client.list_runs(job["jobId"], limit=10)["items"]
        assert not [r for r in runs if r["state"] == "SUCCEEDED"], "succeeded before it died: raise window"
        return [r for r in runs if r["state"] == "DEAD"]

    run = wait_until(driver, dead, "the run to die")[0]
    run_key = run["runKey"]
    driver.get(f"{console_url}#/dead-letters")
    row = wait_until(
        driver, lambda: row_of(driver, "data-run-key", run_key), "the dead letter in the console"
    )
    assert job["name"] in row.text and "DemoFlaky" in row.text
    screenshot(driver, output_dir, "dead-letters")

    scheduled = datetime.strptime(run["scheduledFor"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    while datetime.now(UTC) <= scheduled + timedelta(seconds=window):
        time.sleep(0.5)  # demo.flaky's failure window: a redrive inside it would die again
    reason = "the dependency is back <b>really</b>"
    row = row_of(driver, "data-run-key", run_key)
    row.find_element(By.CSS_SELECTOR, "[data-test=redrive-reason]").send_keys(reason)
    row.find_element(By.CSS_SELECTOR, "[data-test=redrive]").click()
    kind, text = wait_until(driver, lambda: shown_notice(driver), "the redrive notice")
    assert kind == "ok" and "Redriven" in text, text
    done = wait_until(
        driver, lambda: client.get_run(run_key)["state"] == "SUCCEEDED" and client.get_run(run_key), "success"
    )
    redrive = next(t for t in done["transitions"] if t["from"] == "DEAD")
    assert reason in redrive["reason"] and redrive["actor"] == f"api:{TENANT}"
    wait_until(driver, lambda: row_of(driver, "data-run-key", run_key) is None, "the dead letter to go")

    driver.get(f"{console_url}#/runs/{run_key}")
    transitions = wait_until(driver, lambda: one(driver, "[data-test=transitions]").text, "the run page")
    assert reason in transitions  # as typed, tags and all: text, not markup
    assert not every(driver, "[data-test=transitions] b")
    outcomes = [r.get_attribute("data-state") for r in every(driver, "[data-test=attempts] tbody tr")]
    assert outcomes == ["dead", "succeeded"]
    screenshot(driver, output_dir, "run-redriven")


def test_a_run_nothing_here_can_execute_says_it_waits_for_an_external_worker(
    signed_in: Any, client: Any, console_url: str, output_dir: Path
) -> None:
    driver = signed_in
    job = client.create_job({"name": unique("external"), "type": "report.build", "runAt": instant(0)})
    try:
        runs = wait_until(driver, lambda: client.list_runs(job["jobId"], limit=5)["items"], "its run")
        driver.get(f"{console_url}#/runs/{runs[0]['runKey']}")
        said = wait_until(driver, lambda: one(driver, "[data-test=waiting-for]").text, "the run page")
        assert said == "Waiting: waiting for an external worker (no handler for type report.build, no target)"
        screenshot(driver, output_dir, "run-waiting")
    finally:
        client.cancel_job(job["jobId"])


def test_a_job_name_with_markup_shows_as_those_characters(
    signed_in: Any, client: Any, console_url: str, output_dir: Path
) -> None:
    driver = signed_in
    job = client.create_job({"name": XSS_NAME, "type": "demo.hello", "every": 3600})
    try:
        driver.get(f"{console_url}#/jobs")
        row = wait_until(driver, lambda: row_of(driver, "data-job-id", job["jobId"]), "the job in the list")
        assert row.find_element(By.CSS_SELECTOR, "td a").text == XSS_NAME
        driver.get(f"{console_url}#/jobs/{job['jobId']}")
        heading = wait_until(driver, lambda: one(driver, ".page-head h1").text == XSS_NAME, "the job page")
        assert heading
        # No element was made from the name, and no script ran (an alert would fail every call).
        assert driver.find_elements(By.TAG_NAME, "img") == []
        assert driver.execute_script("return document.querySelectorAll('[onerror]').length") == 0
        screenshot(driver, output_dir, "xss-name")
    finally:
        client.cancel_job(job["jobId"])


def test_through_the_console_proxy_the_page_needs_no_key(
    browser: Any, runtime: Any, client: Any, output_dir: Path
) -> None:
    """`jobsched console` in front of local mode: the proxy adds the caller's credentials
    (here local mode's key; SigV4 for a stack), the browser holds none."""
    from jobsched_cli.client import ApiClient
    from jobsched_console.proxy import ConsoleProxy, Forwarder

    job = client.create_job({"name": unique("via-proxy"), "type": "demo.hello", "every": 3600})
    proxy = ConsoleProxy(Forwarder(ApiClient(str(runtime.api_url), api_key=KEY))).start()
    try:
        browser.get(f"{proxy.url}/console/")
        browser.execute_script("sessionStorage.clear()")
        browser.get(f"{proxy.url}/console/#/jobs")
        browser.refresh()
        row = wait_until(
            browser, lambda: row_of(browser, "data-job-id", job["jobId"]), "the job via the proxy"
        )
        assert job["name"] in row.text
        assert not browser.find_element(By.ID, "sign-in").is_displayed()
        assert browser.execute_script("return sessionStorage.length") == 0
        screenshot(browser, output_dir, "jobs-via-proxy")
    finally:
        proxy.stop()
        client.cancel_job(job["jobId"])


def dying_job(client: Any, every: int | None = None) -> dict[str, Any]:
    """A job whose every run dies on its one attempt (demo.flaky inside its failure window)."""
    body: dict[str, Any] = {
        "name": unique("dies"),
        "type": "demo.flaky",
        "payload": {"failForSeconds": 3600},
        "maxAttempts": 1,
        **({"every": every} if every else {"runAt": instant(0)}),
    }
    job: dict[str, Any] = client.create_job(body)
    return job


def dead_of(client: Any, job_id: str) -> list[str]:
    runs = client.list_runs(job_id, limit=50)["items"]
    return [r["runKey"] for r in runs if r["state"] == "DEAD"]


def test_the_runs_page_filters_across_jobs_and_keeps_the_filters_in_its_address(
    signed_in: Any, client: Any, console_url: str, output_dir: Path
) -> None:
    driver = signed_in
    dies = dying_job(client)
    fine = client.create_job({"name": unique("fine"), "type": "demo.hello", "runAt": instant(0)})
    wait_until(driver, lambda: dead_of(client, dies["jobId"]), "the run to die")
    wait_until(
        driver,
        lambda: [r for r in client.list_runs(fine["jobId"])["items"] if r["state"] == "SUCCEEDED"],
        "the other job's run to succeed",
    )
    driver.get(f"{console_url}#/runs?state=DEAD")
    wait_until(driver, lambda: every(driver, "[data-test=all-runs] tbody tr"), "the dead runs")
    assert one(driver, "[data-test=chip-DEAD]").get_attribute("aria-pressed") == "true"
    states = {r.get_attribute("data-state") for r in every(driver, "[data-test=all-runs] tbody tr")}
    assert states == {"DEAD"}
    assert row_of(driver, "data-run-key", dead_of(client, dies["jobId"])[0]) is not None
    screenshot(driver, output_dir, "runs-dead")
    # A second chip widens the filter, and the address says so.
    one(driver, "[data-test=chip-SUCCEEDED]").click()
    wait_until(driver, lambda: "state=SUCCEEDED%2CDEAD" in driver.current_url, "the address to keep both")
    wait_until(
        driver,
        lambda: (
            {r.get_attribute("data-state") for r in every(driver, "[data-test=all-runs] tbody tr")}
            >= {"DEAD", "SUCCEEDED"}
        ),
        "both states listed",
    )
    # A job id narrows it to one job; the link, opened afresh, shows the same runs.
    field = one(driver, "[data-test=filter-jobId]")
    field.send_keys(fine["jobId"], "\n")
    wait_until(driver, lambda: f"jobId={fine['jobId']}" in driver.current_url, "the job id in the address")
    link = driver.current_url
    driver.get(console_url + "#/jobs")
    driver.get(link)
    rows = wait_until(driver, lambda: every(driver, "[data-test=all-runs] tbody tr"), "the linked runs")
    assert {r.get_attribute("data-state") for r in rows} == {"SUCCEEDED"}
    assert one(driver, "[data-test=filter-jobId]").get_attribute("value") == fine["jobId"]
    assert one(driver, "[data-test=chip-DEAD]").get_attribute("aria-pressed") == "true"
    screenshot(driver, output_dir, "runs-filtered")
    client.cancel_job(dies["jobId"])


def test_redrive_all_matching_shows_the_dry_run_count_before_it_acts(
    signed_in: Any, client: Any, console_url: str, output_dir: Path
) -> None:
    driver = signed_in
    job = dying_job(client, every=1)
    job_id = job["jobId"]
    wait_until(driver, lambda: len(dead_of(client, job_id)) >= 4, "four dead runs", timeout=60)
    client.cancel_job(job_id)  # no more arrive while the test counts them
    time.sleep(2)
    dead = dead_of(client, job_id)
    driver.get(f"{console_url}#/dead-letters?jobId={job_id}")
    wait_until(
        driver, lambda: len(every(driver, "[data-test=dead-letters] tbody tr")) == len(dead), "its rows"
    )

    # One of them ticked and dismissed: one audited request, that run CANCELLED.
    dismissed = dead[0]

    def tick() -> bool:
        # The live table may redraw between finding the row and clicking it (a stale element).
        row_of(driver, "data-run-key", dismissed).find_element(By.CSS_SELECTOR, "[data-test=select]").click()
        return True

    wait_until(driver, tick, "the dead letter's tick box")
    assert "(1)" in one(driver, "[data-test=dismiss-selected]").text
    one(driver, "[data-test=bulk-reason]").send_keys("obsolete run")
    one(driver, "[data-test=dismiss-selected]").click()
    one(driver, "[data-test=dismiss-selected]").click()  # the confirmation
    kind, text = wait_until(driver, lambda: shown_notice(driver), "the dismissal notice")
    assert kind == "ok" and "Dismissed 1" in text, text
    assert client.get_run(dismissed)["state"] == "CANCELLED"
    rest = dead[1:]

    # All that match: a dry run counts them, nothing changes until it is confirmed.
    one(driver, "[data-test=redrive-matching]").click()
    count = wait_until(driver, lambda: one(driver, "[data-test=dry-run-count]").text, "the dry-run count")
    assert count == f"{len(rest)} dead letters would be redriven", count
    assert all(client.get_run(key)["state"] == "DEAD" for key in rest)
    screenshot(driver, output_dir, "dead-letters-redrive-all")
    one(driver, "[data-test=confirm-redrive]").click()

    def redriven() -> str | None:
        shown = notice(driver)[1]
        return shown if shown.startswith("Redriven") else None

    text = wait_until(driver, redriven, "the redrive's notice")
    assert f"Redriven {len(rest)} dead letters" in text, text
    for key in rest:
        redrive = [
            t for t in client.get_run(key)["transitions"] if t["from"] == "DEAD" and t["to"] == "PENDING"
        ]
        assert (
            len(redrive) == 1 and "bulk_" in redrive[0]["reason"] and "obsolete run" in redrive[0]["reason"]
        )


def test_the_jobs_list_shows_each_jobs_last_run_on_one_line(
    signed_in: Any, client: Any, console_url: str, output_dir: Path
) -> None:
    driver = signed_in
    job = client.create_job(
        {
            "name": unique("every-minute"),
            "type": "demo.hello",
            "cron": "* * * * *",
            "timeZone": "Europe/London",
        }
    )
    try:
        client.trigger(job["jobId"])
        wait_until(
            driver,
            lambda: [r for r in client.list_runs(job["jobId"])["items"] if r["state"] == "SUCCEEDED"],
            "its triggered run",
        )
        driver.get(f"{console_url}#/jobs")
        row = wait_until(driver, lambda: row_of(driver, "data-job-id", job["jobId"]), "the job in the list")

        def succeeded_last_run() -> Any:
            # The job fires every minute: a run of its schedule that fell due since the trigger
            # is its last run, QUEUED until local mode's worker has run it (a second or so).
            row = row_of(driver, "data-job-id", job["jobId"])
            last = row.find_element(By.CSS_SELECTOR, "[data-test=last-run]") if row is not None else None
            if last is not None and last.get_attribute("data-state") == "SUCCEEDED":
                return last
            driver.refresh()
            return None

        last = wait_until(driver, succeeded_last_run, "its last run, SUCCEEDED")
        assert last.get_attribute("data-state") == "SUCCEEDED"
        row = row_of(driver, "data-job-id", job["jobId"])
        assert row.size["height"] <= 48, row.size  # one line a row: the cron text does not wrap
        width = driver.execute_script("return document.documentElement.scrollWidth")
        assert width <= driver.execute_script("return window.innerWidth"), "the list scrolls sideways"
        screenshot(driver, output_dir, "jobs-compact")
    finally:
        client.cancel_job(job["jobId"])


def test_a_run_redriven_twice_keeps_its_bars_and_label_in_their_columns(
    signed_in: Any, client: Any, console_url: str, output_dir: Path
) -> None:
    """Each redrive dies again: the lane's label names both redrives within its column, the
    bars stay inside the plot, and the counters say that every ending counts."""
    driver = signed_in
    job = dying_job(client)
    (key,) = wait_until(driver, lambda: dead_of(client, job["jobId"]), "the run to die")
    for redrive in (1, 2):
        client.redrive(key, reason=f"try {redrive}")

        def died_again(count: int = redrive) -> bool:
            run = client.get_run(key)
            return bool(run["state"] == "DEAD" and run["redrives"] == count)

        wait_until(driver, died_again, f"redrive {redrive} to die")
    driver.get(f"{console_url}#/jobs/{job['jobId']}")
    lane = wait_until(driver, lambda: one(driver, f"svg.timeline g.lane[data-run-key='{key}']"), "its lane")
    label = lane.find_element(By.CSS_SELECTOR, "text.outcome").text
    assert label.startswith("DEAD") and "2 redrives" in label and len(label) <= 44, label
    plot_end = 170 + 520  # timeline.js: LEFT + PLOT, in the drawing's own units
    for bar in lane.find_elements(By.CSS_SELECTOR, "rect.attempt"):
        right = float(bar.get_attribute("x")) + float(bar.get_attribute("width"))
        assert right <= plot_end + 0.01, (bar.get_attribute("x"), bar.get_attribute("width"))
    counters = one(driver, ".columns").text
    assert "a redriven run counts each time it ends" in counters
    assert "Scheduled runs made\n1" in counters and "Dead\n3" in counters, counters
    screenshot(driver, output_dir, "job-redriven-twice")


def test_a_claim_held_by_a_pause_reads_held_and_not_counted(
    signed_in: Any, client: Any, console_url: str, output_dir: Path
) -> None:
    """Runs made ahead reach the worker while their job is paused: each claim is given back
    (held, with its end), and after the resume the next claim is attempt 1 again."""
    driver = signed_in
    job = client.create_job(
        {"name": unique("every-3s"), "type": "demo.hello", "cron": "*/3 * * * * *", "timeZone": "UTC"}
    )
    job_id = job["jobId"]
    try:
        wait_until(driver, lambda: client.list_runs(job_id, view="upcoming")["items"], "runs made ahead")
        client.pause(job_id)

        def held() -> str | None:
            for run in client.list_runs(job_id, limit=20)["items"]:
                attempts = client.get_run(run["runKey"])["attempts"]
                if any(a["outcome"] == "held" for a in attempts):
                    return str(run["runKey"])
            return None

        key = wait_until(driver, held, "a claim held by the pause", timeout=45)
        client.resume(job_id)
        driver.get(f"{console_url}#/runs/{key}")

        def first_attempt() -> tuple[str, str] | None:
            # The page re-renders as the run is claimed again after the resume, so the row's
            # state and text are read together, and read again if the row is replaced meanwhile.
            rows = every(driver, "[data-test=attempts] tbody tr")
            return (rows[0].get_attribute("data-state"), rows[0].text) if rows else None

        state, text = wait_until(driver, first_attempt, "its attempts")
        assert state == "held"
        assert "not counted" in text and "running" not in text, text
        assert text.startswith("#1"), text
        screenshot(driver, output_dir, "run-held")
    finally:
        client.cancel_job(job_id)


def test_after_a_bulk_request_nothing_stays_selected_and_errors_read_once(
    signed_in: Any, client: Any, console_url: str
) -> None:
    driver = signed_in
    job = dying_job(client, every=1)
    job_id = job["jobId"]
    wait_until(driver, lambda: len(dead_of(client, job_id)) >= 2, "two dead runs", timeout=60)
    client.cancel_job(job_id)
    chosen = dead_of(client, job_id)[:2]
    driver.get(f"{console_url}#/dead-letters?jobId={job_id}")
    wait_until(driver, lambda: all(row_of(driver, "data-run-key", key) for key in chosen), "their rows")

    def counts_zero(name: str) -> bool:
        return "(0)" in one(driver, f"[data-test={name}]").text

    def tick(run_key: str) -> bool:
        row_of(driver, "data-run-key", run_key).find_element(By.CSS_SELECTOR, "[data-test=select]").click()
        return True

    for key in chosen:
        wait_until(driver, functools.partial(tick, key), "the dead letter's tick box")
    assert "(2)" in one(driver, "[data-test=redrive-selected]").text
    one(driver, "[data-test=redrive-selected]").click()
    kind, text = wait_until(driver, lambda: shown_notice(driver), "the redrive notice")
    assert kind == "ok" and "Redriven 2" in text, text
    # The selection went with the request: the buttons count 0 and cannot send an empty one.
    for name in ("redrive-selected", "dismiss-selected"):
        wait_until(driver, functools.partial(counts_zero, name), f"{name} at 0")
        assert one(driver, f"[data-test={name}]").get_attribute("disabled") is not None
    assert not [t for t in every(driver, "[data-test=select]") if t.is_selected()]
    # An API error reads as the API's message, once.
    shown = driver.execute_async_script(
        """const done = arguments[arguments.length - 1];
        import("./api.js").then((m) => done(m.explain(new m.ApiError(400, {
          code: "invalid_request", message: "runKeys: List should have at least 1 item",
          errors: [{field: "runKeys", rule: "List should have at least 1 item"}]}),
          {action: "dismissed"})));"""
    )
    assert shown == "Not dismissed: runKeys: List should have at least 1 item"


def test_the_runs_page_names_each_job_and_says_why_a_run_was_skipped(
    signed_in: Any, client: Any, console_url: str
) -> None:
    driver = signed_in
    job = client.create_job(
        {"name": unique("paused-1s"), "type": "demo.hello", "every": 1, "missedRuns": "skip"}
    )
    job_id = job["jobId"]
    try:
        client.pause(job_id)
        time.sleep(3)
        client.resume(job_id)
        wait_until(
            driver,
            lambda: [r for r in client.list_runs(job_id, limit=50)["items"] if r["state"] == "SKIPPED"],
            "a skipped run",
        )
        driver.get(f"{console_url}#/runs?state=SKIPPED&jobId={job_id}")
        rows = wait_until(driver, lambda: every(driver, "[data-test=all-runs] tbody tr"), "the skipped runs")
        link = rows[0].find_element(By.CSS_SELECTOR, "td:nth-child(2) a")
        assert link.text == job["name"] and link.get_attribute("title") == job_id
        detail = rows[0].find_element(By.CSS_SELECTOR, "td.detail").text
        assert detail.startswith("skipped: ") and ("paused" in detail or "missed" in detail), detail
    finally:
        client.cancel_job(job_id)


def test_times_show_in_utc_or_the_browsers_zone_as_chosen(
    signed_in: Any, client: Any, console_url: str
) -> None:
    driver = signed_in
    job = client.create_job({"name": unique("once"), "type": "demo.hello", "runAt": instant(0)})
    run_key = wait_until(driver, lambda: client.list_runs(job["jobId"])["items"], "its run")[0]["runKey"]
    scheduled = datetime.strptime(run_key.split("@")[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Kolkata"})
    try:
        driver.get(f"{console_url}#/runs?jobId={job['jobId']}")

        def shown() -> tuple[str, str] | None:
            row = row_of(driver, "data-run-key", run_key)
            header = one(driver, "[data-test=all-runs] thead th").text
            return (header, row.find_element(By.CSS_SELECTOR, "td a").text) if row else None

        # UTC unless chosen otherwise: what the API says.
        assert wait_until(driver, shown, "the run") == (
            "Scheduled for (UTC)",
            scheduled.strftime("%Y-%m-%d %H:%M:%SZ"),
        )
        one(driver, "[data-test=zone-toggle]").click()
        local = (scheduled + timedelta(hours=5, minutes=30)).strftime("%Y-%m-%d %H:%M:%S")
        expected = ("Scheduled for (local, UTC+05:30)", local)
        wait_until(driver, lambda: shown() == expected, "the run in the browser's zone")
        # Remembered: a page opened afresh shows the same.
        driver.refresh()
        wait_until(driver, lambda: shown() == expected, "the zone kept across a reload")
        assert one(driver, "[data-test=zone-toggle]").get_attribute("aria-pressed") == "true"
    finally:
        driver.execute_script("localStorage.removeItem('jobsched.timeZone')")
        driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ""})


def test_the_upcoming_fire_times_say_why_an_occurrence_does_not_fire(
    signed_in: Any, client: Any, console_url: str, output_dir: Path
) -> None:
    driver = signed_in
    calendar = unique("closed")
    # The minutes two and three from now: two of the every-minute job's next occurrences.
    start = (datetime.now(UTC) + timedelta(minutes=2)).replace(second=0, microsecond=0)
    window = {
        "start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "end": (start + timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    client.request("PUT", f"/v1/calendars/{calendar}", {"entries": [window]})
    job = client.create_job(
        {
            "name": unique("minutes"),
            "type": "demo.hello",
            "cron": "* * * * *",
            "exclude": [{"calendar": calendar}],
        }
    )
    payroll = client.create_job(
        {
            "name": unique("payroll"),
            "type": "demo.hello",
            "timeZone": "America/New_York",
            "specs": [{"monthly": "nearest-business-day 26", "at": "09:00", "holidays": calendar}],
        }
    )
    try:
        driver.get(f"{console_url}#/jobs/{job['jobId']}?refresh=off")
        excluded = wait_until(
            driver, lambda: every(driver, "[data-test=fire-times] li.excluded"), "the excluded lines"
        )
        assert [line.find_element(By.CSS_SELECTOR, "s").text[:16] for line in excluded] == [
            start.strftime("%Y-%m-%d %H:%M"),
            (start + timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M"),
        ]
        why = f"not fired: excluded by exclude.0 (calendar {calendar}, its days in UTC)"
        assert [line.find_element(By.CSS_SELECTOR, ".reason").text for line in excluded] == [why, why]
        assert len(every(driver, "[data-test=fire-times] li.fires")) == 5
        assert f"except calendar {calendar} (its days in UTC)" in one(driver, ".fields").text
        screenshot(driver, output_dir, "job-fire-times")
        driver.get(f"{console_url}#/jobs/{payroll['jobId']}?refresh=off")
        wait_until(driver, lambda: payroll["jobId"] in one(driver, ".fields").text, "the payroll job")
        assert (
            "monthly on the business day nearest the 26th at 09:00 America/New_York "
            f"(nearest-business-day 26, holidays from calendar {calendar})"
        ) in one(driver, ".fields").text
    finally:
        client.cancel_job(job["jobId"])
        client.cancel_job(payroll["jobId"])
