"""`zarrlake ui` as a real process: the token it is given is checked on every request, and
addresses other than loopback are recognised as needing one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.browser import ui_server
from tests.helpers.ui import Built
from zarrlake.cli.ui import is_loopback

TOKEN = "a-token-of-at-least-16-chars"


@pytest.fixture(scope="module")
def served(built: Built) -> Iterator[str]:
    with ui_server(str(built.path), "--token", TOKEN) as url:
        assert url.startswith("http://127.0.0.1:") and url.endswith(f"?token={TOKEN}"), url
        yield url.split("?", 1)[0]


def test_every_request_needs_the_token(served: str) -> None:
    for path in ("", "log", "api/home", "tree?ref=main", "preview.png?ref=main&path=grid2d"):
        assert httpx.get(served + path).status_code == 401, path
    assert httpx.get(served, headers={"Authorization": "Bearer nope"}).status_code == 401
    ok = httpx.get(served + "api/home", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200 and ok.json()["branches"]
    assert httpx.get(served, params={"token": TOKEN}).status_code == 200


def test_other_host_names_are_refused(served: str) -> None:
    """Against DNS rebinding: a page whose name now points here sends its own Host."""
    headers = {"Host": "rebound.example", "Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(served + "api/home", headers=headers).status_code == 400
    assert httpx.get(served.replace("127.0.0.1", "localhost") + "api/home").status_code == 401


def test_short_token_is_refused(built: Built) -> None:
    script = Path(sys.executable).parent / "zarrlake"
    cmd = [str(script), "-r", str(built.path), "ui", "--port", "0", "--token", "short"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "at least 16 characters" in done.stderr  # a usage error


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("example.org", False),
    ],
)
def test_which_hosts_need_a_token(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
