"""What a new process imported: the probes of the import-guard tests (tests/core/
test_cheap_import.py, tests/cli/test_startup.py) and the modules that a local repository's
open, log and read do not use."""

from __future__ import annotations

import ast
import subprocess
import sys

NOT_FOR_OPENING = {
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
"""What `import zarrlake` + `Repo.open` of a local repository, and reading its refs and
log, leave unloaded; `zarrlake log` too."""

NOT_FOR_READING = {
    # a read-only session's store reads no session record and stages, writes, commits,
    # diffs and checks nothing
    "zarrlake.session_records",
    "zarrlake.txn.commit",
    "zarrlake.txn.birth",
    "zarrlake.txn.staging",
    "zarrlake.txn.writes",
    "zarrlake.txn.writers",
    "zarrlake.txn.refusals",
    "zarrlake.txn.unsettled",
    "zarrlake.txn.moves",
    "zarrlake.vc.commit_protocol",
    "zarrlake.vc.change_table",
    "zarrlake.vc.gc_protocol",
    "zarrlake.vc.sweep_fence",
    "zarrlake.vc.protection",
    "zarrlake.vc.diff",
    "zarrlake.vc.checks",
    "zarrlake.vc.policies",
    "zarrlake.vc.purges",
    "zarrlake.vc.merge",
    "zarrlake.query",
    "zarrlake.pulls",
    "zarrlake.checks",
    "zarrlake.spark",
    "zarrlake.ui",
    "zarrlake.virtual",
    "zarrlake.lifecycle",
    "zarrlake.admin",
    "zarrlake.storage.sources",
    "zarrlake.metastore.postgres",
    "zarrlake.metastore.bucket",
    "obstore",
    "psycopg",
    "pyspark",
    "pyarrow",
}
"""What opening a local repository and reading one chunk of an array through a read-only
session's zarr store leave unloaded."""


def modules_after(code: str, *args: str) -> tuple[str, set[str]]:
    """What `code` printed on stdout in a new process, and the modules it had imported
    (`code` prints `sorted(sys.modules)` as its last line on stderr)."""
    res = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return res.stdout, set(ast.literal_eval(res.stderr.strip().splitlines()[-1]))


def loaded(modules: set[str], unwanted: set[str]) -> list[str]:
    """The modules of `modules` that are, or lie below, one of `unwanted`."""
    return sorted(m for m in modules for u in unwanted if m == u or m.startswith(u + "."))
