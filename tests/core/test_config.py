"""A repository's settings after `create`: read them (`repo.config`, no I/O), change them for
every client (`save_config`, validated, by a conditional write), and give them, with the
content hash, to `open_or_create`."""

from __future__ import annotations

import multiprocessing

import pytest

import zarrlake as zl


def test_save_config_records_the_change_for_every_later_client(tmp_path):
    repo = zl.Repo.create(tmp_path / "r", settings={"commit_timeout": 90})
    assert repo.config.commit_timeout == 90 and repo.config.flush.idle is not None
    saved = repo.save_config(commit_timeout=120, flush={"idle": None})
    assert saved.commit_timeout == 120 and saved.flush.idle is None
    assert repo.config == saved  # this handle uses them at once
    again = zl.Repo.open(tmp_path / "r")
    assert again.config.commit_timeout == 120 and again.config.flush.idle is None
    # what open(settings=) gives is this connection's only
    local = zl.Repo.open(tmp_path / "r", settings={"commit_timeout": 5})
    assert local.config.commit_timeout == 5
    assert zl.Repo.open(tmp_path / "r").config.commit_timeout == 120


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"comit_timeout": 1}, "comit_timeout"),
        ({"commit_timeout": "soon"}, "commit_timeout"),
        ({"flush": {"idel": 1}}, "idel"),
    ],
)
def test_a_bad_setting_is_refused_and_nothing_written(tmp_path, changes, words):
    repo = zl.Repo.create(tmp_path / "r")
    before = (tmp_path / "r" / "zarrlake.json").read_bytes()
    with pytest.raises(zl.InvalidInputError, match=words):
        repo.save_config(**changes)
    assert (tmp_path / "r" / "zarrlake.json").read_bytes() == before


def _save(args: tuple[str, str, int]) -> None:
    where, field, value = args
    zl.Repo.open(where).save_config(**{field: value})


def test_two_clients_saving_different_settings_at_once_both_land(tmp_path):
    """Ten rounds of the race (a local directory has no conditional writes: its clients
    take turns; without them about one round in fifteen lost a setting)."""
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        for i in range(10):
            zl.Repo.create(tmp_path / f"r{i}")
            where = str(tmp_path / f"r{i}")
            pool.map(_save, [(where, "commit_timeout", 77), (where, "flush_wait", 9)], 1)
            config = zl.Repo.open(where).config
            assert (config.commit_timeout, config.flush_wait) == (77, 9), i


def test_open_or_create_takes_settings_and_the_content_hash(tmp_path):
    repo = zl.Repo.open_or_create(
        tmp_path / "r", content_hash="sha256", settings={"commit_timeout": 33}
    )
    assert repo.config.commit_timeout == 33
    assert zl.Repo.open(tmp_path / "r").config.commit_timeout == 33  # recorded at creation
    again = zl.Repo.open_or_create(tmp_path / "r", settings={"flush_wait": 4})
    assert again.config.flush_wait == 4 and again.config.commit_timeout == 33
    assert zl.Repo.open_or_create(tmp_path / "r", content_hash="sha256").config is not None
    with pytest.raises(zl.InvalidInputError, match="by sha256, not blake3"):
        zl.Repo.open_or_create(tmp_path / "r", content_hash="blake3")
