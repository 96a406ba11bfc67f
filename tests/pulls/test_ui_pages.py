"""The pull request pages through an HTTP client: the list by state, one pull request with
its checks, reviews, comments and failing chunks marked on its chunk map, JSON twins equal
to the Python API, 4xx for bad ids and states, and no branch moved by any request."""

from __future__ import annotations

import re

import pytest
import zarr
from starlette.testclient import TestClient

import zarrlake as zl
from tests.pulls.conftest import COLS, ROWS, write_row
from zarrlake.checks import ValueRange
from zarrlake.ui import create_app


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> zl.Repo:
    """Pull request #1 (day1, a bad row 3, changes requested) and #2 (merged)."""
    repo = zl.Repo.create(tmp_path_factory.mktemp("pulls-ui") / "repo")
    s = repo.create_session()
    zarr.create_array(s.store, name="t", shape=(ROWS, COLS), chunks=(1, COLS), dtype="i8")
    s.commit("array t")
    repo.add_check("t-range", ValueRange("t", min=0, max=100), branches=("main",))
    for b in ("day1", "day2"):
        repo.create_branch(b)
    write_row(repo, "day1", 1, 11, "day 1")
    write_row(repo, "day1", 3, 500, "a bad row")
    write_row(repo, "day2", 5, 15, "day 2")
    pr = repo.create_pull_request("day1", title="Day 1", description="ingest", author="bot")
    pr.request_changes(by="bob", text="row 3 is out of range")
    pr.comment("rerunning the ingest", by="bot")
    done = repo.create_pull_request("day2", title="Day 2", author="bot")
    done.approve(by="alice")
    done.merge(by="alice")
    return repo


@pytest.fixture(scope="module")
def client(repo: zl.Repo) -> TestClient:
    return TestClient(create_app(repo))


def test_the_list_shows_pull_requests_by_state(client: TestClient, repo: zl.Repo) -> None:
    r = client.get("/pulls")
    assert r.status_code == 200
    assert 'data-id="1"' in r.text and 'data-id="2"' not in r.text and "Day 1" in r.text
    merged = client.get("/pulls", params={"state": "merged"})
    assert 'data-id="2"' in merged.text and 'data-id="1"' not in merged.text
    doc = client.get("/api/pulls", params={"state": "all"}).json()
    assert doc["pulls"] == [p.to_json(checks=False) for p in repo.list_pull_requests(None)]
    assert 'id="nav-pulls"' in client.get("/").text


def test_a_pull_request_page_shows_checks_reviews_comments_and_failing_chunks(
    client: TestClient, repo: zl.Repo
) -> None:
    before = repo.list_branches()
    r = client.get("/pull/1")
    assert r.status_code == 200
    assert 'data-name="t-range" data-passed="no"' in r.text
    assert "outside [0, 100]" in r.text and "row 3 is out of range" in r.text
    assert 'data-by="bob" data-verdict="request_changes"' in r.text
    assert "rerunning the ingest" in r.text
    blockers = re.findall(r'class="blocker">([^<]*)', r.text)
    assert len(blockers) == 2 and "bob requested changes" in blockers[1]
    cells = re.findall(r'<rect class="(cell [^"]*)"', r.text)
    assert sorted(cells) == ["cell written", "cell written failing"]
    doc = client.get("/pull/1", params={"format": "json"}).json()
    pr = repo.pull_request(1)
    assert {k: doc[k] for k in pr.to_json()} == pr.to_json()
    assert doc["diff_from"] == repo.merge_base("main", "day1") and doc["diff_to"] == pr.source_head
    [m] = doc["chunk_maps"]
    assert (m["path"], m["failing"], m["written_total"]) == ("t", 1, 2)
    assert repo.list_branches() == before


def test_a_merged_pull_request_shows_its_merge_commit_change(
    client: TestClient, repo: zl.Repo
) -> None:
    doc = client.get("/api/pull/2").json()
    merge = repo.pull_request(2).merge_commit
    assert doc["state"] == "merged" and doc["diff_to"] == merge
    assert doc["diff_from"] == repo.commit_info(merge).parent_ids[0]
    assert [n["path"] for n in doc["nodes"]] == ["t"] and "checks" not in doc
    r = client.get("/pull/2")
    assert 'id="merge-commit"' in r.text and merge[:12] in r.text


@pytest.mark.parametrize(
    ("url", "status", "text"),
    [
        ("/pull/9", 404, "no pull request #9"),
        ("/pull/nine", 400, "positive integer"),
        ("/pulls?state=done", 400, "state must be one of"),
    ],
)
def test_bad_ids_and_states_are_4xx(client: TestClient, url: str, status: int, text: str) -> None:
    r = client.get(url)
    assert r.status_code == status and text in r.text
    assert text in client.get("/api" + url).json()["error"]


def metastore_state(repo: zl.Repo) -> list[tuple[bytes, int]]:
    """(key, version) of every record in the refs and sessions partitions."""
    ctx = repo._context
    return [
        (k, v)
        for part in (ctx.refs.partition, ctx.partition("sessions"))
        for k, _, v in ctx.meta.scan(part)
    ]


def test_a_page_computes_the_checks_it_shows_without_recording_them(
    client: TestClient, repo: zl.Repo
) -> None:
    repo.create_branch("day3")
    write_row(repo, "day3", 6, 700, "a bad day 3")
    pr = repo.create_pull_request("day3", title="Day 3", author="bot")
    before = metastore_state(repo)
    assert not [k for k, _ in before if k.startswith(b"checkresult/" + pr.source_head.encode())]
    r = client.get(f"/pull/{pr.id}")
    assert 'data-name="t-range" data-passed="no"' in r.text and "outside [0, 100]" in r.text
    assert re.findall(r'<rect class="(cell [^"]*)"', r.text) == ["cell written failing"]
    doc = client.get(f"/api/pull/{pr.id}").json()
    assert [(c["name"], c["passed"], c["chunks"]) for c in doc["checks"]] == [
        ("t-range", False, [[6, 0]])
    ]
    assert client.get("/pulls").status_code == 200
    assert metastore_state(repo) == before  # no GET wrote anything
    assert pr.checks == [] and metastore_state(repo) == before  # reading runs nothing
    assert [c.passed for c in pr.run_checks()] == [False]  # running records what it computes
    assert metastore_state(repo) != before
