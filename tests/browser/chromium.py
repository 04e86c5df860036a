"""Debian's chromium driven by Playwright, as the browser tests use it (``playwright install`` is not used: it
downloads a browser build): where it is, how it is installed when missing, how it is started."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def ensure_chromium() -> str | None:
    """Path of Debian's chromium, installing it with apt-get when missing and root; None if impossible."""
    if Path(CHROMIUM).exists():
        return CHROMIUM
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        try:
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900,
                           check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
    return CHROMIUM if Path(CHROMIUM).exists() else None


def launch(pw, chromium: str, home: Path):
    """A headless Chromium whose config, cache and crash folders are under ``home``, not in the user's home."""
    env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"))
    return pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS, env=env)
