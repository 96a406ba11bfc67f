"""Bad input and broken backends give one clear zarrlake error that names the problem."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from zarrlake.errors import (
    ConfigurationError,
    InvalidInputError,
    NotFoundError,
    TransientError,
    ZarrLakeError,
)
from zarrlake.storage import open_storage


def assert_one_clear_line(exc: BaseException) -> None:
    """No multi-line Rust debug dump, no raw XML body."""
    text = str(exc)
    assert "\n" not in text, text
    assert "Debug source" not in text and "<?xml" not in text, text
    assert len(text) < 600, text


# -- locations and options --------------------------------------------------------------------


@pytest.mark.parametrize("location", ["gs://bucket/x", "ftp://host/x", "az://c/x", "hdfs:///x"])
def test_unknown_scheme(location: str) -> None:
    scheme = location.split("://")[0]
    with pytest.raises(InvalidInputError, match=f"unknown storage scheme '{scheme}'"):
        open_storage(location)


@pytest.mark.parametrize("location", ["", "memory://"])
def test_empty_locations(location: str) -> None:
    with pytest.raises(InvalidInputError, match="location"):
        open_storage(location)


def test_unknown_s3_option_named() -> None:
    with pytest.raises(InvalidInputError, match="endpoint, secret_key") as info:
        open_storage("s3://bucket/repo", endpoint="http://x", secret_key="k", region="eu-west-1")
    assert "endpoint_url" in str(info.value)  # lists the known options


@pytest.mark.parametrize("location", ["LOCAL", "memory://opts"])
def test_options_rejected_for_local_and_memory(location: str, tmp_path: Path) -> None:
    location = str(tmp_path / "d") if location == "LOCAL" else location
    with pytest.raises(InvalidInputError, match="endpoint_url"):
        open_storage(location, endpoint_url="http://127.0.0.1:9000")


@pytest.mark.parametrize(
    ("option", "value"), [("allow_http", "yes"), ("max_retries", True), ("region", 5)]
)
def test_s3_option_types_checked(option: str, value: Any) -> None:
    with pytest.raises(InvalidInputError, match=f"{option}="):
        open_storage("s3://bucket/repo", **{option: value})


def test_plain_http_endpoint_needs_allow_http() -> None:
    """The library says what to add, rather than failing later with a transport error."""
    with pytest.raises(InvalidInputError, match=r"plain HTTP; add --allow-http .* allow_http"):
        open_storage("s3://bucket/x", endpoint_url="http://127.0.0.1:9")
    open_storage("s3://bucket/x", endpoint_url="http://127.0.0.1:9", allow_http=True).close()


@pytest.mark.parametrize("location", ["s3://", "s3:///repo", "s3:///"])
def test_s3_location_without_bucket(location: str) -> None:
    with pytest.raises(InvalidInputError, match="no bucket"):
        open_storage(location)


@pytest.mark.parametrize("location", ["s3://bucket/a//b", "s3://bucket/a/../b"])
def test_s3_location_with_bad_prefix(location: str) -> None:
    with pytest.raises(InvalidInputError, match="invalid list prefix"):
        open_storage(location)


@pytest.mark.parametrize("location", ["file://host/data", "file://relative", "file:///x?y=1"])
def test_bad_file_urls(location: str) -> None:
    with pytest.raises(InvalidInputError, match="invalid file URL"):
        open_storage(location)


def test_local_location_that_is_a_file(tmp_path: Path) -> None:
    target = tmp_path / "a-file"
    target.write_bytes(b"")
    with pytest.raises(ConfigurationError, match="not a directory"):
        open_storage(str(target))


# -- invalid keys -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("", "non-empty"),
        ("/etc/passwd", "must not start with '/'"),
        ("a//b", "empty path segment"),
        ("../escape", "'..' segment"),
        ("a/\tb", "control character"),
        ("chunk#3", "#<digits>"),
    ],
)
def test_invalid_key_names_key_and_problem(key: str, problem: str) -> None:
    store = open_storage(f"memory://errors-{uuid.uuid4().hex}")
    with pytest.raises(InvalidInputError) as info:
        store.put(key, b"x")
    assert repr(key) in str(info.value)
    assert problem in str(info.value)
    assert isinstance(info.value, ValueError)


def test_not_found_names_key_and_store(tmp_path: Path) -> None:
    store = open_storage(str(tmp_path))
    with pytest.raises(NotFoundError) as info:
        store.get("refs/branch.main")
    assert str(info.value) == f"object 'refs/branch.main' not found in {tmp_path.as_uri()}"


# -- unreachable and misconfigured S3 ---------------------------------------------------------


def test_unreachable_endpoint_fails_fast_and_clearly() -> None:
    store = open_storage(
        "s3://bucket/repo",
        endpoint_url="http://127.0.0.1:1",
        access_key_id="test",
        secret_access_key="test",
        allow_http=True,
        connect_timeout=1,
        request_timeout=2,
        max_retries=0,
        retry_timeout=2,
    )
    for call in (
        lambda: store.get("k"),
        lambda: store.put("k", b"v"),
        lambda: store.put_if_absent("k", b"v"),
        lambda: list(store.list()),
        lambda: store.exists("k"),
    ):
        started = time.monotonic()
        with pytest.raises(TransientError) as info:
            call()
        assert time.monotonic() - started < 5  # after the default retry policy gave up
        assert "s3://bucket/repo" in str(info.value)
        assert "127.0.0.1:1" in str(info.value)
        assert "error sending request" in str(info.value)
        assert_one_clear_line(info.value)


def test_obstore_retries_are_the_only_ones_around_an_obstore_request() -> None:
    """A request obstore retried itself (its own retries, "after N retries") is not retried
    again by zarrlake's layers above it: one request each, however many layers wrap the
    store (retries nested in layers multiplied: 8 attempts of 4 requests each)."""
    from zarrlake.storage.base import WrapperObjectStore
    from zarrlake.storage.retrying import RetryingObjectStore

    raw = open_storage(
        "s3://bucket/repo",
        retry_policy=None,
        endpoint_url="http://127.0.0.1:1",  # a closed port
        access_key_id="test",
        secret_access_key="test",
        allow_http=True,
        max_retries=2,
    )
    calls = []

    class Counted(WrapperObjectStore):
        def get(self, key: str, byte_range: Any = None) -> bytes:
            calls.append(key)
            return self.inner.get(key, byte_range)

    layered = RetryingObjectStore(RetryingObjectStore(Counted(raw)))
    with pytest.raises(TransientError, match="after 2 retries"):
        layered.get("k")
    assert calls == ["k"]


def test_reading_back_a_lost_reply_keeps_trying_through_obstore_retries(tmp_path: Path) -> None:
    """Reading back a write whose reply was lost (the bucket metastore's SETTLE policy) keeps
    trying through an outage longer than obstore's own retries, within its timeout; the
    default policy leaves an error obstore gave up on to obstore."""
    from zarrlake.metastore.bucket.store import SETTLE
    from zarrlake.storage.base import WrapperObjectStore
    from zarrlake.storage.retrying import RetryingObjectStore

    raw = open_storage(str(tmp_path))
    raw.put("k", b"v")
    down = [3]

    class Outage(WrapperObjectStore):
        def get(self, key: str, byte_range: Any = None) -> bytes:
            if down[0]:
                down[0] -= 1
                error = TransientError("GET k failed (cannot reach the server): after 3 retries")
                error.retried = True  # type: ignore[attr-defined]  # (as obstore's come)
                raise error
            return self.inner.get(key, byte_range)

    assert RetryingObjectStore(Outage(raw), SETTLE).get("k") == b"v"
    assert down == [0]
    down[0] = 3
    with pytest.raises(TransientError, match="after 3 retries"):
        RetryingObjectStore(Outage(raw)).get("k")
    assert down == [2]


def test_missing_bucket_named_for_every_operation(s3_server: str) -> None:
    from tests.fixtures.s3 import s3_options

    bucket = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
    store = open_storage(f"s3://{bucket}/repo", **s3_options(s3_server))
    for call in (
        lambda: store.get("k"),
        lambda: store.get("k", (0, 4)),
        lambda: store.put("k", b"v"),
        lambda: store.put_if_absent("k", b"v"),
        lambda: store.delete("k"),
        lambda: list(store.list()),
        lambda: store.exists("k"),
    ):
        with pytest.raises(ConfigurationError) as info:
            call()
        assert f"bucket '{bucket}' does not exist" in str(info.value)
        assert_one_clear_line(info.value)


def test_s3_errors_are_zarrlake_errors_with_clean_messages(
    s3_location: tuple[str, dict[str, Any]],
) -> None:
    location, options = s3_location
    store = open_storage(location, **options)
    with pytest.raises(NotFoundError) as info:
        store.get("missing/key")
    assert str(info.value) == f"object 'missing/key' not found in {location}"
    with pytest.raises(ZarrLakeError):
        store.get("missing/key", (5, 9))
