"""What the browser tests share besides fixtures: the console's key and tenant, waiting on
the page, and screenshots."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

KEY = "console-key"

TENANT = "console"

T = TypeVar("T")


def wait_until(driver: Any, probe: Callable[[], T | None], what: str, timeout: float = 30) -> T:
    """Until `probe` returns something truthy; element lookups that fail count as not yet."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    def attempt(_: Any) -> Any:
        try:
            return probe()
        except (NoSuchElementException, StaleElementReferenceException):
            return False

    try:
        result: T = WebDriverWait(driver, timeout, poll_frequency=0.2).until(attempt)
    except Exception as exc:
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}") from exc
    return result


def screenshot(driver: Any, output_dir: Path, name: str) -> Path:
    path = output_dir / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path
