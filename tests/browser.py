"""Headless Chromium for the tests that look at pages as a person would (the Airflow UI, the run report): Debian's
chromium + chromium-driver, driven by selenium, with an explicit driver path (selenium then never tries to download
a driver: there is no network here) and the browser's console log kept."""

from __future__ import annotations

import shutil
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
MISSING = "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"


def chromium(profile: Path, window: str = "1400,1000"):
    """A headless Chromium with its own profile directory; the caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
                "--disable-component-update", "--disable-sync", "--disable-quic", f"--window-size={window}",
                f"--user-data-dir={profile}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    return driver


def console_errors(driver) -> list[str]:
    """The page's console messages at level SEVERE (script errors, failed loads) since the last call."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
