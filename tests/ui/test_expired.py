"""The web UI after `expire`: the pages of retained commits work and say where the history
ends; and the Host header check against DNS rebinding."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
import zarr
from starlette.testclient import TestClient

import zarrlake as zl
from zarrlake.cli.ui import allowed_hosts
from zarrlake.ui import create_app


@pytest.fixture
def expired(tmp_path) -> zl.Repo:
    """main: initial, "create" (tagged v1), "write", "again"; expire(0) keeps the head and
    the tag, and drops "write" and the initial commit."""
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    zarr.open_group(s.store).create_array("a", shape=(4, 4), chunks=(2, 2), dtype="i4")[:] = 1
    s.commit("create")
    repo.create_tag("v1")
    for value, message in enumerate(("write", "again"), start=2):
        s = repo.create_session()
        zarr.open_array(s.store, path="a")[0:2, 0:2] = np.full((2, 2), value)
        s.commit(message)
    repo.expire(older_than=timedelta(0))
    yield repo
    repo.close()


def test_pages_of_retained_commits_work_after_expire(expired: zl.Repo) -> None:
    client = TestClient(create_app(expired))
    head = expired.resolve("main")
    parent = expired.commit_info(head).parent_ids[0]
    page = client.get(f"/commit/{head}")
    assert page.status_code == 200 and "expired on" in page.text, page.text
    data = client.get(f"/api/commit/{head}").json()
    assert data["parent_expired"]["commit"] == parent
    assert [n["path"] for n in data["nodes"]] == ["a"] and data["chunk_maps"]
    mapped = client.get("/chunkmap", params={"to": head, "path": "a"})
    assert mapped.status_code == 200 and "whose parent was expired" in mapped.text
    log = client.get("/log", params={"ref": "main"})
    assert log.status_code == 200 and 'id="history-expired"' in log.text
    assert client.get("/api/log", params={"ref": "main"}).json()["history_expired"]["commit"] == (
        head
    )
    assert client.get("/commit/v1").status_code == 200
    gone = client.get(f"/commit/{parent}")
    assert gone.status_code == 404 and "was expired on" in gone.text


def test_only_the_bound_host_names_are_accepted(expired: zl.Repo) -> None:
    assert allowed_hosts("127.0.0.1") == ["127.0.0.1", "localhost", "127.0.0.1", "[::1]"]
    assert allowed_hosts("::1") == ["[::1]", "localhost", "127.0.0.1", "[::1]"]
    assert allowed_hosts("data.example.org") == ["data.example.org"]
    assert allowed_hosts("0.0.0.0") is None and allowed_hosts("::") is None
    client = TestClient(create_app(expired, hosts=allowed_hosts("127.0.0.1")))
    for host in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "LOCALHOST"):
        assert client.get("/", headers={"Host": host}).status_code == 200, host
    for host in ("evil.example:8765", "127.0.0.1.evil.example", "attacker.localhost"):
        assert client.get("/", headers={"Host": host}).status_code == 400, host
