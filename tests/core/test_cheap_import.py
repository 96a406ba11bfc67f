"""`import zarrlake` + `Repo.open` of a local repository (and its log) loads only what
opening needs: no numpy, obstore, asyncio, ssl or PostgreSQL driver, none of the write,
diff, check, pull, Spark, UI or virtual machinery. A new process does the open and prints
what it imported (a test of modules, not of time; the benchmark STARTUP group times it)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import zarrlake as zl

OPEN = """
import sys
import zarrlake as zl
repo = zl.Repo.open(sys.argv[1])
print(list(repo.list_branches()), len(repo.log("main", limit=1)))
print(sorted(sys.modules), file=sys.stderr)
"""

FORBIDDEN = {
    # third-party and stdlib that a local open never uses
    "numpy",
    "zarr",
    "obstore",
    "google_crc32c",
    "asyncio",
    "ssl",
    "psycopg",
    "pyspark",
    "pyarrow",
    "yaml",
    "importlib.metadata",
    "email",
    "zipfile",
    "hashlib",  # (a BLAKE3 repository: SHA-256 only for those that use it)
    "secrets",
    "glob",
    # zarrlake machinery that loads with its first use
    "zarrlake.session",
    "zarrlake.session_records",
    "zarrlake.vc.gc_protocol",
    "zarrlake.vc.sweep_fence",
    "zarrlake.vc.purges",
    "zarrlake.vc.protection",
    "zarrlake.txn.transaction",
    "zarrlake.txn.commit",
    "zarrlake.txn.staging",
    "zarrlake.txn.writers",
    "zarrlake.zarr_store",
    "zarrlake.format.manifest",
    "zarrlake.format.snapshot",
    "zarrlake.format.columns",
    "zarrlake.format.statistics",
    "zarrlake.format.shard",
    "zarrlake.format.blocks",
    "zarrlake.vc.ranges",
    "zarrlake.storage.sources",
    "zarrlake.vc.statistics",
    "zarrlake.query",
    "zarrlake.vc.diff",
    "zarrlake.vc.fsck",
    "zarrlake.vc.checks",
    "zarrlake.vc.merge",
    "zarrlake.vc.stats",
    "zarrlake.pulls",
    "zarrlake.checks",
    "zarrlake.spark",
    "zarrlake.ui",
    "zarrlake.virtual",
    "zarrlake.lifecycle",
    "zarrlake.admin",
    "zarrlake.metastore.postgres",
    "zarrlake.metastore.bucket",
    "zarrlake.storage.locations",
}


def modules_after(code: str, *args: str) -> tuple[str, set[str]]:
    """What `code` printed on stdout in a new process, and the modules it had imported."""
    res = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return res.stdout, set(ast.literal_eval(res.stderr.strip().splitlines()[-1]))


def test_opening_a_local_repository_imports_only_what_opening_needs(tmp_path: Path) -> None:
    zl.Repo.create(tmp_path / "r").close()
    out, modules = modules_after(OPEN, str(tmp_path / "r"))
    assert out == "['main'] 1\n"  # the probe did open the repository, read refs and log
    assert "zarrlake.metastore.sqlite" in modules and "zarrlake.storage.local" in modules
    loaded = {m for m in modules for f in FORBIDDEN if m == f or m.startswith(f + ".")}
    assert not loaded, sorted(loaded)


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
