"""The `repo` argument of the zl.spark entry points: a Repo, a RepoSpec, or a location (a
path or URL, opened as `Repo.open` would), normalised in one place."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from zarrlake.connection import RepoSpec, resolve_spec
from zarrlake.errors import InvalidInputError
from zarrlake.spark.options import STORAGE_PREFIX

if TYPE_CHECKING:
    from zarrlake.repo import Repo

type RepoArg = Repo | RepoSpec | str | os.PathLike[str]
"""What a zl.spark entry point takes as `repo`."""


def spec_of(repo: RepoArg) -> RepoSpec:
    """Where `repo` is: a Repo's spec, a RepoSpec as given, or a location resolved as
    `Repo.open` resolves it (its metastore read from the repository's config when opened).

    Raises
    ------
    InvalidInputError
        If `repo` is none of these.
    """
    from zarrlake.repo import Repo

    if isinstance(repo, Repo):
        return repo.spec
    if isinstance(repo, RepoSpec):
        return repo
    if isinstance(repo, str | os.PathLike) and str(repo):
        return resolve_spec(repo, None, None)
    raise InvalidInputError(
        f"repo must be a zarrlake.Repo, a RepoSpec or a repository location (a path or URL), "
        f"not {repo!r}"
    )


def source_options(repo: RepoArg) -> dict[str, Any]:
    """The data source options that name `repo`: its location, and its metastore and storage
    options when it carries them (a Repo or a RepoSpec)."""
    spec = spec_of(repo)
    out: dict[str, Any] = {"repo": spec.location}
    if spec.metastore:
        out["metastore"] = spec.metastore
    for name, value in spec.storage_options:
        out[f"{STORAGE_PREFIX}{name}"] = value
    return out


@contextmanager
def opened(repo: RepoArg) -> Iterator[Repo]:
    """`repo` itself when it is a Repo (left open); otherwise the repository it names,
    opened for the block and closed after it."""
    from zarrlake.repo import Repo

    if isinstance(repo, Repo):
        yield repo
        return
    spec = spec_of(repo)
    own = Repo.open(
        spec.location,
        metastore=spec.metastore or None,
        storage_options=dict(spec.storage_options) or None,
    )
    try:
        yield own
    finally:
        own.close()
