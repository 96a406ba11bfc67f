"""Suite 6: bad input. The public API is fuzzed (hypothesis) with invalid refs, branch and
tag names, expiry values, store keys, data, byte ranges and malformed metadata documents.
Every case must get a clear error (a ZarrLakeError or ValueError subclass, never a raw
KeyError/AttributeError/TypeError from deep inside) and leave the repository unchanged: all
refs and every object file under the repository directory compare equal before and after."""

from __future__ import annotations

import os
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarrlake as zl
from tests.helpers.chunks import zstd_chunk
from tests.helpers.reliability import size

SETTINGS = settings(
    max_examples=size(25, 500),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

BAD_NAMES = [
    "",
    ".",
    "..",
    "a/../b",
    "a..b",
    "/lead",
    "trail/",
    "a//b",
    "sp ace",
    "tab\tname",
    "nul\x00",
    "til~de",
    "car^et",
    "co:lon",
    "que?",
    "st*r",
    "br[acket",
    "back\\slash",
    "@",
    "a@{b",
    "x.lock",
    "end.",
    ".hidden",
    "a/.hidden",
    "\x7f",
    "é" * 200,
    "x" * 10_240,
]
ANY_TEXT = st.one_of(st.sampled_from(BAD_NAMES), st.text(max_size=40))
NON_STRINGS = st.sampled_from([None, 0, 1.5, b"main", ["main"], {"a": 1}, object()])
BAD_EXPIRY = st.one_of(
    st.sampled_from([None, 0, 3600, 1.5, "1h", timedelta(0), timedelta(seconds=-5)]),
    st.sampled_from([timedelta(days=8), timedelta.max, timedelta.min]),
    st.floats(allow_nan=True).map(lambda f: f),
    st.timedeltas(max_value=timedelta(seconds=0, microseconds=999_999)),
    st.timedeltas(min_value=timedelta(days=7, microseconds=1)),
)
BAD_KEYS = st.one_of(
    st.sampled_from(
        ["", "/", "/a", "a/", "a//b", "./a", "a/./b", "../a", "a/..", "a\x00b", "a\nb", "x" * 5000]
    ),
    NON_STRINGS,
)
BAD_DATA = st.sampled_from(["text", None, 5, 1.5, ["x"], {"a": b"b"}, object()])
BAD_RANGES = st.sampled_from(
    [(-1, 5), (5, 2), (0, -1), ("a", None), (0,), (0, 1, 2), 5, "0-4", (1.5, 3), (None, 2)]
)
BAD_DOCS = [
    b"not json",
    b"\xff\xfe",
    b"[1, 2]",
    b"null",
    b"{}",
    b'{"zarr_format": 2}',
    b'{"node_type": "array"}',
    b'{"zarr_format": 3, "node_type": "array"}',
    b'{"zarr_format": 3, "node_type": "table"}',
    b'{"zarr_format": 3, "node_type": "group", "attributes": 5}',
    b'{"zarr_format": 3, "node_type": "array", "shape": "x", "data_type": "int64", '
    b'"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1]}}, '
    b'"chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]}',
    b'{"zarr_format": 3, "node_type": "array", "shape": [-1], "data_type": "int64", '
    b'"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1]}}, '
    b'"chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]}',
    b'{"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "nope", '
    b'"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1]}}, '
    b'"chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]}',
]


def _clear(exc: BaseException) -> bool:
    if isinstance(exc, zl.ZarrLakeError):
        return True
    return isinstance(exc, ValueError) and not isinstance(
        exc, KeyError | AttributeError | TypeError
    )


class Fixture:
    """A committed repository plus a fingerprint of everything stored in it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.repo = zl.Repo.create(path)
        s = self.repo.create_session()
        root = zarr.open_group(s.store, mode="a")
        root.create_array("a", shape=(8,), chunks=(4,), dtype="i4", fill_value=0)[:] = 7
        s.commit("data")
        self.repo.create_tag("v1")
        self.session = self.repo.create_session()
        self.session.write("a/c/0", zstd_chunk(b"staged!!" * 2))  # 4 int32, as zarr stores

    def fingerprint(self) -> tuple:
        files = {
            str(p.relative_to(self.path)): p.stat().st_size
            for p in self.path.rglob("*")
            if p.is_file() and not p.name.startswith("metastore.sqlite")
        }
        return (
            self.repo.list_branches(),
            self.repo.list_tags(),
            files,
            sorted((r.id, r.state, r.expires_at) for r in self.repo.list_sessions()),
            self.session._staged_changes(),
        )

    def expect_clear_error(self, figures, fn, *args, **kwargs) -> BaseException:
        before = self.fingerprint()
        with pytest.raises(Exception) as info:
            fn(*args, **kwargs)
        assert _clear(info.value), f"{fn.__name__}{args!r:.200}: unclear {info.value!r:.300}"
        assert self.fingerprint() == before, f"{fn.__name__} changed the repository"
        figures["bad input: cases tried"] += 1
        return info.value


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Fixture:
    return Fixture(tmp_path_factory.mktemp("badinput") / "repo")


def _git_accepts(name: str) -> bool:
    """git's own verdict on a branch name, as an independent oracle."""
    if "\x00" in name or name == "@" or name.startswith("-"):
        return False  # `git branch` refuses "@" and a leading "-" too (so do new refs here)
    done = subprocess.run(
        ["git", "check-ref-format", f"refs/heads/{name}"], capture_output=True, check=False
    )
    return done.returncode == 0 and len(name.encode()) <= 255


@SETTINGS
@given(name=ANY_TEXT)
def test_ref_names(fx, figures, name):
    repo = fx.repo
    for fn in (repo.resolve, repo.log, repo.readonly_session, repo.diff):
        args = (name, "main") if fn == repo.diff else (name,)
        if name not in ("main", "v1"):
            fx.expect_clear_error(figures, fn, *args)
    for create, delete in (
        (repo.create_branch, repo.delete_branch),
        (repo.create_tag, repo.delete_tag),
    ):
        if name in repo.list_branches() or name in repo.list_tags():
            continue
        if _git_accepts(name):
            create(name)  # a valid name must work; undo it
            delete(name)
            figures["bad input: cases tried"] += 1
        else:
            fx.expect_clear_error(figures, create, name)
            fx.expect_clear_error(figures, delete, name)
    if not _git_accepts(name):
        fx.expect_clear_error(figures, repo.create_session, name)
        fx.expect_clear_error(figures, repo.checkout, name)


@SETTINGS
@given(value=NON_STRINGS)
def test_non_string_refs(fx, figures, value):
    repo = fx.repo
    for fn in (repo.resolve, repo.log, repo.readonly_session, repo.create_session, repo.checkout):
        fx.expect_clear_error(figures, fn, value)
    for fn in (repo.create_branch, repo.create_tag, repo.delete_branch, repo.delete_tag):
        fx.expect_clear_error(figures, fn, value)
    fx.expect_clear_error(figures, repo.create_branch, "ok-name", at=value)
    fx.expect_clear_error(figures, repo.join_session, value)
    if value is not None:
        fx.expect_clear_error(figures, repo.log, "main", limit=value if value != 0 else -1)


@SETTINGS
@given(expiry=BAD_EXPIRY)
def test_expiry_values(fx, figures, expiry):
    fx.expect_clear_error(figures, fx.repo.create_session, "main", expires_in=expiry)
    fx.expect_clear_error(figures, fx.session.update_expiration, expiry)


@SETTINGS
@given(key=BAD_KEYS, data=BAD_DATA, byte_range=BAD_RANGES)
def test_keys_data_and_byte_ranges(fx, figures, key, data, byte_range):
    s = fx.session
    fx.expect_clear_error(figures, s.write, key, b"x")
    fx.expect_clear_error(figures, s.read, key)
    fx.expect_clear_error(figures, s.delete, key)
    fx.expect_clear_error(figures, s.write_many, [("a/c/1", b"ok"), (key, b"x")])
    fx.expect_clear_error(figures, s.write, "a/c/1", data)
    fx.expect_clear_error(figures, s.read, "a/c/0", byte_range)
    fx.expect_clear_error(figures, s.commit, "msg", on_conflict=str(byte_range))


@pytest.mark.parametrize("doc", BAD_DOCS, ids=range(len(BAD_DOCS)))
def test_malformed_metadata_documents(fx, figures, doc):
    """A malformed zarr.json either is refused by zarrlake or makes zarr refuse to open it;
    nothing is committed and no reader is handed a node built from it."""
    before = fx.fingerprint()
    s = fx.repo.create_session()
    try:
        s.write("bad/zarr.json", doc)
    except zl.ZarrLakeError as e:
        assert "bad/zarr.json" in str(e)
    else:
        assert not doc.startswith(b'{"zarr_format": 3'), "a malformed v3 document was accepted"
        with pytest.raises(Exception) as info:
            zarr.open_array(s.store, path="bad", mode="r")
        if not _clear(info.value):
            figures["bad input: unclear errors raised by zarr itself"] += 1
    s.abandon()
    figures["bad input: cases tried"] += 1
    after = fx.fingerprint()
    assert after[:3] == before[:3] and after[4] == before[4]


def test_fingerprint_notices_changes(fx, tmp_path):
    """The 'unchanged' check can fail: a commit or a new ref changes the fingerprint."""
    before = fx.fingerprint()
    fx.repo.create_branch("probe")
    assert fx.fingerprint() != before
    fx.repo.delete_branch("probe")
    assert fx.fingerprint() == before
    assert os.path.isdir(fx.path / "commits")
