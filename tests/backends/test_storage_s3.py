"""S3 object storage (moto's real HTTP server, tests/fixtures/s3.py) passes the conformance
suites; prefixes isolate repositories and moto enforces If-None-Match."""

from __future__ import annotations

from typing import Any

import pytest

from zarrlake.storage import open_storage
from zarrlake.testing.storage import (
    ForkedObjectStoreTests,
    ObjectStoreTests,
    SharedObjectStoreTests,
)
from zarrlake.testing.storage_conditional import ConditionalObjectStoreTests


class TestS3ObjectStore(
    ObjectStoreTests, SharedObjectStoreTests, ForkedObjectStoreTests, ConditionalObjectStoreTests
):
    @pytest.fixture
    def location(self, s3_location: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        return s3_location


def test_s3_prefix_isolates_repositories(s3_location: tuple[str, dict[str, Any]]) -> None:
    location, options = s3_location
    bucket_root = location.rsplit("/", 1)[0]
    repo = open_storage(location, **options)
    other = open_storage(bucket_root + "/other", **options)
    root = open_storage(bucket_root, **options)
    repo.put("k", b"repo")
    other.put("k", b"other")
    assert repo.get("k") == b"repo"
    assert sorted(root.list()) == ["other/k", "repo/k"]


def test_moto_enforces_if_none_match(s3_location: tuple[str, dict[str, Any]]) -> None:
    """moto's server honours If-None-Match: *, so the S3 put_if_absent tests mean something."""
    from botocore.exceptions import ClientError

    from tests.fixtures.s3 import s3_client

    location, options = s3_location
    bucket = location.removeprefix("s3://").split("/")[0]
    client = s3_client(options["endpoint_url"])
    client.put_object(Bucket=bucket, Key="direct", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=bucket, Key="direct", Body=b"2", IfNoneMatch="*")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    store = open_storage(location, **options)
    assert store.put_if_absent("k", b"1") is True
    assert store.put_if_absent("k", b"2") is False
    assert client.get_object(Bucket=bucket, Key="repo/k")["Body"].read() == b"1"
