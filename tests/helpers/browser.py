"""A real browser on a real server for the UI tests: headless Debian Chromium driven
through chromedriver (installed when missing), and a `zarrlake ui` process on a free port,
stopped by PID. Screenshots go to the test's directory; with ZARRLAKE_UPDATE_SCREENSHOTS=1
they also replace docs/screenshots/*.png (the pictures of the README and the docs)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1100,1000",
]


def ensure_chromium() -> None:
    """Debian's chromium and chromium-driver, installed when missing."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "chromium", "chromium-driver"], check=True, env=env
    )


@contextlib.contextmanager
def ui_server(location: str, *options: str) -> Iterator[str]:
    """`zarrlake ui` on the repository at `location`, any free port, with `options`;
    yields the URL it prints (with its token, if given one)."""
    script = Path(sys.executable).parent / "zarrlake"
    proc = subprocess.Popen(
        [str(script), "-r", location, "ui", "--port", "0", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if " at http://" not in line:
            proc.kill()
            raise AssertionError(f"zarrlake ui did not start: {line!r} {proc.stderr.read()!r}")
        yield line.rsplit(" at ", 1)[1].strip()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def headless_browser(profile: Path) -> Iterator[WebDriver]:
    """Headless Chromium with its profile in `profile`, quit afterwards."""
    ensure_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def shoot(driver: WebDriver, tmp_path: Path, name: str) -> Path:
    """A screenshot of the page as `name` (and into docs/screenshots when asked)."""
    out = tmp_path / name
    assert driver.save_screenshot(str(out))
    assert out.stat().st_size > 10_000
    if os.environ.get("ZARRLAKE_UPDATE_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out, DOCS / name)
    return out
