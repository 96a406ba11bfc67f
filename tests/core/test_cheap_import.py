"""`import zarrlake` + `Repo.open` of a local repository (and its log) loads only what
opening needs: no numpy, obstore, asyncio, ssl or PostgreSQL driver, none of the write,
diff, check, pull, Spark, UI or virtual machinery; reading a chunk through a read-only
session loads none of the write path either. A new process does the open (or the read) and
prints what it imported (a test of modules, not of time; the benchmarks time it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr

import zarrlake as zl
from tests.helpers.imports import NOT_FOR_OPENING, NOT_FOR_READING, loaded, modules_after

OPEN = """
import sys
import zarrlake as zl
repo = zl.Repo.open(sys.argv[1])
print(list(repo.list_branches()), len(repo.log("main", limit=1)))
print(sorted(sys.modules), file=sys.stderr)
"""


def test_opening_a_local_repository_imports_only_what_opening_needs(tmp_path: Path) -> None:
    zl.Repo.create(tmp_path / "r").close()
    out, modules = modules_after(OPEN, str(tmp_path / "r"))
    assert out == "['main'] 1\n"  # the probe did open the repository, read refs and log
    assert "zarrlake.metastore.sqlite" in modules and "zarrlake.storage.local" in modules
    assert not loaded(modules, NOT_FOR_OPENING)


READ = """
import sys
import zarr
import zarrlake as zl
repo = zl.Repo.open(sys.argv[1])
store = repo.readonly_session("main").store
print(zarr.open_array(store, path=sys.argv[2], mode="r")[0:1, 0:4, 0:4].tolist())
print(sorted(sys.modules), file=sys.stderr)
"""


def test_reading_a_chunk_imports_none_of_the_write_path(tmp_path: Path) -> None:
    """Open + read one inner chunk of a sharded array (and one chunk of a plain one) in a
    new process: the read-only session's store loads no staging, writes, commit, diff,
    checks or gc protocol, and no session records."""
    values = np.arange(4 * 8 * 8, dtype="f4").reshape(4, 8, 8)
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    kw = {"shape": values.shape, "dtype": "f4", "chunks": (1, 4, 4)}
    zarr.create_array(s.store, name="sharded", shards=(2, 8, 8), **kw)[:] = values
    zarr.create_array(s.store, name="plain", **kw)[:] = values
    s.commit("two arrays")
    repo.close()
    for name in ("sharded", "plain"):
        out, modules = modules_after(READ, str(tmp_path / "r"), name)
        assert out == f"{values[0:1, 0:4, 0:4].tolist()}\n"  # the probe did read the chunk
        assert "zarrlake.txn.transaction" in modules and "zarrlake.zarr_store" in modules
        assert not loaded(modules, NOT_FOR_READING), name


def test_the_lazy_names_still_resolve_from_the_package_and_the_repo_module() -> None:
    code = (
        "import sys, zarrlake, zarrlake.repo as r; "
        "print(zarrlake.RepoStats is r.RepoStats, zarrlake.Commit is r.Commit, "
        "zarrlake.SessionInfo is r.SessionInfo); print([], file=sys.stderr)"
    )
    out, _ = modules_after(code)
    assert out == "True True True\n"


def test_the_default_session_expiry_is_one_constant() -> None:
    """`Repo.create_session`'s default is written once, in repo.py (opening imports no
    session records), and the session records keep no second copy of it."""
    import inspect
    from datetime import timedelta

    from zarrlake import session_records
    from zarrlake.repo import SESSION_EXPIRY, Repo

    default = inspect.signature(Repo.create_session).parameters["expires_in"].default
    assert default is SESSION_EXPIRY == timedelta(hours=24)
    copies = [v for v in vars(session_records).values() if v == SESSION_EXPIRY]
    assert copies == []
