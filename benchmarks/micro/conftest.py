"""Options and shared fixtures of the micro-benchmarks."""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import Iterator

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--bench-quick", action="store_true", help="small sizes, fewer rounds")


@pytest.fixture(scope="session")
def quick(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--bench-quick"))


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    """A throwaway PostgreSQL server (fsync off) for the session."""
    from zarrlake.testing.servers import running_postgres

    with running_postgres() as url:
        yield url


@pytest.fixture(params=["memory", "sqlite", "sqlite-full", "postgres"])
def metastore_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each metastore backend zarrlake ships, on this machine."""
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        if request.param == "memory":
            yield f"memory://bench-{uuid.uuid4().hex}"
        elif request.param == "sqlite":
            yield f"sqlite:///{tmp}/normal.db"
        elif request.param == "sqlite-full":
            yield f"sqlite:///{tmp}/full.db?synchronous=full"
        else:
            from zarrlake.testing.servers import create_database, database_url, drop_database

            admin = request.getfixturevalue("postgres_admin_url")
            name = create_database(admin)
            stack.callback(drop_database, admin, name)
            yield database_url(admin, name)
