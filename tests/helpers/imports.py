"""What a new process imported: the probes of the import-guard tests (tests/core/
test_cheap_import.py, tests/cli/test_startup.py) and the modules that a local repository's
open, log and read do not use."""

from __future__ import annotations

import ast
import subprocess
import sys

_ELSEWHERE = {
    # other features and backends, and what only writing sessions use: loaded when used
    "zarrlake.query",
    "zarrlake.vc.diff",
    "zarrlake.vc.checks",
    "zarrlake.vc.merge",
    "zarrlake.vc.purges",
    "zarrlake.vc.protection",
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
    "zarrlake.session_records",
    "zarrlake.txn.commit",
    "zarrlake.txn.staging",
    "zarrlake.txn.writers",
    "zarrlake.vc.gc_protocol",
    "zarrlake.vc.sweep_fence",
    "obstore",
    "psycopg",
    "pyspark",
    "pyarrow",
}

NOT_FOR_OPENING = _ELSEWHERE | {
    # third-party and stdlib that a local open never uses
    "numpy",
    "zarr",
    "google_crc32c",
    "asyncio",
    "ssl",
    "yaml",
    "importlib.metadata",
    "email",
    "zipfile",
    "hashlib",  # (a BLAKE3 repository: SHA-256 only for those that use it)
    "secrets",
    "glob",
    # the session and chunk machinery, loaded with the first session or chunk read
    "zarrlake.session",
    "zarrlake.txn.transaction",
    "zarrlake.zarr_store",
    "zarrlake.format.manifest",
    "zarrlake.format.snapshot",
    "zarrlake.format.columns",
    "zarrlake.format.statistics",
    "zarrlake.format.shard",
    "zarrlake.format.blocks",
    "zarrlake.vc.ranges",
    "zarrlake.vc.statistics",
    "zarrlake.vc.fsck",
    "zarrlake.vc.stats",
    "zarrlake.storage.locations",
}
"""What `import zarrlake` + `Repo.open` of a local repository, and reading its refs and
log, leave unloaded; `zarrlake log` too."""

NOT_FOR_READING = _ELSEWHERE | {
    # a read-only session's store stages, writes, commits and checks nothing
    "zarrlake.txn.birth",
    "zarrlake.txn.writes",
    "zarrlake.txn.refusals",
    "zarrlake.txn.unsettled",
    "zarrlake.txn.moves",
    "zarrlake.vc.commit_protocol",
    "zarrlake.vc.change_table",
    "zarrlake.vc.policies",
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
