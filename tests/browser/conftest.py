"""The browser tests' Chromium (tests/browser/chromium.py): found or installed once, else the test is skipped."""

import pytest

from tests.browser.chromium import CHROMIUM, ensure_chromium


@pytest.fixture(scope="module")
def chromium():
    pytest.importorskip("playwright.sync_api", reason="playwright (pip) is not installed")
    path = ensure_chromium()
    if path is None:
        pytest.skip(f"{CHROMIUM} is missing and cannot be installed here (needs root and apt-get: "
                    "`apt-get install -y chromium`; .ci/run does this)")
    return path
