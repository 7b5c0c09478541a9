"""The browser suite: local mode in this process, the console in Debian's headless
chromium driven by selenium through chromedriver.

`make test` installs chromium and chromium-driver (`make browser`); without them every test
here fails, naming what to install: a console nobody checked must not pass as tested.
Screenshots of every page land in tests/browser/output/ (not committed)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import fast_local_mode

from .helpers import KEY, TENANT, wait_until

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
OUTPUT = Path(__file__).parent / "output"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


@pytest.fixture(scope="package")
def runtime() -> Iterator[Any]:
    with fast_local_mode({KEY: TENANT}) as rt:
        yield rt


@pytest.fixture(scope="package")
def console_url(runtime: Any) -> str:
    return f"{runtime.api_url}/console/"


@pytest.fixture
def client(runtime: Any) -> Any:
    from jobsched_cli.client import ApiClient

    return ApiClient(str(runtime.api_url), api_key=KEY)


@pytest.fixture(scope="package")
def output_dir() -> Path:
    OUTPUT.mkdir(exist_ok=True)
    return OUTPUT


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(
            f"the browser tests need Debian's chromium and chromium-driver ({', '.join(missing)} "
            "missing): `make browser` (or apt-get install -y chromium chromium-driver)"
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("the browser tests need selenium: pip install -e '.[dev]'")
    profile = tempfile.mkdtemp(prefix="jobsched-console-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def signed_in(browser: Any, console_url: str) -> Any:
    """The browser on the console's jobs page, signed in with the test tenant's key."""
    from selenium.webdriver.common.by import By

    browser.get(console_url)
    browser.execute_script("sessionStorage.clear()")
    browser.get(console_url + "#/jobs")
    browser.refresh()
    wait_until(browser, lambda: browser.find_element(By.ID, "key").is_displayed(), "the sign-in form")
    browser.find_element(By.ID, "key").send_keys(KEY)
    browser.find_element(By.CSS_SELECTOR, "#key-form button[type=submit]").click()
    wait_until(browser, lambda: browser.find_element(By.ID, "main").is_displayed(), "the jobs page")
    return browser
