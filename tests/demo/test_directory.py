"""Where the demo may build its repository: a new or empty directory, or one an earlier
demo made; never another repository or other files."""

from __future__ import annotations

import pytest

import zarrlake as zl
from zarrlake.demo.directory import MARKER, is_demo_directory, prepare_directory
from zarrlake.errors import InvalidInputError


def test_new_and_empty_directories_are_used_and_marked(tmp_path):
    fresh, replaced = prepare_directory(tmp_path / "a" / "b")
    assert fresh == tmp_path / "a" / "b" and not replaced and is_demo_directory(fresh)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert prepare_directory(empty) == (empty, False)
    assert [p.name for p in empty.iterdir()] == [MARKER]


def test_an_earlier_demo_is_replaced(tmp_path):
    where, _ = prepare_directory(tmp_path / "demo")
    zl.Repo.create(where).close()
    (where / "leftover").write_text("x")
    again, replaced = prepare_directory(where)
    assert again == where and replaced
    assert [p.name for p in where.iterdir()] == [MARKER]


def test_another_repository_is_refused_and_kept(tmp_path):
    other = tmp_path / "quickstart-repo"
    repo = zl.Repo.create(other)
    head = repo.resolve("main")
    repo.close()
    before = sorted(p.relative_to(other) for p in other.rglob("*"))
    with pytest.raises(InvalidInputError, match="holds a zarrlake repository that the demo did"):
        prepare_directory(other)
    assert sorted(p.relative_to(other) for p in other.rglob("*")) == before
    assert zl.Repo.open(other).resolve("main") == head


@pytest.mark.parametrize("marker", ["", "{}", '{"made_by": "someone else"}', "[1]"])
def test_a_forged_or_broken_marker_does_not_count(tmp_path, marker):
    other = tmp_path / "other"
    other.mkdir()
    (other / "precious.txt").write_text("keep me")
    (other / MARKER).write_text(marker)
    with pytest.raises(InvalidInputError, match=f"{other} exists and is not empty"):
        prepare_directory(other)
    assert (other / "precious.txt").read_text() == "keep me"


def test_a_file_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("data")
    with pytest.raises(InvalidInputError, match="is a file"):
        prepare_directory(f)
    assert f.read_text() == "data"
