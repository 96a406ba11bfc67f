"""The LIST group's moto server: its indexed listing answers as moto's own listing does
(same pages, tokens and truncation), and a client lists every object through it, in
sequence and in key ranges at once."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.s3.models import S3Backend

from benchmarks.listing import ListServer, _store
from benchmarks.listserver import _indexed_listing, object_key


class Indexed(S3Backend):
    """moto's backend with the listing index (a subclass: moto's own class is untouched)."""


_indexed_listing(Indexed)


def _pages(backend: S3Backend, prefix: str, start_after: str | None, max_keys: int) -> list:
    bucket = backend.get_bucket(backend.name)  # type: ignore[attr-defined]
    out, token = [], None
    while True:
        keys, truncated, token = backend.list_objects_v2(
            bucket, prefix, None, token, None if token else start_after, max_keys
        )
        out.append(([k.name for k in keys], truncated))
        if not truncated:
            return out


@pytest.fixture(scope="module")
def backends() -> tuple[S3Backend, S3Backend]:
    """moto's backend and the indexed one, each with a bucket of the same 61 objects."""
    plain = S3Backend("us-east-1", DEFAULT_ACCOUNT_ID)
    indexed = Indexed("us-east-1", DEFAULT_ACCOUNT_ID)
    tag = secrets.token_hex(4)  # bucket names are one namespace in the process
    for backend, name in ((plain, f"list-plain-{tag}"), (indexed, f"list-indexed-{tag}")):
        backend.name = name  # type: ignore[attr-defined]
        backend.create_bucket(name, "us-east-1")
        for i in range(60):
            backend.put_object(name, object_key(i), b"x", disable_notification=True)
        backend.put_object(name, "other", b"y", disable_notification=True)
    return plain, indexed


@pytest.mark.parametrize(
    ("prefix", "start_after", "max_keys"),
    [
        ("", None, 7),
        ("listing/chunks/", None, 10),
        ("listing/chunks/a", None, 3),
        ("listing/", "listing/chunks/8", 5),
        ("nothing/", None, 4),
        ("listing/chunks/", None, 1000),
    ],
)
def test_indexed_listing_pages_as_moto(
    backends: tuple[S3Backend, S3Backend], prefix: str, start_after: str | None, max_keys: int
) -> None:
    plain, indexed = backends
    want = _pages(plain, prefix, start_after, max_keys)
    assert _pages(indexed, prefix, start_after, max_keys) == want
    assert sum(len(names) for names, _ in want) > 0 or prefix == "nothing/"


def test_listing_server_lists_every_object(tmp_path: Path) -> None:
    n = 2_500  # three pages of 1,000
    server = ListServer(n, tmp_path / "listserver.log")
    try:
        store = _store(server.port)
        want = sorted(object_key(i).removeprefix("listing/") for i in range(n))
        assert sorted(store.list("chunks/")) == want
        assert sorted(store.list_parallel("chunks/", 8)) == want
    finally:
        server.close()
    assert server.proc.poll() is not None
