"""A real browser for the console's tests: Playwright for Python driving the system's Chromium.

Playwright's own browser download cannot work here (no network beyond package registries), so the browser is the
distribution's (`apt-get install chromium`, which `.ci/run` does when it can) or the one PRECIS_CHROMIUM names. Without
one, the browser tests skip and the run's summary says so in one line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_HINT = "apt-get install chromium, or set PRECIS_CHROMIUM=/path/to/chromium"

# What the browser tests did in this run, for the summary line (None: no browser test was collected).
outcome: dict[str, str | None] = {"line": None}


@lru_cache(maxsize=1)
def chromium() -> str | None:
    """The Chromium to drive: PRECIS_CHROMIUM, else the first of CANDIDATES on PATH."""
    named = os.environ.get("PRECIS_CHROMIUM")
    if named:
        return named if os.access(named, os.X_OK) else None
    return next((path for path in map(shutil.which, CANDIDATES) if path), None)


def version(path: str) -> str:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "version unknown"
    lines = [line for line in done.stdout.splitlines() if "chrom" in line.lower()]
    return lines[-1].strip() if lines else "version unknown"


def skip_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "browser tests skipped: Playwright is not installed (make creates .venv with it)"
    if chromium() is None:
        named = os.environ.get("PRECIS_CHROMIUM")
        where = f"PRECIS_CHROMIUM={named} is not an executable" if named else f"none of {', '.join(CANDIDATES)} on PATH"
        return f"browser tests skipped: no Chromium found ({where}); {INSTALL_HINT}"
    return None


def summary_line() -> str | None:
    """The line `make test` prints about the browser tests, if any was collected."""
    return outcome["line"]
