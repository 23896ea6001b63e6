"""Debian's headless Chromium driven by Playwright, for the tests that open HTML reports:
finding it (a skip without it, a failure under CI), starting it with a short TMPDIR, and
opening a page while recording console problems and requests."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import missing_in_ci


def chromium_path() -> str | None:
    found = os.environ.get("QCDOCTOR_CHROMIUM") or shutil.which("chromium") \
        or shutil.which("chromium-browser")
    if found:
        return found
    missing_in_ci("no chromium found (apt-get install chromium; .ci/run installs it for CI)")


def _short_temp_root() -> str:
    """The shortest writable temporary folder of the usual places, else the default."""
    for folder in ("/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK):
            return folder
    return tempfile.gettempdir()


@contextmanager
def launched_chromium():
    """The system Chromium (Playwright never downloads a browser of its own here)."""
    threads = set(threading.enumerate())
    try:
        with _chromium() as chromium:
            yield chromium
    finally:
        # Playwright's event loop leaves its executor and child-watcher threads to end
        # on their own: a test run next would find them running (and qcdoctor does not
        # fork beside a running thread), so they are waited for here
        for thread in set(threading.enumerate()) - threads:
            thread.join(timeout=30)


@contextmanager
def _chromium():
    from playwright.sync_api import sync_playwright
    # Chromium puts a Unix socket in its TMPDIR, whose path may hold at most 107 bytes:
    # a machine's long TMPDIR would stop it from starting, so it gets a short one
    with tempfile.TemporaryDirectory(prefix="qcd-", dir=_short_temp_root()) as short, \
            sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=chromium_path(),
                                              args=["--no-sandbox", "--disable-gpu"],
                                              env={**os.environ, "TMPDIR": short})
        try:
            yield chromium
        finally:
            chromium.close()


def open_page(browser, page_file: Path, javascript: bool = True):
    """(context, page, console problems, requested URLs) of ``page_file`` opened."""
    context = browser.new_context(viewport={"width": 1000, "height": 2000},
                                  java_script_enabled=javascript)
    page = context.new_page()
    problems, requests = [], []
    page.on("console", lambda m: m.type in ("error", "warning") and problems.append(m.text))
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(page_file.as_uri())
    return context, page, problems, requests
