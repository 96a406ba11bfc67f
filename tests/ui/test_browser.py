"""A real browser on a real server: headless Debian Chromium, driven through chromedriver,
follows links from the home page to a commit and its chunk map, opens the array and changes
the slice. The server is a `zarrlake ui` process on a free port, stopped by PID.

Screenshots go to a temporary directory; with ZARRLAKE_UPDATE_SCREENSHOTS=1 they also
replace docs/screenshots/*.png (the pictures of the README and of docs/how-to/web-ui.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from tests.helpers.browser import headless_browser, shoot, ui_server
from tests.helpers.ui import Built


@pytest.fixture(scope="module")
def server(built: Built) -> Iterator[str]:
    """`zarrlake ui` on the built repository; yields its URL."""
    with ui_server(str(built.path)) as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    with headless_browser(tmp_path_factory.mktemp("chromium-profile")) as driver:
        yield driver


def loaded(driver: WebDriver, img: WebElement) -> int:
    """The image's natural width once it has loaded (0 if it failed)."""
    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return arguments[0].complete", img))
    return int(driver.execute_script("return arguments[0].naturalWidth", img))


def test_home_to_commit_to_chunk_map_to_array(
    server: str, browser: WebDriver, built: Built, tmp_path: Path
) -> None:
    b = browser
    b.get(server)
    assert b.find_element(By.CSS_SELECTOR, f'tr.session[data-id="{built.session_id}"]')
    assert b.find_element(By.ID, "stat-commits").text == str(len(built.repo.log("main")))

    # home -> the head commit of main
    b.find_element(By.CSS_SELECTOR, 'tr.branch[data-name="main"] a.commit-link').click()
    WebDriverWait(b, 20).until(lambda d: d.find_elements(By.ID, "commit-id"))
    assert b.find_element(By.ID, "commit-id").text == built.storm
    assert b.find_element(By.ID, "message").text == "Storm over the north-east"
    cells = b.find_elements(By.CSS_SELECTOR, 'svg.chunkmap[data-path="weather/field"] rect.cell')
    assert len(cells) == 6 and all(c.get_attribute("class") == "cell written" for c in cells)
    shoot(b, tmp_path, "commit-chunk-map.png")

    # commit -> the chunk map page
    b.find_element(By.CSS_SELECTOR, "a.chunkmap-link").click()
    WebDriverWait(b, 20).until(lambda d: d.find_elements(By.ID, "chunkmap"))
    assert len(b.find_elements(By.CSS_SELECTOR, "#chunkmap rect.cell.written")) == 6
    assert b.find_element(By.CSS_SELECTOR, "#chunkmap svg").size["width"] > 100

    # chunk map -> the array, then change the slice and compare with the tag
    b.find_element(By.ID, "array-link").click()
    WebDriverWait(b, 20).until(lambda d: d.find_elements(By.ID, "preview-1"))
    assert loaded(b, b.find_element(By.ID, "preview-1")) > 0
    assert loaded(b, b.find_element(By.ID, "colorbar")) > 0
    box = b.find_element(By.ID, "slice")
    box.clear()
    box.send_keys("0:120,60:240")
    b.find_element(By.ID, "compare").send_keys("v1")
    b.find_element(By.ID, "show").click()
    WebDriverWait(b, 20).until(lambda d: d.find_elements(By.ID, "preview-2"))
    assert "slice=0%3A120%2C60%3A240" in b.current_url
    assert b.find_element(By.ID, "slice").get_attribute("value") == "0:120,60:240"
    for img_id in ("preview-1", "preview-2"):
        img = b.find_element(By.ID, img_id)
        assert loaded(b, img) > 0 and img.size["width"] > 0 and img.size["height"] > 0
    shoot(b, tmp_path, "array-preview.png")


def test_bad_slice_shows_an_error_page_and_the_server_stays_up(
    server: str, browser: WebDriver
) -> None:
    browser.get(server.rstrip("/") + "/array?ref=main&path=weather/field&slice=0,0")
    assert "must have exactly 2 ranges" in browser.find_element(By.ID, "error").text
    browser.get(server)
    assert browser.find_element(By.ID, "branches")
