"""Every page of the web UI through an HTTP client: HTML with the expected ids and names,
JSON twins equal to the Python API, 4xx for bad refs, paths and slices, and nothing
changed in the repository by any request."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import zarr
from PIL import Image
from starlette.testclient import TestClient

import zarrlake as zl
from tests.helpers.ui import Built
from zarrlake.ui import create_app
from zarrlake.ui.preview import MAX_CHUNKS


@pytest.fixture(scope="module")
def client(built: Built) -> TestClient:
    return TestClient(create_app(built.repo))


def state(repo: zl.Repo) -> tuple:
    """Everything a request could change."""
    sessions = [(s.id, s.state, s.expires_at) for s in repo.list_sessions()]
    return repo.list_branches(), repo.list_tags(), sessions


def test_home_lists_branches_tags_sessions_and_stats(client: TestClient, built: Built) -> None:
    repo = built.repo
    r = client.get("/")
    assert r.status_code == 200
    for name in ("main", "dev", "v1", built.session_id, "work in progress", "dee"):
        assert name in r.text
    assert repo.resolve("main") in r.text
    data = client.get("/?format=json").json()
    assert {b["name"]: b["head"] for b in data["branches"]} == repo.list_branches()
    assert {t["name"]: t["commit"] for t in data["tags"]} == repo.list_tags()
    assert [s["id"] for s in data["sessions"]] == [s.id for s in repo.list_sessions()]
    assert 0 < data["sessions"][0]["expires_in_s"] <= 5 * 3600
    stats = data["stats"]
    assert stats["commits"] == len(repo.log("main"))
    assert stats["arrays"] == 4
    assert stats["chunks"] == 11 + 8 + 36 + 2  # grid2d less its deleted chunk, t2m, field, labels
    assert stats["bytes"] > 0
    api = client.get("/api/home").json()  # the same document, a moment later:
    for doc in (api, data):  # seconds to expiry, rounded, may have ticked between the two
        ticks = [s.pop("expires_in_s") for s in doc["sessions"]]
        doc["ticks"] = ticks
    assert all(abs(a - b) <= 1 for a, b in zip(api.pop("ticks"), data.pop("ticks"), strict=True))
    assert api == data


def test_log_pages_and_json_match_the_api(client: TestClient, built: Built) -> None:
    repo = built.repo
    r = client.get("/log", params={"ref": "main"})
    assert r.status_code == 200
    for c in repo.log("main"):
        assert c.id in r.text and c.message in r.text
    data = client.get("/log", params={"ref": "dev", "format": "json"}).json()
    assert [c["id"] for c in data["commits"]] == [c.id for c in repo.log("dev")]
    assert data["commits"][0]["message"] == "Experiment on dev"
    assert client.get("/api/log", params={"ref": "v1"}).json()["commits"][0]["id"] == built.first
    assert client.get("/log", params={"ref": "main", "page": "1"}).status_code == 404
    assert client.get("/log", params={"ref": "main", "page": "-1"}).status_code == 400


def test_commit_page_has_chunk_maps(client: TestClient, built: Built) -> None:
    repo = built.repo
    r = client.get(f"/commit/{built.t2m}")
    assert r.status_code == 200
    assert "Day 2 of t2m" in r.text and built.first in r.text
    assert 'data-path="weather/t2m"' in r.text
    data = client.get(f"/commit/{built.t2m}", params={"format": "json"}).json()
    c = repo.log(built.t2m, limit=1)[0]
    assert data["commit"]["id"] == c.id and data["commit"]["parents"] == list(c.parent_ids)
    assert data["commit"]["session_id"] == c.session_id
    assert data["diff"] == repo.diff(built.first, built.t2m).to_json()
    (m,) = data["chunk_maps"]
    assert m["path"] == "weather/t2m" and m["grid"] == [3, 2, 2]
    assert m["written_total"] == 4
    # Drawn: time x lon at lat chunk 0; day 2 is time chunk 1.
    assert (m["rows_dim"], m["cols_dim"], m["index"]) == (0, 2, {"1": 0})
    assert sorted((x["row"], x["col"]) for x in m["cells"]) == [(1, 0), (1, 1)]
    assert r.text.count('class="cell written"') == 2


def test_commit_with_deleted_chunk(client: TestClient, built: Built) -> None:
    data = client.get(f"/api/commit/{built.grid}").json()
    (m,) = data["chunk_maps"]
    kinds = {(x["row"], x["col"]): x["kind"] for x in m["cells"]}
    assert kinds == {(0, 0): "written", (0, 1): "written", (1, 0): "deleted"}
    html = client.get(f"/commit/{built.grid}").text
    assert 'data-coloured="3"' in html and 'class="cell deleted"' in html


def test_diff_between_refs(client: TestClient, built: Built) -> None:
    repo = built.repo
    r = client.get("/diff", params={"from": "v1", "to": "main"})
    assert r.status_code == 200 and "grid2d" in r.text and "weather/t2m" in r.text
    data = client.get("/diff", params={"from": "v1", "to": "dev", "format": "json"}).json()
    assert data["diff"] == repo.diff("v1", "dev").to_json()
    assert [m["path"] for m in data["chunk_maps"]] == ["weather/t2m"]


def test_chunk_map_page_and_its_slices(client: TestClient, built: Built) -> None:
    params = {"to": built.t2m, "path": "weather/t2m"}
    r = client.get("/chunkmap", params=params)
    assert r.status_code == 200 and 'id="chunkmap"' in r.text
    m = client.get("/chunkmap", params={**params, "slice": "1,:,:", "format": "json"}).json()
    assert len(m["cells"]) == 4 and m["written_in_slice"] == 4
    m = client.get("/chunkmap", params={**params, "slice": "0,:,:", "format": "json"}).json()
    assert m["cells"] == [] and m["written_total"] == 4
    for bad in ("9,:,:", ":,:,:", "1,1,1", "a,:,:", "1,:"):
        assert client.get("/chunkmap", params={**params, "slice": bad}).status_code == 400, bad
    root = built.repo.log("main")[-1].id  # the repository's initial commit: no parent
    assert client.get("/chunkmap", params={"to": root, "path": "grid2d"}).status_code == 400
    unchanged = {"to": built.t2m, "path": "grid2d"}
    assert client.get("/chunkmap", params=unchanged).status_code == 404


def test_tree_shows_groups_and_arrays(client: TestClient, built: Built) -> None:
    r = client.get("/tree", params={"ref": "main"})
    assert r.status_code == 200
    for name in ("weather", "weather/t2m", "weather/field", "grid2d", "labels", "int32"):
        assert name in r.text
    data = client.get("/tree", params={"ref": "v1", "format": "json"}).json()
    group = zarr.open_group(built.repo.readonly_session("v1").store, mode="r")
    arrays = {a["path"]: a for a in data["arrays"]}
    assert set(arrays) == {"weather/t2m", "weather/field", "grid2d", "labels"}
    t2m = group["weather/t2m"]
    assert arrays["weather/t2m"]["shape"] == list(t2m.shape)
    assert arrays["weather/t2m"]["chunks"] == list(t2m.chunks)
    assert arrays["weather/t2m"]["attributes"] == {"units": "K"}
    assert arrays["weather/t2m"]["fill_value"] == "NaN"
    assert data["groups"] == [{"path": "weather", "attributes": {"source": "test"}}]
    sub = client.get("/tree", params={"ref": "main", "path": "weather", "format": "json"}).json()
    assert [a["path"] for a in sub["arrays"]] == ["weather/field", "weather/t2m"]


def test_array_page_preview_and_compare(client: TestClient, built: Built) -> None:
    repo = built.repo
    params = {"ref": "main", "path": "weather/t2m", "slice": "3,:,:"}
    r = client.get("/array", params=params)
    assert r.status_code == 200
    assert 'id="preview-1"' in r.text and "units" in r.text and "time" in r.text
    data = client.get("/array", params={**params, "format": "json"}).json()
    want = zarr.open_array(repo.readonly_session("main").store, path="weather/t2m", mode="r")[3]
    (p,) = data["previews"]
    assert p["samples"] == [8, 10] and p["nan"] == 1 and p["fill"] == 0
    assert p["min"] == pytest.approx(float(np.nanmin(want)))
    assert p["max"] == pytest.approx(float(np.nanmax(want)))
    png = client.get("/preview.png", params=params)
    assert png.headers["content-type"] == "image/png"
    img = Image.open(io.BytesIO(png.content))
    assert img.size[0] > 0 and img.size[1] > 0
    # Side by side: at v1 time 3 was never written (fill), at main it was.
    cmp = client.get("/array", params={**params, "compare": "v1", "format": "json"}).json()
    assert [x["ref"] for x in cmp["previews"]] == ["main", "v1"]
    assert cmp["previews"][1]["fill"] == 80 and cmp["previews"][1]["min"] is None
    html = client.get("/array", params={**params, "compare": "v1"}).text
    assert 'id="preview-2"' in html
    other = client.get("/array", params={"ref": "main", "path": "grid2d", "format": "json"})
    assert other.json()["previews"][0]["samples"] == [12, 16]
    assert other.json()["previews"][0]["fill"] == 16  # the deleted chunk


def test_preview_reads_a_bounded_number_of_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = zl.Repo.create(tmp_path / "big")
    s = repo.create_session("main")
    a = zarr.open_group(s.store).create_array("big", shape=(300, 400), chunks=(5, 5), dtype="f4")
    a[:] = np.arange(300 * 400, dtype="f4").reshape(300, 400)
    s.commit("4,800 chunks")
    reads: list[str] = []
    original = zl.Session.read

    def counting(self: zl.Session, key: str, byte_range: object = None) -> bytes | None:
        if key.startswith("big/c/"):
            reads.append(key)
        return original(self, key, byte_range)

    monkeypatch.setattr(zl.Session, "read", counting)
    client = TestClient(create_app(repo))
    data = client.get("/array", params={"ref": "main", "path": "big", "format": "json"}).json()
    assert 0 < len(reads) <= MAX_CHUNKS
    p = data["previews"][0]
    assert p["chunks_read"] == len(set(reads))
    assert p["min"] >= 0 and p["max"] <= 300 * 400


BAD = [
    ("/log", {"ref": "no-such-branch"}, 404),
    ("/log", {"ref": "a" * 2000}, 400),
    ("/commit/0123456789abcdef", {}, 404),
    ("/diff", {"from": "v1"}, 400),
    ("/diff", {"from": "v1", "to": "nope"}, 404),
    ("/tree", {"ref": "main", "path": "../../etc"}, 400),
    ("/tree", {"ref": "main", "path": "weather/t2m"}, 400),
    ("/tree", {"ref": "main", "path": "missing"}, 404),
    ("/array", {"ref": "main", "path": "missing"}, 404),
    ("/array", {"ref": "main", "path": "weather"}, 400),
    ("/array", {"ref": "main", "path": "labels"}, 400),  # complex: no image
    ("/array", {"ref": "main", "path": "weather/t2m", "slice": "99,:,:"}, 400),
    ("/array", {"ref": "main", "path": "weather/t2m", "slice": "0,:,0:99999999999"}, 400),
    ("/array", {"ref": "main", "path": "weather/t2m", "slice": "1" + "0" * 40 + ",:,:"}, 400),
    ("/array", {"ref": "main", "path": "weather/t2m", "slice": ":,:,:"}, 400),
    ("/array", {"ref": "main", "path": "weather/t2m", "slice": "0,0,0"}, 400),
    ("/array", {"ref": "main", "path": "weather/t2m", "slice": "0,5:2,:"}, 400),
    ("/array", {"ref": "main", "path": "weather/t2m", "compare": "nope"}, 404),
    ("/preview.png", {"ref": "main", "path": "weather/t2m", "vmin": "nan"}, 400),
    ("/preview.png", {"ref": "main", "path": "weather/t2m", "slice": "x"}, 400),
]


@pytest.mark.parametrize(("url", "params", "status"), BAD)
def test_bad_input_gets_a_clear_4xx(
    client: TestClient, url: str, params: dict, status: int
) -> None:
    r = client.get(url, params=params)
    assert r.status_code == status
    assert 'id="error"' in r.text
    j = client.get(url, params={**params, "format": "json"})
    assert j.status_code == status and j.json()["error"]
    assert client.get("/").status_code == 200  # still serving


def test_requests_change_nothing(client: TestClient, built: Built) -> None:
    before = state(built.repo)
    for url in ("/", "/log", f"/commit/{built.grid}", "/tree", "/diff?from=v1&to=dev"):
        assert client.get(url).status_code == 200
        assert client.post(url).status_code == 405
        assert client.delete(url).status_code == 405
    assert state(built.repo) == before
    s = built.repo.join_session(built.session_id)
    assert zarr.open_array(s.store, path="grid2d")[0, 0] == 7  # still staged, untouched


def test_token_is_required_when_configured(built: Built) -> None:
    token = "t0k3n-" + "x" * 20
    client = TestClient(create_app(built.repo, token=token))
    assert client.get("/").status_code == 401
    assert client.get("/api/home").status_code == 401
    assert client.get("/preview.png?ref=main&path=grid2d").status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    first = client.get("/", params={"token": token})
    assert first.status_code == 200 and "zarrlake_ui_token" in first.headers["set-cookie"]
    assert client.get("/log").status_code == 200  # the cookie carries it now
    client.cookies.clear()
    assert client.get("/log").status_code == 401


def test_the_empty_first_commit_has_an_empty_tree(client: TestClient, built: Built) -> None:
    first = built.repo.log("main")[-1].id
    page = client.get(f"/commit/{first}")
    assert page.status_code == 200 and f"/tree?ref={first}" in page.text
    tree = client.get("/tree", params={"ref": first})
    assert tree.status_code == 200 and "No groups." in tree.text
    data = client.get("/tree", params={"ref": first, "format": "json"}).json()
    assert (data["groups"], data["arrays"], data["path"]) == ([], [], "")
    assert client.get("/tree", params={"ref": first, "path": "weather"}).status_code == 404
