"""A real browser on a real server (headless Chromium through chromedriver, a `zarrlake ui`
process stopped by PID): from the header to the list of pull requests, to one, its
failing check and the outlined chunk on its chunk map, then to the source's head commit.
With ZARRLAKE_UPDATE_SCREENSHOTS=1 the screenshot replaces docs/screenshots/pull-request.png."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

import zarrlake as zl
from tests.helpers.browser import headless_browser, shoot, ui_server
from tests.pulls.conftest import write_row
from tests.pulls.test_ui_pages import metastore_state
from tests.pulls.test_ui_pages import repo as built_repo  # noqa: F401 - the module fixture


@pytest.fixture(scope="module")
def server(built_repo: zl.Repo) -> Iterator[str]:  # noqa: F811
    """`zarrlake ui` on the repository; yields its URL."""
    with ui_server(built_repo.spec.location) as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    with headless_browser(tmp_path_factory.mktemp("chromium-profile")) as driver:
        yield driver


def test_header_to_pull_requests_to_one_to_its_source_head(
    server: str,
    browser: WebDriver,
    built_repo: zl.Repo,  # noqa: F811
    tmp_path: Path,
) -> None:
    b = browser
    b.get(server)
    b.find_element(By.ID, "nav-pulls").click()
    WebDriverWait(b, 20).until(lambda d: d.find_elements(By.ID, "pulls"))
    rows = b.find_elements(By.CSS_SELECTOR, "tr.pull")
    assert [r.get_attribute("data-id") for r in rows] == ["1"]

    b.find_element(By.CSS_SELECTOR, 'tr.pull[data-id="1"] a.pull-link').click()
    WebDriverWait(b, 20).until(lambda d: d.find_elements(By.ID, "pull-title"))
    assert b.find_element(By.ID, "pull-title").text == "Day 1"
    check = b.find_element(By.CSS_SELECTOR, 'tr.check[data-name="t-range"]')
    assert check.get_attribute("data-passed") == "no" and "outside [0, 100]" in check.text
    assert len(b.find_elements(By.CSS_SELECTOR, "li.blocker")) == 2
    failing = b.find_elements(By.CSS_SELECTOR, 'svg.chunkmap[data-path="t"] rect.cell.failing')
    assert len(failing) == 1 and failing[0].size["width"] > 0
    assert "a check failed here" in failing[0].find_element(By.TAG_NAME, "title").get_attribute(
        "textContent"
    )
    b.execute_script("arguments[0].scrollIntoView()", b.find_element(By.ID, "blockers"))
    shoot(b, tmp_path, "pull-request.png")

    b.find_element(By.CSS_SELECTOR, "#pull a.commit-link").click()
    WebDriverWait(b, 20).until(lambda d: d.find_elements(By.ID, "commit-id"))
    assert b.find_element(By.ID, "commit-id").text == built_repo.resolve("day1")

    b.get(server.rstrip("/") + "/pulls?state=merged")
    assert [r.get_attribute("data-id") for r in b.find_elements(By.CSS_SELECTOR, "tr.pull")] == [
        "2"
    ]


def test_a_browser_on_a_pull_request_page_writes_nothing(
    server: str,
    browser: WebDriver,
    built_repo: zl.Repo,  # noqa: F811
) -> None:
    repo = built_repo
    repo.create_branch("day4")
    write_row(repo, "day4", 7, 900, "a bad day 4")
    pr = repo.create_pull_request("day4", title="Day 4", author="bot")
    before = metastore_state(repo)
    b = browser
    b.get(server.rstrip("/") + "/pulls")
    b.find_element(By.CSS_SELECTOR, f'tr.pull[data-id="{pr.id}"] a.pull-link').click()
    WebDriverWait(b, 20).until(lambda d: d.find_elements(By.ID, "pull-title"))
    check = b.find_element(By.CSS_SELECTOR, 'tr.check[data-name="t-range"]')
    assert check.get_attribute("data-passed") == "no" and "outside [0, 100]" in check.text
    failing = b.find_elements(By.CSS_SELECTOR, 'svg.chunkmap[data-path="t"] rect.cell.failing')
    assert len(failing) == 1
    assert metastore_state(repo) == before
