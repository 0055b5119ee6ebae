"""Fixtures of the console's browser tests (every page module of the console uses them): a
broker holding real data (tests/support/console.py writes it), `lockgate console` against it
in a subprocess, and Playwright driving the system's Chromium, headless (Playwright's own
browsers are never downloaded). Screenshots go to a temporary directory, or to
$LOCKGATE_CONSOLE_SCREENSHOTS when set (to refresh docs/console/)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, sync_playwright

from tests.support.broker import BrokerProcess
from tests.support.console import (
    ConsoleData,
    ConsoleProcess,
    running_console,
    write_console_data,
)

CONSOLE_PASSWORD = "browser-test-password"
# Debian's /usr/bin/chromium is a shell wrapper; the binary itself is started directly
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser")
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}


def system_chromium() -> str | None:
    for candidate in CHROMIUM_CANDIDATES:
        found = shutil.which(candidate) if not candidate.startswith("/") else candidate
        if found and os.access(found, os.X_OK):
            return found
    return None


@pytest.fixture(scope="module")
def console_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("console-broker") / "data").start()
    try:
        yield broker
    finally:
        broker.kill()


@pytest.fixture(scope="module")
def console_data(console_broker: BrokerProcess) -> ConsoleData:
    return write_console_data(console_broker.bootstrap)


@pytest.fixture(scope="module")
def console(
    console_broker: BrokerProcess,
    console_data: ConsoleData,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ConsoleProcess]:
    log = tmp_path_factory.mktemp("console") / "console.log"
    with running_console(console_broker.bootstrap, log, password=CONSOLE_PASSWORD) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = system_chromium()
    if executable is None:
        pytest.skip("chromium is not installed (make system-deps installs it)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=executable,
            headless=True,
            # as root in a container, Chromium's sandbox cannot start; /dev/shm may be tiny
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser context (no cookies) and page; 10 s for anything to appear."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(10_000)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("LOCKGATE_CONSOLE_SCREENSHOTS")
    if wanted:
        Path(wanted).mkdir(parents=True, exist_ok=True)
        return Path(wanted)
    return tmp_path_factory.mktemp("screenshots")
