"""Which metastore a repository uses: the kind its config records, checked against (or
filling in) the metastore URL its user passes.

A repository's config names the kind of its metastore ("bucket", "sqlite", "postgresql",
"memory", or another registered scheme), never its URL: server URLs carry passwords and
differ between machines. The bucket kind needs no URL (it lives at the repository's own
location), nor does SQLite in a local directory (`<dir>/metastore.sqlite`); the others do.
"""

from __future__ import annotations

from typing import Any

from zarrlake.errors import ConfigurationError, InvalidInputError
from zarrlake.metastore import open_metastore, registry
from zarrlake.metastore.base import MetaStore

BUCKET = "bucket"
"""metastore="bucket": kept in the repository's own object storage, on conditional writes
(the default for s3:// repositories)."""

_NAMES = {
    BUCKET: "its own bucket",
    "sqlite": "SQLite",
    "postgresql": "PostgreSQL",
    "memory": "memory",
}
_KINDS = {
    BUCKET: "a metastore in its own bucket",
    "sqlite": "a SQLite metastore",
    "postgresql": "a PostgreSQL metastore",
    "memory": "an in-memory metastore",
}
_EXAMPLES = {
    "postgresql": "metastore='postgresql://USER@HOST:PORT/DB'",
    "sqlite": "metastore='sqlite:////path/metastore.sqlite'",
    "memory": "metastore='memory://NAME'",
}


def kind_of(metastore: str) -> str:
    """The kind a config records for a metastore URL (or "bucket")."""
    scheme = metastore.partition("://")[0].lower() if "://" in metastore else metastore.lower()
    if scheme == BUCKET or scheme.startswith("bucket+"):
        return BUCKET
    return "postgresql" if scheme == "postgres" else scheme


def local_default(path: str) -> str:
    """The SQLite metastore of a repository in the local directory `path`."""
    return f"sqlite:///{path}/metastore.sqlite"


def default_for(location: str, is_local: bool) -> str:
    """The metastore a new repository gets when none is named: SQLite in a local directory,
    the memory metastore of the same name for memory://, else the bucket itself."""
    if is_local:
        return local_default(location)
    return location if location.startswith("memory://") else BUCKET


def choose(location: str, is_local: bool, given: str, recorded: str | None) -> str:
    """The metastore to open the repository at `location` with: `given` (a URL, "bucket",
    or "" for none) checked against the kind its config `recorded` (None in configs from
    before kinds were recorded). Raises InvalidInputError when a URL is needed but missing,
    ConfigurationError when `given` is of another kind than the repository uses."""
    if not given:
        default = default_for(location, is_local)
        if recorded == kind_of(default) or (recorded is None and default != BUCKET):
            return default
        if recorded == BUCKET:
            return BUCKET
        if recorded is None:
            raise InvalidInputError(
                f"the repository at {location} needs a metastore URL (metastore="
                "'postgresql://...' or 'sqlite:///path'); its config does not say which "
                "metastore it uses"
            )
        raise InvalidInputError(
            f"the repository at {location} keeps its metastore in "
            f"{_NAMES.get(recorded, recorded)}, which its config does not locate: pass "
            f"{_EXAMPLES.get(recorded, 'its metastore URL')} (on the command line "
            "--metastore or ZARRLAKE_METASTORE)"
        )
    if recorded is not None and kind_of(given) != recorded:
        raise ConfigurationError(
            f"the repository at {location} uses {_describe(recorded)} (its config says so), "
            f"not {_describe(kind_of(given))}: opening it with another would fork its history "
            "(`zarrlake metastore copy` moves a repository between metastores)"
            "; open it with the metastore its config names"
        )
    return given


def _describe(kind: str) -> str:
    return _KINDS.get(kind, f"a {kind} metastore")


def open_for(location: str, storage_options: dict[str, Any], metastore: str) -> MetaStore:
    """The raw metastore `metastore` of the repository at `location` ("bucket": the one
    kept in its own storage, reached with `storage_options`)."""
    if metastore == BUCKET:
        from zarrlake.metastore.bucket.store import BucketMetaStore

        return registry.opened(BucketMetaStore.open(location, storage_options))
    return open_metastore(metastore)
