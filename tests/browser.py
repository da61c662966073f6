"""Headless Chromium for the chat page's tests, driven by Selenium through Debian's
`chromium` and `chromium-driver` (/usr/bin/chromium, /usr/bin/chromedriver).

Without them the browser tests skip, saying why, unless $FLINT_TEST_BROWSER_REQUIRED is set:
`.ci/run` installs both packages and sets it, so in CI a browser that does not start fails
the run instead of skipping it."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import pytest

REQUIRED_VARIABLE = "FLINT_TEST_BROWSER_REQUIRED"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# As root in a sandbox with no network: no sandboxing of its own, no GPU, and none of the
# background connections (updates, sync, safe browsing) a closed network refuses.
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                  "--no-first-run", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--window-size=1280,900")
Value = TypeVar("Value")


def no_browser(reason: str) -> None:
    if os.environ.get(REQUIRED_VARIABLE, "").strip() not in ("", "0"):
        pytest.fail(f"Chromium is required (${REQUIRED_VARIABLE} is set) and cannot start: {reason}", pytrace=False)
    pytest.skip(f"no browser: {reason}")


@contextmanager
def chromium() -> Iterator:
    """A Selenium WebDriver on a fresh headless Chromium profile, quit afterwards."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as error:
        no_browser(f"selenium is not installed ({error})")
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        no_browser(f"{CHROMIUM} and {CHROMEDRIVER} are needed (Debian: apt install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    with tempfile.TemporaryDirectory(prefix="flint-chromium-") as profile:
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        try:
            yield driver
        finally:
            driver.quit()


def wait_for(condition: Callable[[], Value], timeout: float = 60, what: str = "the page") -> Value:
    """`condition()`'s first truthy value, polled; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value
